"""RACE readers (download folder and TFDS) and the prediction file (SPEC 8.4)."""
import json
import os
import re

import numpy as np
import pytest
import tensorflow_datasets as tfds

from albert_jax.finetune.core.examples import ChoiceQuestion
from albert_jax.finetune.race import data as race
from finetune_fixtures import write_race


def race_question(question_id, level, article, question, options, answer) -> ChoiceQuestion:
    """A RACE question in the reference's field order (id, level, article, ...)."""
    return ChoiceQuestion(question_id, article, question, options, answer, level=level)


def test_read_split_matches_the_files(tmp_path):
    data_path = write_race(tmp_path, articles_per_level=3, questions_per_article=2, seed=1)
    questions = race.read_split(data_path, "dev")
    expected = []
    for level in ("middle", "high"):
        folder = os.path.join(data_path, "dev", level)
        for file_name in sorted(os.listdir(folder)):
            data = json.load(open(os.path.join(folder, file_name), encoding="utf-8"))
            assert data["id"] == f"{level}{file_name}"
            for number, question in enumerate(data["questions"]):
                expected.append(race_question(
                    f"dev/{level}/{file_name}-{number}", level, data["article"], question,
                    tuple(data["options"][number]), "ABCD".index(data["answers"][number])))
    assert questions == expected
    assert len(questions) == 2 * 3 * 2
    assert [question.level for question in race.read_split(data_path, "test", ["high"])] == [
        "high"] * 6


def test_hand_written_article(tmp_path):
    folder = tmp_path / "RACE" / "train" / "middle"
    folder.mkdir(parents=True)
    (tmp_path / "RACE" / "train" / "high").mkdir()
    (folder / "notes.md").write_text("not an article")  # Skipped, as in the reference.
    (folder / "10.txt").write_text(json.dumps(
        {"answers": ["C", "A"], "options": [["x", "y", "z", "w"], ["1", "2", "3", "4"]],
         "questions": ["Tom went to the _ .", "Why?"], "article": "Tom went to the park.\nIt "
         "was \"sunny\".", "id": "middle10.txt"}))
    (folder / "9.txt").write_text('{"answers": ["D"], "options": [["a", "b", "c", "d"]], '
                                  '"questions": ["Q?"], "article": "A.", "id": "middle9.txt"}')
    questions = race.read_split(str(tmp_path / "RACE"), "train")
    # Files in sorted (string) order: 10.txt before 9.txt.
    assert questions == [
        race_question("train/middle/10.txt-0", "middle", 'Tom went to the park.\nIt was "sunny".',
                      "Tom went to the _ .", ("x", "y", "z", "w"), 2),
        race_question("train/middle/10.txt-1", "middle", 'Tom went to the park.\nIt was "sunny".',
                      "Why?", ("1", "2", "3", "4"), 0),
        race_question("train/middle/9.txt-0", "middle", "A.", "Q?", ("a", "b", "c", "d"), 3)]


def _write(path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="RACE data folder .*/nowhere does not exist"):
        race.read_split(str(tmp_path / "nowhere"), "dev")
    data_path = write_race(tmp_path, 1, 1, 0, splits=("dev",))
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"RACE split folder {os.path.join(data_path, 'train', 'middle')} does not exist")):
        race.read_split(data_path, "train")
    with pytest.raises(ValueError, match="unknown RACE levels"):
        race.read_split(data_path, "dev", ["college"])

    folder = tmp_path / "RACE" / "dev" / "high"
    good = {"answers": ["A"], "options": [["a", "b", "c", "d"]], "questions": ["Q?"],
            "article": "Text.", "id": "high5.txt"}
    cases = [
        ("{not json", r"not a RACE JSON file \(Expecting property name"),
        ({**good, "options": [["a", "b", "c"]]}, "question 0 has 3 options; RACE needs exactly 4"),
        ({**good, "answers": ["E"]}, "question 0 has the answer 'E'; expected one of A, B, C, D"),
        ({**good, "answers": ["A", "B"]},
         r"lists of different lengths \(1 questions, 1 options, 2 answers\)"),
        ({**good, "questions": "Q?"}, "questions is not a list"),
    ]
    for data, message in cases:
        path = _write(folder / "5.txt", data)
        with pytest.raises(ValueError, match=re.escape(path) + ": " + message):
            race.read_split(data_path, "dev")


def test_unanswered_articles(tmp_path):
    folder = tmp_path / "RACE" / "test" / "high"
    folder.mkdir(parents=True)
    _write(folder / "1.txt", {"options": [["a", "b", "c", "d"]], "questions": ["Q?"],
                              "article": "Text.", "id": "high1.txt"})
    (question,) = race.read_split(str(tmp_path / "RACE"), "test", ["high"])
    assert question.answer is None


def test_write_predictions(tmp_path):
    questions = race.read_split(write_race(tmp_path, 1, 2, 0, splits=("test",)), "test")
    path = race.write_predictions(str(tmp_path / "out"), questions, [0, 3, np.int64(1), 2])
    assert path == str(tmp_path / "out" / "RACE.tsv")
    assert open(path).read().split("\n") == [
        "id\tprediction", f"{questions[0].id}\tA", f"{questions[1].id}\tD",
        f"{questions[2].id}\tB", f"{questions[3].id}\tC", ""]
    assert questions[0].id.startswith("test/middle/")
    with pytest.raises(ValueError, match="prediction 4 for RACE question .* is not an option"):
        race.write_predictions(str(tmp_path / "out"), questions, [0, 1, 2, 4])
    with pytest.raises(ValueError, match="prediction 1.0 for RACE question"):
        race.write_predictions(str(tmp_path / "out"), questions, [0, 1.0, 2, 3])
    with pytest.raises(ValueError, match="3 predictions for 4 RACE questions"):
        race.write_predictions(str(tmp_path / "out"), questions, [0, 1, 2])
    assert os.listdir(tmp_path / "out") == ["RACE.tsv"]


class _Records(list):
    def __init__(self, records, dataset_info):
        super().__init__(records)
        self.dataset_info = dataset_info


def test_tfds_split():
    # The installed race builder's features (MockPolicy.USE_CODE), with these records.
    def record(example_id, questions, answers):
        return {"article": f"Article {example_id}.".encode(), "example_id": example_id.encode(),
                "questions": np.array([question.encode() for question in questions], object),
                "answers": np.array([answer.encode() for answer in answers], object),
                "options": np.array([[f"{q}{letter}".encode() for letter in "abcd"]
                                     for q in range(len(questions))], object)}

    def as_data_source(builder, split, **kwargs):
        assert (builder.info.config_name, split) == ("high", "dev")
        return _Records([record("high20.txt", ["Why _ ?"], ["D"]),
                         record("high100.txt", ["Who?", "When?"], ["A", "C"])], builder.info)

    with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                                as_data_source_fn=as_data_source):
        questions = race.read_tfds_split("race/high", "dev")
    assert questions == [
        race_question("dev/high/100.txt-0", "high", "Article high100.txt.", "Who?",
                      ("0a", "0b", "0c", "0d"), 0),
        race_question("dev/high/100.txt-1", "high", "Article high100.txt.", "When?",
                      ("1a", "1b", "1c", "1d"), 2),
        race_question("dev/high/20.txt-0", "high", "Article high20.txt.", "Why _ ?",
                      ("0a", "0b", "0c", "0d"), 3)]


def test_tfds_random_records_are_checked():
    # TFDS's generated examples have lists of random lengths: the reader names the record.
    with tfds.testing.mock_data(num_examples=2, policy=tfds.testing.MockPolicy.USE_CODE):
        with pytest.raises(ValueError, match=r"TFDS race/middle split train record \d \(.*\): "
                                             r"lists of different lengths"):
            race.read_tfds_split("race/middle", "train")
