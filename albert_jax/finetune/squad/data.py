"""SQuAD v1.1 / v2.0 (SPEC 8.3): readers of the official JSON and TFDS, and sliding-window features.

  examples = read_squad("dev-v2.0.json", "v2.0")  # or read_tfds("squad/v2.0", "validation", ...)
  arrays, infos, stats = build_features(examples, tokenizer, version="v2.0",
                                        max_seq_length=MAX_SEQ_LENGTH["v2.0"], training=False)
  # arrays["input_ids"] etc. [num_features, max_seq_length] -> the model, then
  # postprocess.postprocess_v2(examples, infos, ...) -> predictions.json & co.

Public API:
  VERSIONS, MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH
  Answer(text, char_start); SquadExample(id, question, context, answers, is_impossible)
  read_squad(path, version) -> list[SquadExample]
  read_tfds(tfds_name, split, version, data_dir=None, download=True) -> list[SquadExample]
  WINDOWS_WITHOUT_ANSWER; check_windows_without_answer(value, version, name)
  build_features(examples, tokenizer, *, version, max_seq_length, doc_stride=128,
                 max_query_length=64, training, windows_without_answer="cls")
      -> (arrays, list[FeatureInfo], FeatureStats)
  FeatureInfo(example_index, window_index, context_offset, token_start, char_starts, char_ends,
              is_max_context); .text(context, start, end)
  FeatureStats: counters of what building saw; .report() is one line.
  answer_token_span(char_starts, char_ends, answer) -> (first, last) tokens or None

Character alignment. Answers are character offsets into the ORIGINAL context, the model sees
SentencePiece pieces of the PREPROCESSED context (SPEC 2.2). Instead of the reference's fuzzy
alignment (an LCS between the original text and the detokenised pieces, which shifts or silently
drops answers when it fails), `Tokenizer.encode_with_offsets` gives every token the original
characters it covers, [char_start, char_end), exactly. An answer maps to the first and last
piece that overlap it; a predicted span maps back to context[char_starts[first]:char_ends[last]].

Training labels (what happens to answers that do not fit; each case is counted in FeatureStats):
  * an answer whose characters produce no piece (only whitespace or accents) drops the example;
  * an answer that starts or ends inside a piece is labelled with the pieces that cover it (the
    model can only predict whole pieces; the reference does the same);
  * a window that does not contain the whole answer is labelled "no answer": start = end = 0
    ([CLS]), is_impossible=1, for v1.1 and v2.0 alike, as the reference's
    `convert_examples_to_features` does (its `continue` that would drop the window is commented
    out; BERT's run_squad and HuggingFace's run_qa label it [CLS] too). A v1.1 model so learns
    what a window without the answer looks like, and every window of a long context puts
    forward candidates at prediction. `windows_without_answer="drop"` (v1.1 only) drops such
    windows instead, as albert_jax did before; an answer in no window then drops its example.
    v1.1 prediction never answers [CLS] (postprocess.py: spans lie in the context).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any, Mapping, Sequence

import numpy as np
from absl import logging

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.errors import ConfigError
from albert_jax.finetune.core.windows import max_context_windows, sliding_windows

VERSIONS = ("v1.1", "v2.0")
# SPEC 8.3 flags; v2.0 uses 512 as in the paper (Table 14), v1.1 the script default 384.
MAX_SEQ_LENGTH = {"v1.1": 384, "v2.0": 512}
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
# What a training window that does not hold the whole answer becomes (module docstring): "cls"
# labels it start = end = 0 as the reference (SPEC 8.3); "drop" leaves it out (v1.1 only).
WINDOWS_WITHOUT_ANSWER = ("cls", "drop")

_NUM_IDS_SHOWN = 5  # question ids a warning lists


@dataclasses.dataclass(frozen=True)
class Answer:
    """One gold answer: `text` starts at character `char_start` of the context."""
    text: str
    char_start: int


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question. Training uses answers[0]; dev files have several answers per question."""
    id: str  # the question id of the file; predictions are keyed by it
    question: str
    context: str
    answers: tuple[Answer, ...]
    is_impossible: bool  # v2.0 only; always False for v1.1


@dataclasses.dataclass(frozen=True)
class FeatureInfo:
    """What post-processing needs to map the positions of one window back to the context.

    `context_offset` is the sequence position of the window's first context token (after
    [CLS] question [SEP]), `token_start` its index among the context's tokens; the arrays are
    [window_tokens], one entry per context token of the window.
    """
    example_index: int
    window_index: int
    context_offset: int
    token_start: int
    char_starts: np.ndarray  # int32: original-context character where each token starts
    char_ends: np.ndarray  # int32: ... and where it ends (exclusive); equal for a lone "▁"
    is_max_context: np.ndarray  # bool: this window gives the token its most context

    def text(self, context: str, start: int, end: int) -> str:
        """Original context text of the context tokens start..end (window-relative, inclusive)."""
        return context[self.char_starts[start]:self.char_ends[end]]


@dataclasses.dataclass
class FeatureStats:
    """Counters of what `build_features` saw; problems are counted, never silent."""
    examples: int = 0
    features: int = 0
    split_contexts: int = 0  # contexts longer than one window, split into several windows
    truncated_questions: int = 0  # cut to max_query_length tokens
    several_answers: int = 0  # training examples with several answers: the first one trains
    answers_not_found: int = 0  # training answers that produce no piece: example dropped
    answers_inside_pieces: int = 0  # start or end inside a piece: labelled with covering pieces
    windows_without_answer: int = 0  # labelled [CLS] ("cls"), or dropped ("drop", v1.1)
    answers_in_no_window: int = 0  # answers longer than any window: all its windows lack it
    dropped_qids: list[str] = dataclasses.field(default_factory=list)

    def report(self) -> str:
        counters = [field.name for field in dataclasses.fields(self)][2:-1]
        problems = [f"{value} {name.replace('_', ' ')}" for name in counters
                    if (value := getattr(self, name))]
        dropped = (f"; dropped question ids: {', '.join(self.dropped_qids[:_NUM_IDS_SHOWN])}"
                   + (" ..." if len(self.dropped_qids) > _NUM_IDS_SHOWN else "")
                   if self.dropped_qids else "")
        return (f"{self.features} features from {self.examples} examples"
                + (f"; {', '.join(problems)}" if problems else "") + dropped)


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------

def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise ConfigError(f"SQuAD version must be one of {VERSIONS}, got {version!r}")


def _file_version(value: Any) -> str | None:
    # The official files say "1.1" (v1.1) and "v2.0" (v2.0).
    text = str(value).strip().lower().lstrip("v")
    return {"1.1": "v1.1", "2.0": "v2.0"}.get(text)


def _make_example(qa: Mapping[str, Any], context: str, version: str, where: str) -> SquadExample:
    """Validates one question (`where` names it in errors) and builds its SquadExample."""
    for key in ("id", "question", "answers"):
        if key not in qa:
            raise ValueError(f"{where} has no key {key!r}; every question needs id, question, "
                             "answers")
    qid = str(qa["id"])
    where = f"{where} (id {qid!r})"
    if version == "v1.1" and "is_impossible" in qa:
        raise ConfigError(
            f"{where} has key 'is_impossible', which only SQuAD v2.0 files have, but version "
            f"v1.1 was asked for; set the SQuAD version to v2.0 or read a v1.1 file")
    if version == "v2.0" and "is_impossible" not in qa:
        raise ConfigError(
            f"{where} has no key 'is_impossible', which every SQuAD v2.0 question has, but "
            f"version v2.0 was asked for; set the SQuAD version to v1.1 or read a v2.0 file")
    is_impossible = qa.get("is_impossible", False)
    if not isinstance(is_impossible, (bool, np.bool_)):
        raise ValueError(f"{where} key 'is_impossible' must be true or false, got "
                         f"{is_impossible!r}")
    answers = []
    for answer_index, answer in enumerate(qa["answers"]):
        answer_where = f"{where} answers[{answer_index}]"
        if not isinstance(answer, Mapping) or "text" not in answer or "answer_start" not in answer:
            raise ValueError(f"{answer_where} must have keys 'text' and 'answer_start'")
        text, start = answer["text"], answer["answer_start"]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{answer_where} text must be a non-empty string, got {text!r}")
        if not isinstance(start, (int, np.integer)) or isinstance(start, bool):
            raise ValueError(f"{answer_where} answer_start must be an integer, got {start!r}")
        start = int(start)
        found = context[start:start + len(text)] if start >= 0 else None
        if found != text:
            raise ValueError(
                f"{answer_where}: answer_start {start} does not point at its text {text!r} "
                f"(the context has {found!r} there); answer_start must be the character offset "
                f"of the text in the context (not a byte or token offset)")
        answers.append(Answer(text, start))
    if is_impossible and answers:
        raise ValueError(f"{where} is_impossible is true but it has {len(answers)} answers; an "
                         "unanswerable question has \"answers\": []")
    if not is_impossible and not answers:
        raise ValueError(f"{where} has no answers" + (
            " and is_impossible is false" if version == "v2.0" else
            "; every SQuAD v1.1 question has at least one (use version v2.0 for unanswerable "
            "questions)"))
    return SquadExample(qid, str(qa["question"]), context, tuple(answers), bool(is_impossible))


def _check_unique_ids(examples: Sequence[SquadExample], source: str) -> None:
    counts = collections.Counter(example.id for example in examples)
    duplicates = [qid for qid, count in counts.items() if count > 1]
    if duplicates:
        raise ValueError(f"{source}: question ids must be unique (predictions are keyed by id); "
                         f"repeated: {', '.join(map(repr, duplicates[:_NUM_IDS_SHOWN]))}")


def read_squad(path: str | os.PathLike, version: str) -> list[SquadExample]:
    """Reads an official SQuAD JSON file (train-v1.1.json, dev-v2.0.json, ...).

    Every answer is checked: answer_start must point at its text in the context. A v1.1 request
    on a v2.0 file (top-level "version" or a question with "is_impossible") or the reverse is a
    ConfigError naming the file and the key.
    """
    _check_version(version)
    from etils import epath
    file_path = epath.Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"SQuAD file {path} does not exist (download e.g. "
                                f"train-{version}.json from the SQuAD site)")
    try:
        # Decoded here: epath's text mode on gs:// ignores `encoding`.
        dataset = json.loads(file_path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON (line {error.lineno} column {error.colno}: "
                         f"{error.msg}); it should be an official SQuAD file") from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError(f"{path} has no top-level key 'data' with a list of articles; it "
                         "should be an official SQuAD file")
    file_version = _file_version(dataset.get("version"))
    if file_version is not None and file_version != version:
        raise ConfigError(
            f"{path} key 'version' is {dataset['version']!r} (SQuAD {file_version}) but version "
            f"{version} was asked for; set the SQuAD version to {file_version} or read a "
            f"{version} file")
    examples = []
    for article_index, article in enumerate(dataset["data"]):
        if not isinstance(article, dict) or "paragraphs" not in article:
            raise ValueError(f"{path}: data[{article_index}] has no key 'paragraphs'")
        for paragraph_index, paragraph in enumerate(article["paragraphs"]):
            where = f"{path}: data[{article_index}].paragraphs[{paragraph_index}]"
            if "context" not in paragraph or "qas" not in paragraph:
                raise ValueError(f"{where} needs keys 'context' and 'qas'")
            if not isinstance(paragraph["context"], str):
                raise ValueError(f"{where} context must be a string")
            for qa_index, qa in enumerate(paragraph["qas"]):
                examples.append(_make_example(qa, paragraph["context"], version,
                                              f"{where}.qas[{qa_index}]"))
    _check_unique_ids(examples, str(path))
    return examples


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_tfds(tfds_name: str, split: str, version: str, data_dir: str | None = None,
              download: bool = True) -> list[SquadExample]:
    """Reads a TFDS SQuAD-like dataset (squad/v1.1, squad/v2.0) through `tfds.data_source`.

    `tfds.data_source` reads ArrayRecord files without TensorFlow; it prepares them itself when
    `download` is True. The version is checked as in `read_squad` (v2.0 has is_impossible).
    """
    _check_version(version)
    import tensorflow_datasets as tfds
    source = tfds.data_source(tfds_name, split=split, data_dir=data_dir, download=download)
    examples = []
    for index in range(len(source)):
        record = source[index]
        answers = record["answers"]
        qa: dict[str, Any] = {"id": _text(record["id"]), "question": _text(record["question"]),
              "answers": [{"text": _text(text), "answer_start": int(start)}
                          for text, start in zip(answers["text"], answers["answer_start"])]}
        if "is_impossible" in record:
            qa["is_impossible"] = bool(record["is_impossible"])
        examples.append(_make_example(qa, _text(record["context"]), version,
                                      f"TFDS {tfds_name} {split}[{index}]"))
    _check_unique_ids(examples, f"TFDS {tfds_name} {split}")
    return examples


# ----------------------------------------------------------------------------------------------
# Answers -> tokens
# ----------------------------------------------------------------------------------------------

def answer_token_span(char_starts: np.ndarray, char_ends: np.ndarray, answer: Answer
                      ) -> tuple[int, int] | None:
    """(first, last) context tokens that overlap the answer's characters; None if no token does."""
    answer_end = answer.char_start + len(answer.text)
    overlapping = np.flatnonzero((char_ends > char_starts) & (char_starts < answer_end)
                                 & (char_ends > answer.char_start))
    if not overlapping.size:
        return None
    return int(overlapping[0]), int(overlapping[-1])


# ----------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------

def check_windows_without_answer(value: str, version: str,
                                 name: str = "windows_without_answer") -> None:
    """Raises ConfigError, naming `name`, unless `value` is in WINDOWS_WITHOUT_ANSWER and fits
    `version` ("drop" is v1.1 only: v2.0 trains its answerability class on such windows)."""
    if value not in WINDOWS_WITHOUT_ANSWER:
        raise ConfigError(f"{name}={value!r} must be one of {WINDOWS_WITHOUT_ANSWER} (cls: label "
                          "a training window without the answer [CLS] as the reference; drop: "
                          "leave it out, v1.1 only)")
    if value == "drop" and version != "v1.1":
        raise ConfigError(f"{name}='drop' is for SQuAD v1.1 only: {version} labels a training "
                          "window without the answer \"no answer\" ([CLS]) to train its "
                          "answerability class (SPEC 8.3); set it to 'cls' (the default)")


def build_features(examples: Sequence[SquadExample], tokenizer: tokenizer_lib.Tokenizer, *,
                   version: str, max_seq_length: int, doc_stride: int = DOC_STRIDE,
                   max_query_length: int = MAX_QUERY_LENGTH, training: bool,
                   windows_without_answer: str = "cls"
                   ) -> tuple[dict[str, np.ndarray], list[FeatureInfo], FeatureStats]:
    """Sliding windows `[CLS] question [SEP] context window [SEP] <pad>...` (SPEC 8.3).

    Returns:
      arrays: int32 input_ids, segment_ids, input_mask, p_mask [num_features, max_seq_length]
        (p_mask 1 where no answer can be: question, [SEP], padding; 0 at [CLS], which is the
        no-answer position of v2.0, and on the context), example_index [num_features]; with
        `training` also start_positions, end_positions, is_impossible [num_features].
      infos: one FeatureInfo per feature, for post-processing.
      stats: what was split, truncated, dropped (see the module docstring).
    With `training`, `windows_without_answer` says what a window that does not hold the whole
    answer becomes: "cls" (start = end = 0, is_impossible 1, the reference) or "drop" (v1.1).
    """
    _check_feature_settings(examples, version, max_seq_length, doc_stride, max_query_length,
                            windows_without_answer)
    stats = FeatureStats(examples=len(examples))
    context_cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    rows: dict[str, list] = collections.defaultdict(list)
    infos: list[FeatureInfo] = []
    for example_index, example in enumerate(examples):
        if example.context not in context_cache:
            context_cache[example.context] = tokenizer.encode_with_offsets(example.context)
        context_ids, char_starts, char_ends = context_cache[example.context]
        if not context_ids.size:
            raise ValueError(f"question {example.id!r}: its context has no tokens "
                             f"({example.context[:50]!r}); SQuAD contexts cannot be empty")
        query_ids = tokenizer.encode(example.question)
        if len(query_ids) > max_query_length:
            stats.truncated_questions += 1
            query_ids = query_ids[:max_query_length]
        answer_span = None
        if training and not example.is_impossible:
            answer_span = _training_span(example, char_starts, char_ends, stats)
            if answer_span is None:  # no piece: the example is dropped
                continue
        context_offset = len(query_ids) + 2
        windows = sliding_windows(len(context_ids), max_seq_length - len(query_ids) - 3, doc_stride)
        stats.split_contexts += len(windows) > 1
        best_window = max_context_windows(windows, len(context_ids))
        answer_in_some_window = False
        for window_index, (start, length) in enumerate(windows):
            label = None  # (start position, end position, is_impossible)
            if training and example.is_impossible:
                label = (0, 0, 1)
            elif training:
                assert answer_span is not None  # found above for an answerable training example
                first, last = answer_span
                if start <= first and last < start + length:
                    label = (first - start + context_offset, last - start + context_offset, 0)
                    answer_in_some_window = True
                else:
                    stats.windows_without_answer += 1
                    if windows_without_answer == "drop":
                        continue
                    label = (0, 0, 1)  # SPEC 8.3: [CLS], both versions, as the reference.
            window_ids = context_ids[start:start + length]
            for key, value in _window_inputs(tokenizer, query_ids, window_ids,
                                             max_seq_length).items():
                rows[key].append(value)
            rows["example_index"].append(example_index)
            if training:
                assert label is not None  # set above for every training window
                for key, value in zip(("start_positions", "end_positions", "is_impossible"),
                                      label):
                    rows[key].append(value)
            infos.append(FeatureInfo(
                example_index=example_index, window_index=window_index,
                context_offset=context_offset, token_start=start,
                char_starts=char_starts[start:start + length],
                char_ends=char_ends[start:start + length],
                is_max_context=best_window[start:start + length] == window_index))
        if answer_span is not None and not answer_in_some_window:
            stats.answers_in_no_window += 1
            if windows_without_answer == "drop":  # no window left for this question
                stats.dropped_qids.append(example.id)
    stats.features = len(infos)
    if stats.dropped_qids:
        logging.warning("SQuAD features: %s", stats.report())
    return _stacked(rows, max_seq_length, training), infos, stats


def _training_span(example: SquadExample, char_starts: np.ndarray, char_ends: np.ndarray,
                   stats: FeatureStats) -> tuple[int, int] | None:
    """The (first, last) context tokens of the answer that trains `example` (its first), or
    None when no piece overlaps it; counts both in `stats`."""
    stats.several_answers += len(example.answers) > 1
    answer = example.answers[0]
    answer_span = answer_token_span(char_starts, char_ends, answer)
    if answer_span is None:
        stats.answers_not_found += 1
        stats.dropped_qids.append(example.id)
        return None
    covered = example.context[char_starts[answer_span[0]]:char_ends[answer_span[1]]]
    stats.answers_inside_pieces += covered != answer.text.strip()
    return answer_span


def _check_feature_settings(examples: Sequence[SquadExample], version: str, max_seq_length: int,
                            doc_stride: int, max_query_length: int,
                            windows_without_answer: str) -> None:
    """ConfigError for settings `build_features` cannot build windows with, or v2.0 data
    asked for as v1.1."""
    _check_version(version)
    check_windows_without_answer(windows_without_answer, version)
    if max_seq_length - max_query_length - 3 < 1:
        raise ConfigError(
            f"max_seq_length={max_seq_length} leaves no room for the context after "
            f"max_query_length={max_query_length} question tokens and [CLS] [SEP] [SEP]; raise "
            "max_seq_length or lower max_query_length")
    if doc_stride < 1:
        raise ConfigError(f"doc_stride={doc_stride} must be at least 1 (SPEC 8.3: 128)")
    if version == "v1.1":
        impossible = [example.id for example in examples if example.is_impossible]
        if impossible:
            raise ConfigError(f"version v1.1 was asked for but questions {impossible[:5]} are "
                              "unanswerable (SQuAD v2.0 data); set the SQuAD version to v2.0")


def _window_inputs(tokenizer: tokenizer_lib.Tokenizer, query_ids: np.ndarray,
                   window_ids: np.ndarray, max_seq_length: int) -> dict[str, np.ndarray]:
    """int32 [max_seq_length] input_ids, segment_ids, input_mask, p_mask of one window:
    `[CLS] question [SEP] window [SEP] <pad>...`; p_mask 0 at [CLS] and on the window."""
    context_offset = len(query_ids) + 2
    context_end = context_offset + len(window_ids)
    input_ids = np.full(max_seq_length, tokenizer.pad_id, dtype=np.int32)
    input_ids[0] = tokenizer.cls_id
    input_ids[1:context_offset - 1] = query_ids
    input_ids[context_offset - 1] = tokenizer.sep_id
    input_ids[context_offset:context_end] = window_ids
    input_ids[context_end] = tokenizer.sep_id
    segment_ids = np.zeros(max_seq_length, dtype=np.int32)
    segment_ids[context_offset:context_end + 1] = 1
    input_mask = (np.arange(max_seq_length) < context_end + 1).astype(np.int32)
    p_mask = np.ones(max_seq_length, dtype=np.int32)
    p_mask[0] = 0
    p_mask[context_offset:context_end] = 0
    return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
            "p_mask": p_mask}


def _stacked(rows: Mapping[str, list], max_seq_length: int,
             training: bool) -> dict[str, np.ndarray]:
    """The int32 arrays of `build_features` from its per-window rows (empty arrays of the right
    shape when there are none)."""
    sequences = ["input_ids", "segment_ids", "input_mask", "p_mask"]
    keys = [*sequences, "example_index"]
    if training:
        keys += ["start_positions", "end_positions", "is_impossible"]
    arrays = {}
    for key in keys:
        shape = (0, max_seq_length) if key in sequences else (0,)
        arrays[key] = (np.asarray(rows[key], dtype=np.int32) if rows[key]
                       else np.zeros(shape, dtype=np.int32))
    return arrays

