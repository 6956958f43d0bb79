"""Your own data: classification, regression and multiple choice on CSV, TSV, JSON Lines or Parquet
files (custom/data.py reads them; configs/custom.py has the keys).

  albert-jax finetune --config=configs/custom.py:kind=classification \
      --config.data.train_file=train.csv --config.data.dev_file=dev.csv \
      --config.init_from=albert_base/ --workdir=runs/mine
  albert-jax predict --workdir=runs/mine --input=new.csv --output=new.predictions.jsonl

Every split is read when the run starts (train, dev and, if given, test), so a bad row stops the
run before anything is written to the workdir. A classification run's label list (config
data.labels, else the sorted set of the training labels) is kept in the workdir as labels.json:
evaluate, predict and the HuggingFace export (`id2label`) read it there, not from the data.
"""
from __future__ import annotations

from typing import Any, Iterator

import ml_collections
import numpy as np
from etils import epath

from albert_jax.data.tokenizers import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune.core import registry, scores, tables
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.core.task import real_rows
from albert_jax.finetune.custom import data as custom_data
from albert_jax.finetune.kinds.classification import ClassificationTask, RegressionTask
from albert_jax.finetune.kinds.multiple_choice import MultipleChoiceTask
from albert_jax.model import ModelConfig
from albert_jax.train import workdir as workdir_names


class _CustomData(ClassificationTask):
    """What the three kinds share: the config's files and columns, the splits, the records."""

    kind: str  # configs/custom.py:kind=<kind>, and what the rows of the tables become
    dev_metrics: tuple[str, ...]  # what eval_metrics reports, in order
    # Those of them whose largest value may pick the best checkpoint (config.selection_metric).
    selectable_metrics: tuple[str, ...]
    config: ml_collections.ConfigDict

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.config_file = f"custom.py:kind={cls.kind}"

    @classmethod
    def validate_config(cls, config: ml_collections.ConfigDict) -> None:
        custom_data.columns(config.data, cls.kind)  # every column key
        custom_data.check_split_tables(config.data, ", ".join(tables.EXTENSIONS))
        if config.selection_metric not in cls.selectable_metrics:
            raise ConfigError(f"config selection_metric={config.selection_metric!r}: a {cls.kind} "
                              f"task keeps its best checkpoint by one of "
                              f"{', '.join(cls.selectable_metrics)}")
        super().validate_config(config)

    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        return cls.dev_metrics

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        return config.selection_metric

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        self.config = config
        self.eval_splits, self.test_splits = custom_data.custom_file_splits(config)
        self._splits: dict[str, list[Any]] = {}
        self._from_training_data(run_dir)  # what shapes the model: labels, option count
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        if tokenizer is not None and run_dir is None:
            # A run about to train: every file is read now, so a bad row stops it before
            # anything is written to the workdir.
            for split in ("train", "dev", *self.test_splits):
                self.split_examples(split)

    def _from_training_data(self, run_dir: epath.Path | None) -> None:
        """Sets what the model's shape depends on, from the finished run in `run_dir` (its
        labels.json) or from the training data."""

    def split_examples(self, split: str) -> list[Any]:
        if split not in self._splits:
            # The training file decides the label list and the option count; the other files
            # are read against them.
            reading = self._reading() if split != "train" else {}
            self._splits[split] = custom_data.read_split(self.config.data, self.kind, split,
                                                         **reading)
        return self._splits[split]

    def _reading(self) -> dict[str, Any]:
        """How dev, test and prediction files are read: with the training data's label list or
        option count."""
        return {}

    def train_features(self) -> dict[str, np.ndarray]:
        return self.features(self.split_examples("train"))

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self.features(self.split_examples(split))

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[list[Any]]:
        """`albert-jax predict` input: a table with the run's columns; labels optional."""
        return tables.iter_example_chunks(
            path, self.kind, custom_data.columns(self.config.data, self.kind),
            labelled=False, chunk_rows=chunk_rows, **self._reading())

    def write_predictions(self, split: str, predictions: dict[str, np.ndarray],
                          directory: str) -> list[str]:
        return []  # predictions.jsonl (run.evaluate) is this task's prediction file

    def workdir_files(self) -> dict[str, bytes]:
        kept = super().workdir_files()
        if self.labels is None:  # regression: nothing shapes the model
            return kept
        # The label list (multiple choice: the option indices), which evaluate, predict and
        # export read back (`custom_data.labels_in_workdir`).
        labels_file = custom_data.labels_json(self.labels).encode()
        return dict(kept, **{workdir_names.LABELS_FILE: labels_file})


@registry.register("classification")
class CustomClassificationTask(_CustomData, ClassificationTask):
    """Your texts (or pairs) -> your labels (strings); accuracy, macro F1 and MCC on dev."""

    kind = name = "classification"
    dev_metrics = selectable_metrics = scores.CLASSIFICATION_METRICS

    def _from_training_data(self, run_dir: epath.Path | None) -> None:
        # The label list sizes the classifier.
        self.labels = (custom_data.labels_in_workdir(run_dir) if run_dir is not None
                       else self.label_list())

    def label_list(self) -> tuple[str, ...]:
        """The labels in class order: config data.labels, else the sorted set of the training
        file's labels. A subclass (a task of your own) may fix its own."""
        return custom_data.label_list(self.split_examples("train"), self.config.data.labels)

    def _reading(self) -> dict[str, Any]:
        return {"label_list": self.labels}

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = real_rows(predictions)
        return scores.classification_metrics(real["prediction"], real["labels"], len(self.labels))


@registry.register("regression")
class CustomRegressionTask(_CustomData, RegressionTask):
    """Your texts (or pairs) -> a number; Pearson, Spearman and MSE on dev."""

    kind = name = "regression"
    dev_metrics = scores.REGRESSION_METRICS
    selectable_metrics = ("pearson", "spearman")  # not mse: smaller is better

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = real_rows(predictions)
        return scores.regression_metrics(real["prediction"], real["labels"])


@registry.register("multiple_choice")
class CustomMultipleChoiceTask(_CustomData, MultipleChoiceTask):
    """Your questions, each with the same number of options -> the right option; accuracy."""

    kind = name = "multiple_choice"
    dev_metrics = selectable_metrics = scores.MULTIPLE_CHOICE_METRICS

    def _from_training_data(self, run_dir: epath.Path | None) -> None:
        # The option count shapes the model's inputs: the finished run's (labels.json holds the
        # option indices), else the first training question's (every question of every file
        # must have as many).
        if run_dir is not None:
            self.num_choices = len(custom_data.labels_in_workdir(run_dir))
        else:
            train = custom_data.split_table(self.config.data, "train")
            assert train is not None  # configs/custom.py requires a training file
            first = next(tables.iter_example_chunks(
                train, self.kind,
                custom_data.columns(self.config.data, self.kind), chunk_rows=1))[0]
            self.num_choices = len(first.options)

    def _reading(self) -> dict[str, Any]:
        return {"num_choices": self.num_choices}

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        real = real_rows(predictions)
        return scores.multiple_choice_metrics(real["prediction"], real["labels"],
                                               self.num_choices)
