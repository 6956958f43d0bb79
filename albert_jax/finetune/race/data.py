"""RACE data (SPEC 8.4): readers of the original download and of TFDS `race/<level>`, and the
prediction writer.

  questions = race.read_split("RACE", "dev")            # RACE/dev/{middle,high}/*.txt
  race.write_predictions(workdir, questions, chosen)    # <workdir>/RACE.tsv, A-D

Each file of the download is one JSON article {"article", "questions", "options", "answers",
"id"}; every question becomes one `examples.ChoiceQuestion` (with its level). Unlike the reference
(race_utils.py), which reads the files in os.listdir order and trusts the lists, files are read
in sorted order and a file whose lists disagree raises a one-line ValueError naming it. Folders
are local or in a bucket (gs://, read through etils.epath).
"""
from __future__ import annotations

import json
import operator
import os
from typing import Any, Iterator, Sequence

from etils import epath

from albert_jax import files
from albert_jax.finetune.core.examples import ChoiceQuestion
from albert_jax.finetune.core.text_files import open_text

LEVELS: tuple[str, ...] = ("middle", "high")
ANSWER_LETTERS = "ABCD"  # SPEC 8.4: 4 choices.
SUBMISSION_FILE = "RACE.tsv"


def _questions(data: Any, where: str, id_prefix: str, level: str) -> list[ChoiceQuestion]:
    """The questions of one parsed article; `where` names it in errors."""
    expected = ('expected a JSON object {"article": str, "questions": [str], "options": '
                '[[4 str]], "answers": ["A".."D"], "id": str}')
    if not isinstance(data, dict) or not isinstance(data.get("article"), str):
        raise ValueError(f"{where}: no article text; {expected}")
    questions: Any = data.get("questions")  # JSON values, checked below
    options: Any = data.get("options")
    answers = data.get("answers")  # None: an unanswered (prediction-only) article.
    lists = {"questions": questions, "options": options}
    if answers is not None:
        lists["answers"] = answers
    for key, value in lists.items():
        if not isinstance(value, list):
            raise ValueError(f"{where}: {key} is not a list; {expected}")
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{where}: lists of different lengths "
                         f"({', '.join(f'{len_} {key}' for key, len_ in lengths.items())}); "
                         f"every question needs its options and answer")
    result = []
    for number, (question, choices) in enumerate(zip(questions, options)):
        if not isinstance(choices, list) or len(choices) != len(ANSWER_LETTERS):
            count = len(choices) if isinstance(choices, list) else "no list of"
            raise ValueError(f"{where}: question {number} has {count} options; RACE needs "
                             f"exactly {len(ANSWER_LETTERS)}")
        answer = None
        if answers is not None:
            if answers[number] not in tuple(ANSWER_LETTERS):
                raise ValueError(f"{where}: question {number} has the answer "
                                 f"{answers[number]!r}; expected one of A, B, C, D")
            answer = ANSWER_LETTERS.index(answers[number])
        result.append(ChoiceQuestion(
            id=f"{id_prefix}-{number}", article=data["article"], question=str(question),
            options=tuple(str(choice) for choice in choices), answer=answer, level=level))
    return result


def _check_levels(levels: Sequence[str]) -> None:
    unknown = [level for level in levels if level not in LEVELS]
    if unknown or not levels:
        raise ValueError(f"unknown RACE levels {list(levels)!r}; use middle and/or high")


def read_split(data_path: str, split: str,
               levels: Sequence[str] = LEVELS) -> list[ChoiceQuestion]:
    """The questions of `<data_path>/<split>/<level>/*.txt` for each level, files in sorted order.

    `data_path` is the RACE folder of the download (with train/, dev/, test/).
    """
    _check_levels(levels)
    if not epath.Path(data_path).is_dir():
        raise FileNotFoundError(f"RACE data folder {data_path} does not exist; give the RACE "
                                f"folder of the download (with train/, dev/, test/)")
    questions = []
    for level in levels:
        folder = os.path.join(data_path, split, level)
        if not epath.Path(folder).is_dir():
            raise FileNotFoundError(f"RACE split folder {folder} does not exist; {data_path} "
                                    f"should hold {split}/{level}/*.txt as in the download")
        for file_name in sorted(_names(folder)):
            if not file_name.endswith(".txt"):  # As the reference, skip other files.
                continue
            path = os.path.join(folder, file_name)
            with open_text(path) as file:
                text = file.read()
            try:
                data = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not a RACE JSON file ({error}); expected one JSON "
                                 f"object with article, questions, options, answers") from None
            questions.extend(_questions(data, path, f"{split}/{level}/{file_name}", level))
    return questions


def _names(folder: str) -> list[str]:
    """The names in `folder` (local or gs://), as os.listdir gives them."""
    return [entry.name for entry in epath.Path(folder).iterdir()]


def _files_under(folder: str) -> Iterator[str]:
    """The paths of the files under `folder`, at any depth, each `folder` joined with the names
    on the way (as os.walk makes them; os.walk does not list a gs:// folder)."""
    for name in _names(folder):
        path = os.path.join(folder, name)
        if epath.Path(path).is_dir():
            yield from _files_under(path)
        else:
            yield path


def _level_rank(file_path: str) -> int:
    """The index in LEVELS of the middle/ or high/ folder a file is in (high when neither)."""
    # Lexical, so a gs:// path splits the same way.
    parts = os.path.normpath(file_path).split(os.sep)[:-1]
    return LEVELS.index(next((part for part in reversed(parts) if part in LEVELS), "high"))


def read_path(path: str) -> list[ChoiceQuestion] | None:
    """The questions of one RACE .txt file, or of every .txt file under a folder (sorted, levels
    taken from a middle/ or high/ folder on the way, else "high"); None when `path` is neither
    (`albert-jax predict` then reads it as a table of its own). Ids are as `read_split` makes
    them, from the folder given: `RACE/dev` gives "dev/high/1234.txt-0"."""
    if epath.Path(path).is_dir():
        # As read_split: middle before high, each folder's files in sorted order.
        paths = sorted((file_path for file_path in _files_under(path)
                        if file_path.endswith(".txt")),
                       key=lambda file_path: (_level_rank(file_path), file_path))
    elif path.endswith(".txt"):
        paths = [path]
    else:
        return None
    questions = []
    for file_path in paths:
        level = LEVELS[_level_rank(file_path)]
        with open_text(file_path) as file:
            try:
                data = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"{file_path}: not a RACE JSON file ({error}); expected one JSON "
                                 "object with article, questions, options, answers") from None
        # Lexical: a gs:// path gives the ids a local copy of it gives.
        id_prefix = os.path.relpath(file_path, os.path.dirname(os.path.normpath(path)))
        questions.extend(_questions(data, file_path, id_prefix, level))
    return questions


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_tfds_split(tfds_name: str, split: str,
                    data_dir: str | None = None) -> list[ChoiceQuestion]:
    """The questions of one split ("train", "dev", "test") of TFDS `race/<level>`.

    TFDS keeps an article's JSON `id` (e.g. "high1234.txt") as `example_id`; ids are built as
    `read_split` builds them from the file name ("dev/high/1234.txt-0"), and questions are sorted
    by it. Read as ArrayRecord, which needs no TensorFlow.
    """
    import tensorflow_datasets as tfds

    source = tfds.data_source(tfds_name, split=split, data_dir=data_dir,
                              builder_kwargs={"file_format": "array_record"})
    level = source.dataset_info.config_name
    _check_levels([level])
    articles = []
    for number in range(len(source)):
        record = source[number]
        example_id = _text(record["example_id"])
        file_name = example_id[len(level):] if example_id.startswith(level) else example_id
        data = {"article": _text(record["article"]),
                "questions": [_text(question) for question in record["questions"]],
                "options": [[_text(option) for option in options]
                            for options in record["options"]],
                "answers": [_text(answer) for answer in record["answers"]]}
        where = f"TFDS {tfds_name} split {split} record {number} ({example_id})"
        articles.append((file_name, where, data))
    questions = []
    for file_name, where, data in sorted(articles, key=lambda article: article[0]):
        questions.extend(_questions(data, where, f"{split}/{level}/{file_name}", level))
    return questions


def write_predictions(directory: str, questions: Sequence[ChoiceQuestion],
                      predictions: Sequence[int]) -> str:
    """Writes `<directory>/RACE.tsv`: header "id\\tprediction", then each question's id and its
    predicted option as a letter A-D. Written to a temporary file and renamed; returns the path.
    """
    if len(predictions) != len(questions):
        raise ValueError(f"{len(predictions)} predictions for {len(questions)} RACE questions")
    lines = ["id\tprediction\n"]
    for question, prediction in zip(questions, predictions):
        try:
            option = operator.index(prediction)  # Any integer type; not floats or strings.
        except TypeError:
            option = -1
        if not 0 <= option < len(ANSWER_LETTERS):
            raise ValueError(f"prediction {prediction!r} for RACE question {question.id} is not "
                             f"an option number 0..3")
        lines.append(f"{question.id}\t{ANSWER_LETTERS[option]}\n")
    path = epath.Path(directory) / SUBMISSION_FILE
    files.write_atomically(path, "".join(lines))
    return os.fspath(path)
