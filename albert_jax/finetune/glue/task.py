"""The GLUE tasks (SPEC 8.1, 8.2): eight classification tasks and STS-B regression, read from the
official folders (glue/data.py) or TFDS, scored with the GLUE metrics, their test
predictions written as the GLUE server's files. One class per row of `glue.SPECS`, which holds
each task's facts (folder, layouts, labels, metrics, submission file, hyper-parameters).

  albert-jax finetune --config=configs/glue.py:task=mnli --config.data.path=glue_data/MNLI ...
"""
from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

import ml_collections
import numpy as np
from etils import epath

from albert_jax.data.tokenizers import Tokenizer
from albert_jax.finetune.core import registry, tables
from albert_jax.finetune.core.examples import TextExample
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.core.task import real_rows
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.kinds.classification import ClassificationTask, RegressionTask
from albert_jax.model import ModelConfig
from albert_jax.train import workdir as workdir_names


def _data_record(examples: Sequence[TextExample], skipped: glue.SkipReport) -> dict[str, Any]:
    """{"examples", "source", "skipped", "first_skipped_lines"} of one GLUE split; prints the
    skipped lines' one-line report (QQP train/dev) when there are any."""
    if skipped.lines:
        print(skipped.message(), flush=True)
    return dict(skipped.record(), examples=len(examples))


class _GlueData(ClassificationTask):
    """What the GLUE tasks share: the official files or TFDS, the eval sets, the server files;
    `spec` (a row of glue.SPECS) holds the facts of one task."""

    spec: glue.TaskSpec
    config: ml_collections.ConfigDict
    tokenizer: Tokenizer | None
    reads_folder_or_tfds = True

    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        return cls.spec.metrics

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        return cls.spec.selection_metric

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        self.eval_splits = self.spec.eval_splits
        self._eval_sets: dict[str, glue.EvalSet] = {}
        self._data_summary: dict[str, dict[str, Any]] = {}  # split -> _data_record

    def _read_eval_sets(self, split: str) -> None:
        data = self.config.data
        if data.tfds_name:
            sets = glue.read_tfds_eval_sets(self.spec.name, data.tfds_name, split,
                                            data.tfds_data_dir or None)
        else:
            sets = glue.read_eval_sets(self.spec.name, data.path, split)
        self._eval_sets.update({eval_set.name: eval_set for eval_set in sets})
        self._data_summary.update({eval_set.name: _data_record(eval_set.examples, eval_set.skipped)
                                   for eval_set in sets})

    def prediction_splits(self, split: str) -> tuple[str, ...]:
        # MNLI test: matched, mismatched and, when diagnostic.tsv is there, AX.
        self._read_eval_sets(split)
        return tuple(name for name in self._eval_sets if name.startswith(split) or
                     (split == "test" and name == "ax"))

    def eval_set(self, split: str) -> glue.EvalSet:
        if split not in self._eval_sets:
            self._read_eval_sets("dev" if split.startswith("dev") else "test")
        if split not in self._eval_sets:
            raise FileNotFoundError(f"{self.name}: no {split} set in {self.config.data.path}")
        return self._eval_sets[split]

    def split_examples(self, split: str) -> list[TextExample]:
        return self.eval_set(split).examples

    def train_features(self) -> dict[str, np.ndarray]:
        data = self.config.data
        examples, skipped = (
            glue.read_tfds_train(self.spec.name, data.tfds_name, data.tfds_data_dir or None)
            if data.tfds_name else glue.read_train(self.spec.name, data.path))
        self._data_summary["train"] = _data_record(examples, skipped)
        return self.features(examples)

    def workdir_files(self) -> dict[str, bytes]:
        # The dev sets are read now (before training, so a bad dev file stops the run early)
        # for their counts in the data summary beside the run (QQP skips short lines, as the
        # reference does: the summary says how many).
        for split in self.eval_splits:
            self.eval_set(split)
        summary = json.dumps(self._data_summary, indent=2, sort_keys=True)
        return dict(super().workdir_files(), **{workdir_names.DATA_SUMMARY_FILE: summary.encode()})

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self.features(self.eval_set(split).examples)

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[Sequence[TextExample]]:
        """`albert-jax predict` input: a file of the task's official folder (dev.tsv, test.tsv,
        ...), else a CSV/TSV/JSONL/Parquet table with the columns `text` (and `text_b` for the
        pair tasks) and, if it has one, `id` (else the row number)."""
        examples = glue.read_official_file(self.spec.name, path)
        if examples is not None:
            yield from tables.in_chunks(examples, chunk_rows)
            return
        columns = tables.Columns(
            text_a="text", text_b="text_b" if glue.is_pair(self.spec.name) else "",
            id="id" if "id" in tables.column_names(path) else "")
        yield from tables.iter_example_chunks(
            path, "regression" if self.labels is None else "classification", columns,
            labelled=False, chunk_rows=chunk_rows)

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = real_rows(predictions)
        return glue.score("ax" if split == "ax" else self.spec.name, real["prediction"],
                                    real["labels"])

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        strings = self.label_strings(real_rows(predictions)["prediction"])
        return [glue.write_predictions(directory, self.eval_set(split), strings)]


class GlueClassificationTask(_GlueData, ClassificationTask):
    """A GLUE classification task; its labels are its spec's (SPEC 8.2)."""

    @property
    def labels(self) -> tuple[str, ...]:  # type: ignore[override]  # read-only: the spec's
        """The label strings of the task's files, in class-index order (SPEC 8.2)."""
        assert self.spec.labels is not None  # a classification spec has its labels
        return self.spec.labels


class GlueRegressionTask(_GlueData, RegressionTask):
    """A GLUE regression task (STS-B: a similarity score in [0, 5], SPEC 8.2)."""


def _task_class(spec: glue.TaskSpec) -> type:
    """The registered task class of one GLUE spec row, e.g. MrpcTask for "mrpc"."""
    base = GlueRegressionTask if spec.labels is None else GlueClassificationTask
    task_class = type(f"{spec.name.capitalize()}Task", (base,), {
        "__module__": __name__, "__doc__": f"GLUE {spec.folder} (glue.SPECS).", "spec": spec,
        "name": spec.name, "config_file": f"glue.py:task={spec.name}"})
    return registry.register(spec.name)(task_class)


# One class per row of glue.SPECS (ColaTask ... WnliTask), importable by name (e.g. to subclass
# MrpcTask in a task of your own): a GLUE-like task is one more row there.
for _spec in glue.SPECS:
    globals()[f"{_spec.name.capitalize()}Task"] = _task_class(_spec)
