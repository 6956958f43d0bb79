"""Tagging your own files: `configs/custom.py:kind=token_classification` (tagging_data.py reads
CoNLL columns, JSON Lines or Parquet; kinds/token_classification.py is the model, loss and
metrics).

  albert-jax finetune --config=configs/custom.py:kind=token_classification \
      --config.data.train_file=train.conll --config.data.dev_file=dev.conll \
      --config.init_from=albert_base/ --workdir=runs/ner
  albert-jax predict --workdir=runs/ner --input=new.conll --output=new.jsonl

Every split is read when the run starts, so a bad line stops it before anything is written to
the workdir. The tag list (config data.labels, else "O" and the sorted training tags, in IOB2)
is kept in the workdir as labels.json: evaluate, predict and the HuggingFace export (`id2label`)
read it there.
"""
from __future__ import annotations

from typing import Any, Iterator

import ml_collections
from etils import epath

from albert_jax.data.tokenizers import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune.core import registry
from albert_jax.finetune.core.examples import Sentence
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.custom import data as custom_data
from albert_jax.finetune.custom import tagging_data
from albert_jax.finetune.kinds.token_classification import (
    SELECTION_METRICS,
    TokenClassificationTask,
)
from albert_jax.model import ModelConfig
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Selection


def _given_labels(data: ml_collections.ConfigDict) -> tuple[str, ...]:
    """config data.labels as a tuple of IOB2 tags ("" = none given)."""
    labels = custom_data.name_list(data.labels, "data.labels")
    if labels:
        tagging_data.to_iob2(labels, "iob2", ["config data.labels"] * len(labels))
        if len(labels) < 2 or tagging_data.OUTSIDE not in labels:
            raise ConfigError(f"config data.labels={data.labels!r}: give 'O' and at least one "
                              "entity tag (B-X, I-X)")
    return labels


@registry.register("token_classification")
class CustomTokenClassificationTask(TokenClassificationTask):
    """Your sentences, a tag per word -> entities; entity F1 (seqeval's) on dev."""

    name = "token_classification"
    config_file = "custom.py:kind=token_classification"

    @classmethod
    def metric_names(cls, config: ml_collections.ConfigDict) -> tuple[str, ...]:
        return SELECTION_METRICS

    @classmethod
    def selection_metric(cls, config: ml_collections.ConfigDict) -> str:
        return config.selection_metric

    @classmethod
    def validate_config(cls, config: ml_collections.ConfigDict) -> None:
        data = config.data
        custom_data.check_split_tables(data, ".conll, .txt, .jsonl or .parquet")
        for split in custom_data.SPLIT_FILE_KEYS:
            table = custom_data.split_table(data, split)
            if table is not None:
                tagging_data.check_extension(table)
        if data.tag_scheme not in tagging_data.SCHEMES:
            raise ConfigError(f"config data.tag_scheme={data.tag_scheme!r}: use one of "
                              f"{', '.join(tagging_data.SCHEMES)}")
        if data.doc_stride < 1:
            raise ConfigError(f"config data.doc_stride={data.doc_stride} must be at least 1")
        if config.selection_metric not in SELECTION_METRICS:
            raise ConfigError(f"config selection_metric={config.selection_metric!r}: a tagging "
                              f"task keeps its best checkpoint by one of "
                              f"{', '.join(SELECTION_METRICS)}")
        _given_labels(data)
        super().validate_config(config)

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        self.config = config
        self.eval_splits, self.test_splits = custom_data.custom_file_splits(config)
        self.selection = Selection("dev", config.selection_metric)
        self.columns = tagging_data.TagColumns(tokens=config.data.tokens, tags=config.data.tags,
                                               id=config.data.id,
                                               tag_column=config.data.tag_column)
        self._splits: dict[str, list[Sentence]] = {}
        self.labels = (custom_data.labels_in_workdir(run_dir) if run_dir is not None
                       else self._train_labels())
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        if tokenizer is not None and run_dir is None:
            # A run about to train: every file is read now, so a bad line stops it before
            # anything is written to the workdir.
            for split in ("dev", *self.test_splits):
                self.split_examples(split)

    def _train_labels(self) -> tuple[str, ...]:
        labels = tagging_data.label_list(self.split_examples("train"),
                                         _given_labels(self.config.data))
        if len(labels) < 2:
            raise ValueError(f"{custom_data.split_table(self.config.data, 'train')}: every tag is "
                             "'O'; a tagging task needs entity tags (B-X, I-X) to learn")
        return labels

    def split_examples(self, split: str) -> list[Sentence]:
        if split not in self._splits:
            # The training file decides the tag list; the other files are read against it.
            table = custom_data.split_table(self.config.data, split)
            assert table is not None  # asked only for the splits the config has
            self._splits[split] = tagging_data.read_file(
                table, self.columns,
                scheme=self.config.data.tag_scheme,
                labels=None if split == "train" else self.labels, labelled=split != "test")
        return self._splits[split]

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[list[Any]]:
        """`albert-jax predict` input: CoNLL or a table of token lists; tags not needed."""
        return tagging_data.iter_sentence_chunks(path, self.columns, labelled=False,
                                                 chunk_size=chunk_rows)

    def workdir_files(self) -> dict[str, bytes]:
        return dict(super().workdir_files(),
                    **{workdir_names.LABELS_FILE: custom_data.labels_json(self.labels).encode()})

    def write_predictions(self, split: str, predictions: Any, directory: str) -> list[str]:
        return []  # predictions.jsonl (run.evaluate) is this task's prediction file
