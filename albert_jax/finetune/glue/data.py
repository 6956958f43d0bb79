"""GLUE data (SPEC 8.2): readers of the official TSV download and of TFDS `glue/<task>`, the label
lists, and the writer of the leaderboard's prediction files.

  examples = glue.read_train("mnli", "glue_data/MNLI")
  for eval_set in glue.read_eval_sets("mnli", "glue_data/MNLI", "test"):  # MNLI-m, MNLI-mm, AX
      glue.write_predictions(workdir, eval_set, predicted_labels)

  examples, skipped = glue.read_train("qqp", "glue_data/QQP")  # skipped: a SkipReport

Each task's columns follow the reference processors (classifier_utils.py, the same as BERT's
run_classifier.py). Unlike the reference, which turns a short row into an IndexError or a wrong
label, every row is checked: a bad file raises a one-line ValueError naming the file and line.
The one exception is the reference's own: QQP train and dev skip a line with too few columns
(its QqpProcessor's `except IndexError: continue`; the official QQP train.tsv has such lines),
and the readers return those line numbers as a SkipReport. Folders are local or in a bucket
(gs://, read through etils.epath). Files are read as UTF-8 with csv.QUOTE_NONE: quotes are part
of the text (as in the reference, whose `csv.reader(quotechar=None)` means QUOTE_NONE, and TFDS's
glue builder), so `He said "no` keeps its quote.
"""
from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
from etils import epath

from albert_jax import files
from albert_jax.finetune.core import scores
from albert_jax.finetune.core.examples import TextExample
from albert_jax.finetune.core.text_files import open_text


@dataclasses.dataclass(frozen=True)
class SkipReport:
    """The lines of one file that gave no example because they have too few columns.

    Only QQP train and dev skip such lines (as the reference's QqpProcessor); every other file
    raises on them, so its report is empty.

    Attributes:
      source: the file path, or "TFDS <name> split <split>".
      lines: 1-based line numbers in the file, ascending; for TFDS, which drops such rows
        itself, the `idx` values (data row numbers) missing from the split.
      unit: "line" or "idx": what `lines` counts.
    """

    source: str
    lines: tuple[int, ...] = ()
    unit: str = "line"

    def message(self, shown: int = 5) -> str:
        """One line for the console: the count and the first `shown` line numbers."""
        numbers = ", ".join(str(number) for number in self.lines[:shown])
        more = ", ..." if len(self.lines) > shown else ""
        plural = "" if len(self.lines) == 1 else "s"
        if self.unit == "idx":
            return (f"{self.source}: {len(self.lines)} row{plural} missing (TFDS drops rows "
                    f"with too few columns, as the reference does for QQP): idx {numbers}{more}")
        return (f"{self.source}: skipped {len(self.lines)} line{plural} with too few columns, as "
                f"the reference does for QQP: line{plural} {numbers}{more}")

    def record(self, shown: int = 5) -> dict[str, Any]:
        """{"source", "skipped", "first_skipped_lines" (TFDS: "first_skipped_idx")} for a JSON
        summary of the run's data."""
        first = "first_skipped_lines" if self.unit == "line" else "first_skipped_idx"
        return {"source": self.source, "skipped": len(self.lines), first: list(self.lines[:shown])}


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """One evaluated or predicted split.

    Attributes:
      name: "dev", "dev_mismatched", "test", "test_mismatched" or "ax".
      submission_file: the name the GLUE server expects for its predictions ("MNLI-m.tsv", ...).
      examples: the split's examples in file order.
      skipped: the lines of the file that gave no example (QQP dev only; see SkipReport).
    """

    name: str
    submission_file: str
    examples: list[TextExample]
    skipped: SkipReport


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where one kind of GLUE file keeps its fields (0-based columns, -1 = the last one)."""

    columns: tuple[str, ...]  # The official column names, for messages; every row has them all.
    header: bool
    index_column: int | None  # None: the index is the 0-based row number among the data lines.
    text_a_column: int
    text_b_column: int | None
    label_column: int | None  # None: a test file.
    # Skip (and report) a line with too few columns instead of raising: QQP train/dev only.
    skip_short_lines: bool


def _layout(columns: str, *, header: bool = True, index: int | None = 0, text_a: int,
            text_b: int | None = None, label: int | None = None,
            skip_short_lines: bool = False) -> _Layout:
    return _Layout(tuple(columns.split(",")), header, index, text_a, text_b, label,
                   skip_short_lines)


@dataclasses.dataclass(frozen=True)
class HyperParameters:
    """SPEC 8.2 (run_glue.sh = paper Table 14): what configs/glue.py sets for one task."""

    lr: float
    batch_size: int
    total_steps: int
    warmup_steps: int
    dropout: float  # ALBERT's dropout (the classifier's is config.classifier_dropout)
    eval_every_steps: int  # and checkpoint_every_steps


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything about one GLUE task (or the AX diagnostic set): one row of SPECS.

    Attributes:
      name: the task's name (`configs/glue.py:task=<name>`, `config.task`).
      folder: its folder in the official download (glue_data/<folder>), for messages.
      layout: where train.tsv and dev.tsv keep their fields.
      test_layout: where test.tsv keeps them.
      labels: the SPEC 8.2 label list, in the order of the classifier's outputs; None for a
        regression (STS-B).
      metrics: the dev metrics (`scores` names), in report order.
      selection_metric: the one of them whose largest value picks the best dev checkpoint
        (SPEC 8.1: `matthew_corr` for CoLA, `pearson` for STS-B, `eval_accuracy` otherwise).
      submission_file: the GLUE server's name of its test predictions (dev predictions too).
      hyper_parameters: SPEC 8.2's fine-tuning settings; None for AX (never trained).
      tfds_features: TFDS's names of the two text features (tensorflow_datasets/text/glue.py);
        None for a single-text task's second.
      tfds_label_names: TFDS's class names of a task whose files say 0/1 (class i is the file's
        value i); None where TFDS uses the reference's names.
      eval_splits: the dev sets evaluated during training (MNLI: matched and mismatched).
    """

    name: str
    folder: str
    layout: _Layout
    test_layout: _Layout
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    selection_metric: str
    submission_file: str
    hyper_parameters: HyperParameters | None
    tfds_features: tuple[str, str | None]
    tfds_label_names: tuple[str, ...] | None = None
    eval_splits: tuple[str, ...] = ("dev",)


_MNLI_COLUMNS = ("index,promptID,pairID,genre,sentence1_binary_parse,sentence2_binary_parse,"
                 "sentence1_parse,sentence2_parse,sentence1,sentence2")
_NLI_TRAIN = _layout("index,sentence1,sentence2,label", text_a=1, text_b=2, label=-1)
_NLI_TEST = _layout("index,sentence1,sentence2", text_a=1, text_b=2)
_STSB_COLUMNS = "index,genre,filename,year,old_index,source1,source2,sentence1,sentence2"
_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
_MNLI_LABELS = ("contradiction", "entailment", "neutral")
_ACCURACY = ("accuracy",)

# The GLUE tasks, one row each. Labels in the last column are read with [-1] as the reference
# does (MNLI dev has label1..label5 before gold_label). Hyper-parameters: lr, batch, steps,
# warmup, ALBERT dropout, eval every.
SPECS: tuple[TaskSpec, ...] = (
    # CoLA train/dev have no header; its test file does.
    TaskSpec("cola", "CoLA",
             _layout("source,label,original label,sentence", header=False, index=None, text_a=3,
                     label=1),
             _layout("index,sentence", text_a=1), _BINARY, ("accuracy", "mcc"), "mcc",
             "CoLA.tsv", HyperParameters(1e-5, 16, 5336, 320, 0.0, 100), ("sentence", None),
             ("unacceptable", "acceptable")),
    TaskSpec("sst2", "SST-2", _layout("sentence,label", index=None, text_a=0, label=1),
             _layout("index,sentence", text_a=1), _BINARY, _ACCURACY, "accuracy", "SST-2.tsv",
             HyperParameters(1e-5, 32, 20935, 1256, 0.0, 100), ("sentence", None),
             ("negative", "positive")),
    TaskSpec("mrpc", "MRPC",
             _layout("Quality,#1 ID,#2 ID,#1 String,#2 String", index=None, text_a=3, text_b=4,
                     label=0),
             _layout("index,#1 ID,#2 ID,#1 String,#2 String", text_a=3, text_b=4), _BINARY,
             ("accuracy", "f1"), "accuracy", "MRPC.tsv",
             HyperParameters(2e-5, 32, 800, 200, 0.0, 100), ("sentence1", "sentence2"),
             ("not_equivalent", "equivalent")),
    TaskSpec("stsb", "STS-B", _layout(_STSB_COLUMNS + ",score", text_a=7, text_b=8, label=-1),
             _layout(_STSB_COLUMNS, text_a=7, text_b=8), None, ("pearson", "spearman"),
             "pearson", "STS-B.tsv", HyperParameters(2e-5, 16, 3598, 214, 0.0, 100),
             ("sentence1", "sentence2")),
    # SPEC 8.2: the reference's QqpProcessor skips a train/dev line it cannot index (the official
    # train.tsv has some, e.g. a question split over two lines); a test line must be whole.
    TaskSpec("qqp", "QQP",
             _layout("id,qid1,qid2,question1,question2,is_duplicate", text_a=3, text_b=4,
                     label=5, skip_short_lines=True),
             _layout("id,question1,question2", text_a=1, text_b=2), _BINARY, ("accuracy", "f1"),
             "accuracy", "QQP.tsv", HyperParameters(5e-5, 128, 14000, 1000, 0.1, 100),
             ("question1", "question2"), ("not_duplicate", "duplicate")),
    # MNLI: dev and test matched and mismatched, and the AX diagnostic set on test.
    TaskSpec("mnli", "MNLI",
             _layout(_MNLI_COLUMNS + ",label1,gold_label", text_a=8, text_b=9, label=-1),
             _layout(_MNLI_COLUMNS, text_a=8, text_b=9), _MNLI_LABELS, _ACCURACY, "accuracy",
             "MNLI-m.tsv", HyperParameters(3e-5, 128, 10000, 1000, 0.0, 100),
             ("premise", "hypothesis"), eval_splits=("dev", "dev_mismatched")),
    TaskSpec("qnli", "QNLI", _layout("index,question,sentence,label", text_a=1, text_b=2, label=-1),
             _layout("index,question,sentence", text_a=1, text_b=2), _NLI, _ACCURACY, "accuracy",
             "QNLI.tsv", HyperParameters(1e-5, 32, 33112, 1986, 0.0, 200),
             ("question", "sentence")),
    TaskSpec("rte", "RTE", _NLI_TRAIN, _NLI_TEST, _NLI, _ACCURACY, "accuracy", "RTE.tsv",
             HyperParameters(3e-5, 32, 800, 200, 0.1, 100), ("sentence1", "sentence2")),
    # WNLI: paper only (no run_glue.sh line); evaluated every 100 steps as the others.
    TaskSpec("wnli", "WNLI", _NLI_TRAIN, _NLI_TEST, _BINARY, _ACCURACY, "accuracy", "WNLI.tsv",
             HyperParameters(2e-5, 16, 2000, 250, 0.1, 100), ("sentence1", "sentence2"),
             ("not_entailment", "entailment")),
)
TASKS: tuple[str, ...] = tuple(task_spec.name for task_spec in SPECS)
_SPECS_BY_NAME = {task_spec.name: task_spec for task_spec in SPECS}
_MNLI = _SPECS_BY_NAME["mnli"]

_MNLI_DEV = _layout(_MNLI_COLUMNS + ",label1,label2,label3,label4,label5,gold_label", text_a=8,
                    text_b=9, label=-1)
# The diagnostic set (diagnostic.tsv, no labels): predicted and scored (multi-class MCC) with an
# MNLI model, never trained.
_AX_LAYOUT = _layout("index,sentence1,sentence2", text_a=1, text_b=2)
AX = TaskSpec("ax", "diagnostic", _AX_LAYOUT, _AX_LAYOUT, _MNLI_LABELS, ("mcc",), "", "AX.tsv",
              None, ("premise", "hypothesis"))
_AX_FILE = "diagnostic.tsv"
_MNLI_MISMATCHED_FILE = "MNLI-mm.tsv"
# The task whose labels a submission file holds (MNLI-mm and AX: MNLI's).
_SPEC_OF_SUBMISSION_FILE = {**{task_spec.submission_file: task_spec for task_spec in SPECS},
                            _MNLI_MISMATCHED_FILE: _MNLI, AX.submission_file: _MNLI}


def spec(task: str) -> TaskSpec:
    """The task_spec of GLUE task `task`; ValueError naming the tasks for any other name."""
    if task not in _SPECS_BY_NAME:
        raise ValueError(f"unknown GLUE task {task!r}; use one of {', '.join(TASKS)}")
    return _SPECS_BY_NAME[task]


def is_pair(task: str) -> bool:
    """Whether the task's examples are sentence pairs (all but CoLA and SST-2)."""
    return spec(task).layout.text_b_column is not None


def labels(task: str) -> tuple[str, ...] | None:
    """The SPEC 8.2 label list of `task` (class i is labels[i]); None for stsb (regression)."""
    return spec(task).labels


def score(name: str, predictions: npt.ArrayLike, labels: npt.ArrayLike) -> dict[str, float]:
    """Scores one GLUE split with the metrics of task `name`, or of the AX set ("ax").

    Args:
      name: a GLUE task, or "ax".
      predictions: [num_examples] class ids, or floats for stsb.
      labels: [num_examples] class ids, or floats for stsb.

    Returns:
      the spec's metrics: cola mcc, accuracy; mrpc, qqp accuracy, f1 (binary F1 of class 1);
      stsb pearson, spearman; ax mcc (multi-class, over the 3 MNLI classes); the others
      accuracy. Fractions, not percentages.
    """
    if name != AX.name and name not in _SPECS_BY_NAME:
        raise ValueError(f"unknown GLUE task {name!r}; use one of {', '.join(TASKS)}, {AX.name}")
    task_spec = AX if name == AX.name else _SPECS_BY_NAME[name]
    if task_spec.labels is None:
        return scores.real_scores(predictions, labels, task_spec.metrics, task_spec.name)
    return scores.class_scores(predictions, labels, len(task_spec.labels), task_spec.metrics,
                               task_spec.name)


# --- The official TSV files ---------------------------------------------------------------------

def _folder_spec(task: str, data_path: str) -> TaskSpec:
    """The spec of `task`, whose data folder `data_path` must exist."""
    task_spec = spec(task)
    if not epath.Path(data_path).is_dir():
        raise FileNotFoundError(
            f"GLUE data folder {data_path} does not exist; give the {task} folder of the official "
            f"GLUE download (e.g. glue_data/{task_spec.folder})")
    return task_spec


def _label_error(label: str, task_spec: TaskSpec) -> str:
    assert task_spec.labels is not None  # only a classification task checks labels
    return (f"unknown label {label!r}; the {task_spec.name} labels are "
            f"{', '.join(task_spec.labels)}")


def _read_tsv(task: TaskSpec, data_path: str, file_name: str,
              layout: _Layout) -> tuple[list[TextExample], SkipReport]:
    """The examples of one file, and the lines it skipped; `task` has the labels it checks."""
    path = os.path.join(data_path, file_name)
    if not epath.Path(path).is_file():
        raise ValueError(
            f"GLUE task {task.name} needs {file_name} in {data_path} (the task's folder of the "
            f"official GLUE download, e.g. glue_data/{task.folder}); it is missing")
    expected = f"{len(layout.columns)} tab-separated columns ({', '.join(layout.columns)})"
    examples: list[TextExample] = []
    skipped_lines = []
    header_pending = layout.header
    # utf-8-sig: UTF-8, ignoring a byte-order mark if an editor added one.
    with open_text(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not row and (header_pending or not layout.skip_short_lines):
                # A blank line (e.g. at the end of a hand-edited file) holds no example; QQP
                # train/dev count it below with their other short lines. (The reference stops
                # at one: every processor indexes the empty row, QQP's line[0] outside its try.)
                continue
            if header_pending:
                header_pending = False
                continue
            if len(row) < len(layout.columns):
                if layout.skip_short_lines:
                    skipped_lines.append(reader.line_num)
                    continue
                raise ValueError(f"{where}: {len(row)} columns, expected {expected}")
            label = None if layout.label_column is None else row[layout.label_column]
            if label is not None:
                if task.labels is None:
                    try:
                        float(label)
                    except ValueError:
                        raise ValueError(f"{where}: STS-B score {label!r} is not a number "
                                         f"(expected {expected})") from None
                elif label not in task.labels:
                    raise ValueError(f"{where}: {_label_error(label, task)}")
            examples.append(TextExample(
                id=(str(len(examples)) if layout.index_column is None
                       else row[layout.index_column]),
                text_a=row[layout.text_a_column],
                text_b=None if layout.text_b_column is None else row[layout.text_b_column],
                label=label, source=where))
    if not examples:
        content = "only a header line" if layout.header and not header_pending else "no lines"
        if skipped_lines:
            content = f"every line after the header has fewer than {len(layout.columns)} columns"
        raise ValueError(f"{path}: empty file ({content}); expected "
                         f"{'a header line, then ' if layout.header else ''}lines of {expected}")
    return examples, SkipReport(path, tuple(skipped_lines))


def read_train(task: str, data_path: str) -> tuple[list[TextExample], SkipReport]:
    """The labelled examples of `<data_path>/train.tsv` in file order, and the lines skipped
    (QQP only, see SkipReport)."""
    task_spec = _folder_spec(task, data_path)
    return _read_tsv(task_spec, data_path, "train.tsv", task_spec.layout)


def _ax_path(data_path: str) -> str | None:
    """diagnostic.tsv in the MNLI folder, or where download_glue_data.py puts it
    (glue_data/diagnostic/diagnostic.tsv beside glue_data/MNLI); None if neither exists."""
    absolute = data_path if "://" in data_path else os.path.abspath(data_path)
    for folder in (data_path, os.fspath(epath.Path(absolute).parent / "diagnostic")):
        if (epath.Path(folder) / _AX_FILE).is_file():
            return folder
    return None


def read_eval_sets(task: str, data_path: str, split: str) -> list[EvalSet]:
    """The evaluated (split="dev") or predicted (split="test") sets of `task`.

    mnli dev: [dev (dev_matched.tsv), dev_mismatched]; mnli test: [test (test_matched.tsv, for
    MNLI-m.tsv), test_mismatched (MNLI-mm.tsv), and ax (AX.tsv, from diagnostic.tsv) when
    diagnostic.tsv is in `data_path` or in the download's diagnostic/ folder beside it]. Other
    tasks: one set named `split` (dev.tsv or test.tsv). Test examples have label None.
    """
    task_spec = _folder_spec(task, data_path)
    if split not in ("dev", "test"):
        raise ValueError(f"unknown GLUE split {split!r}; use dev or test")

    def eval_set(name: str, submission_file: str, folder: str, file_name: str,
                 layout: _Layout) -> EvalSet:
        return EvalSet(name, submission_file, *_read_tsv(task_spec, folder, file_name, layout))

    if task_spec is not _MNLI:
        layout = task_spec.layout if split == "dev" else task_spec.test_layout
        return [eval_set(split, task_spec.submission_file, data_path, f"{split}.tsv", layout)]
    if split == "dev":
        return [eval_set("dev", task_spec.submission_file, data_path, "dev_matched.tsv", _MNLI_DEV),
                eval_set("dev_mismatched", _MNLI_MISMATCHED_FILE, data_path,
                         "dev_mismatched.tsv", _MNLI_DEV)]
    eval_sets = [eval_set("test", task_spec.submission_file, data_path, "test_matched.tsv",
                          task_spec.test_layout),
                 eval_set("test_mismatched", _MNLI_MISMATCHED_FILE, data_path,
                          "test_mismatched.tsv", task_spec.test_layout)]
    ax_folder = _ax_path(data_path)
    if ax_folder is not None:
        eval_sets.append(eval_set("ax", AX.submission_file, ax_folder, _AX_FILE, AX.layout))
    return eval_sets


def read_official_file(task: str, path: str) -> list[TextExample] | None:
    """The examples of one file of the task's official folder, picked by its name (train.tsv,
    dev.tsv, test.tsv; MNLI's dev/test_matched/mismatched.tsv, diagnostic.tsv), in file order;
    None for any other file name (`albert-jax predict` then reads it as a table of its own)."""
    task_spec = spec(task)
    if task_spec is _MNLI:
        layouts = {"train.tsv": task_spec.layout, "dev_matched.tsv": _MNLI_DEV,
                   "dev_mismatched.tsv": _MNLI_DEV, "test_matched.tsv": task_spec.test_layout,
                   "test_mismatched.tsv": task_spec.test_layout, _AX_FILE: AX.layout}
    else:
        layouts = {"train.tsv": task_spec.layout, "dev.tsv": task_spec.layout,
                   "test.tsv": task_spec.test_layout}
    name = os.path.basename(path)
    if name not in layouts:
        return None
    examples, skipped = _read_tsv(task_spec, os.path.dirname(path) or ".", name, layouts[name])
    if skipped.lines:
        print(skipped.message(), flush=True)
    return examples


# --- TFDS glue/<task> ---------------------------------------------------------------------------

# (TFDS split, our eval set name, submission file) per split; TFDS's MNLI has *_matched splits.
_TFDS_EVAL_SPLITS = {
    ("mnli", "dev"): (("validation_matched", "dev", "MNLI-m.tsv"),
                      ("validation_mismatched", "dev_mismatched", _MNLI_MISMATCHED_FILE)),
    ("mnli", "test"): (("test_matched", "test", "MNLI-m.tsv"),
                       ("test_mismatched", "test_mismatched", _MNLI_MISMATCHED_FILE))}


def _tfds_text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _tfds_reference_labels(task_spec: TaskSpec, tfds_name: str, info: Any) -> tuple[str, ...]:
    """The reference label of each TFDS class id, checked against the builder's ClassLabel names.

    TFDS orders MNLI's classes entailment, neutral, contradiction (SPEC 8.2's order is
    contradiction, entailment, neutral), so classes map by NAME, never by id.
    """
    names = tuple(info.features["label"].names)
    assert task_spec.labels is not None  # only a classification task has TFDS class names
    if task_spec.tfds_label_names is not None:
        expected = task_spec.tfds_label_names
        mapping = dict(zip(expected, task_spec.labels))
    else:
        expected = task_spec.labels
        mapping = {name: name for name in expected}
    if sorted(names) != sorted(expected):
        raise ValueError(f"TFDS dataset {tfds_name} has the classes {', '.join(names)}; GLUE "
                         f"{task_spec.name} expects {', '.join(expected)} (is it the "
                         f"{task_spec.name} config?)")
    return tuple(mapping[name] for name in names)


def _read_tfds(task_spec: TaskSpec, tfds_name: str, tfds_split: str,
                    data_dir: str | None) -> tuple[list[TextExample], SkipReport]:
    """The examples of one TFDS split, sorted by `idx` (the row number in the GLUE file), and
    for QQP the rows TFDS dropped.

    TFDS's glue builder drops a row with too few columns itself (every task), keeping each
    record's `idx` = its data row number, so a dropped QQP row is an `idx` missing below the
    largest one (a dropped last row cannot be seen). QQP train/validation report them, as the
    reference skips them; QQP test raises, as a prediction file needs every index. (MRPC's idx
    has gaps by design: TFDS cuts its train and validation splits from one file.)
    """
    import tensorflow_datasets as tfds
    import tensorflow_datasets.text.glue  # noqa: F401  Registers `glue` (TFDS skips it without TF).

    # A random-access ArrayRecord source needs no TensorFlow (the input path reads shards with
    # grain, not tf.data).
    source = tfds.data_source(tfds_name, split=tfds_split, data_dir=data_dir,
                              builder_kwargs={"file_format": "array_record"})
    info = source.dataset_info
    text_a_feature, text_b_feature = task_spec.tfds_features
    needed = [name for name in (text_a_feature, text_b_feature, "label", "idx") if name]
    missing = [name for name in needed if name not in info.features.keys()]
    if missing:
        raise ValueError(f"TFDS dataset {tfds_name} has no feature {', '.join(missing)}; GLUE "
                         f"{task_spec.name} needs {', '.join(needed)} (is it the "
                         f"{task_spec.name} config?)")
    reference_labels = (None if task_spec.labels is None
                        else _tfds_reference_labels(task_spec, tfds_name, info))
    examples = []
    for number, record in enumerate(source):
        label_value = record["label"]
        if label_value < 0:  # TFDS writes -1 for the unlabelled test splits.
            label = None
        elif reference_labels is None:
            label = str(np.float32(label_value))  # Shortest text that reads back exactly.
        else:
            label = reference_labels[int(label_value)]
        examples.append(TextExample(
            id=str(int(record["idx"])), text_a=_tfds_text(record[text_a_feature]),
            text_b=None if text_b_feature is None else _tfds_text(record[text_b_feature]),
            label=label, source=f"TFDS {tfds_name} split {tfds_split} record {number}"))
    if not examples:
        raise ValueError(f"TFDS dataset {tfds_name} split {tfds_split} is empty")
    examples.sort(key=lambda example: int(example.id))
    where = f"TFDS {tfds_name} split {tfds_split}"
    if not task_spec.layout.skip_short_lines:  # QQP: the rows the reference would skip
        return examples, SkipReport(where, unit="idx")
    present = {int(example.id) for example in examples}
    dropped = tuple(idx for idx in range(int(examples[-1].id)) if idx not in present)
    if dropped and tfds_split == "test":
        raise ValueError(
            f"{where} has no rows idx {', '.join(map(str, dropped[:5]))}"
            f"{', ...' if len(dropped) > 5 else ''} ({len(dropped)} rows; TFDS drops a row with "
            "too few columns): a QQP prediction file needs every index; rebuild the dataset "
            "from a whole test.tsv or read the file with data.path")
    return examples, SkipReport(where, dropped, unit="idx")


def read_tfds_train(task: str, tfds_name: str,
                    data_dir: str | None = None) -> tuple[list[TextExample], SkipReport]:
    """The train split of TFDS `tfds_name` (e.g. "glue/mnli") as reference Examples, and the
    rows TFDS dropped (QQP only, see `_read_tfds`).

    Labels are the SPEC 8.2 strings (mapped from the ClassLabel names), the index is TFDS's
    `idx`. The dataset is read as ArrayRecord (prepared with `tfds build --file_format=array_record`
    or by this call, which downloads and prepares it when absent).
    """
    return _read_tfds(spec(task), tfds_name, "train", data_dir)


def read_tfds_eval_sets(task: str, tfds_name: str, split: str,
                        data_dir: str | None = None) -> list[EvalSet]:
    """The dev or test sets of TFDS `tfds_name`, named and labelled as `read_eval_sets` does.

    TFDS splits: validation (mnli: validation_matched -> dev, validation_mismatched ->
    dev_mismatched); test (mnli: test_matched -> test, test_mismatched, and the test split of
    `glue/ax` -> ax). Test labels (-1 in TFDS) become None.
    """
    task_spec = spec(task)
    if split not in ("dev", "test"):
        raise ValueError(f"unknown GLUE split {split!r}; use dev or test")
    tfds_splits = _TFDS_EVAL_SPLITS.get(
        (task, split), ((("validation" if split == "dev" else "test"), split,
                         task_spec.submission_file),))
    eval_sets = [EvalSet(name, submission_file, *_read_tfds(task_spec, tfds_name, tfds_split,
                                                            data_dir))
                 for tfds_split, name, submission_file in tfds_splits]
    if (task_spec, split) == (_MNLI, "test"):
        # The diagnostic set is its own TFDS config; keep the dataset name and version given.
        name, _, version = tfds_name.partition(":")
        ax_name = name.split("/")[0] + "/ax" + (f":{version}" if version else "")
        eval_sets.append(EvalSet("ax", AX.submission_file,
                                 *_read_tfds(AX, ax_name, "test", data_dir)))
    return eval_sets


# --- Predictions --------------------------------------------------------------------------------

def write_predictions(directory: str, eval_set: EvalSet,
                      predictions: Sequence[str | float]) -> str:
    """Writes `<directory>/<eval_set.submission_file>` as the GLUE server reads it.

    Header "index\\tprediction", then one line per example: its index and the predicted label
    string (STS-B: the predicted score, a float). Written to a temporary file and renamed, so a
    reader never sees half a file. Returns the path written.
    """
    task_spec = _SPEC_OF_SUBMISSION_FILE.get(eval_set.submission_file)
    if task_spec is None:
        raise ValueError(f"unknown GLUE submission file {eval_set.submission_file!r}; use one of "
                         f"{', '.join(sorted(_SPEC_OF_SUBMISSION_FILE))}")
    if len(predictions) != len(eval_set.examples):
        raise ValueError(f"{len(predictions)} predictions for the {len(eval_set.examples)} "
                         f"examples of {eval_set.name} ({eval_set.submission_file})")
    lines = ["index\tprediction\n"]
    for example, prediction in zip(eval_set.examples, predictions):
        if task_spec.labels is None:
            try:
                value = float(prediction)
            except (TypeError, ValueError):
                value = float("nan")
            if not np.isfinite(value):
                raise ValueError(f"STS-B prediction {prediction!r} for example {example.id} "
                                 f"({example.source}) is not a finite number")
            text = f"{value:.6g}"
        elif prediction in task_spec.labels:
            text = prediction
        else:
            raise ValueError(f"prediction {prediction!r} for example {example.id} "
                             f"({example.source}): {_label_error(str(prediction), task_spec)}")
        lines.append(f"{example.id}\t{text}\n")
    path = epath.Path(directory) / eval_set.submission_file
    files.write_atomically(path, "".join(lines))
    return os.fspath(path)
