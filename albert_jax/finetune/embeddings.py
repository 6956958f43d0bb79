"""Embeddings: one vector per text from a run's backbone, what `albert-jax predict --embeddings`
writes.

  albert-jax predict --workdir=W --input=texts.csv --output=vectors.jsonl --embeddings=mean

W: a pretraining run (its latest checkpoint) or a fine-tuned one (its best dev checkpoint); the
backbone alone is read, never a head. The input: a table (tables.py: CSV, TSV, JSON Lines,
Parquet, a `datasets` folder or .arrow file) with a text column, optionally a second text and
an id: a fine-tuned own-data run's data.text_a / text_b / id columns, else `text`, and `id`
when the table has one (else the 0-based row number). Each row is [CLS] text [SEP] (text_b
[SEP]), cut to the run's seq_len as fine-tuning cuts it (SPEC 8.1); the last layer's hidden
states [rows, seq, hidden] are pooled:
  cls:  the hidden state at [CLS] (position 0; not the pooler's dense + tanh);
  mean: the mean over the real positions (input_mask), as HuggingFace's feature-extraction
        pipeline followed by a mean over the attention mask (sentence-transformers' pooling).
Records {"id": ..., "embedding": float32 [hidden]}, in input order (run.py writes them as JSON
Lines, or as one .npy array [rows, hidden]).
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from albert_jax.data.input import pipeline
from albert_jax.finetune.core import tables
from albert_jax.finetune.core.examples import TextExample
from albert_jax.finetune.core.features import classification_features
from albert_jax.finetune.core.task import ArraySource, padded
from albert_jax.model import AlbertModel
from albert_jax.train.task import Batch, HostBatch

POOLINGS = ("cls", "mean")


class Embeddings:
    """The backbone of a finished run's task (`run_task`: its config, model config and
    tokenizer), pooled by `pooling` (one of POOLINGS): the predict interface FinishedRun drives
    (read_inputs, input_features, batches_of, apply, predictions, loss_sums,
    prediction_records)."""

    sequence_fields = ("input_ids", "segment_ids", "input_mask")

    def __init__(self, run_task: Any, pooling: str) -> None:
        self.config = run_task.config
        self.model_config = run_task.model_config
        self.tokenizer = run_task.tokenizer
        self.pooling = pooling
        self.backbone = AlbertModel(self.model_config)

    # --- Inputs ----------------------------------------------------------------------------------
    def columns(self, path: str) -> tables.Columns:
        """The run's own-data text columns, else `text` (and `id` where the table has one)."""
        data = self.config.get("data", {})
        text_a = data.get("text_a") or "text"
        id_column = data.get("id") or ("id" if "id" in tables.column_names(path) else "")
        return tables.Columns(text_a=text_a, text_b=data.get("text_b") or "", id=id_column)

    def read_inputs(self, path: str, chunk_rows: int) -> Iterator[list[TextExample]]:
        return tables.iter_example_chunks(path, "classification", self.columns(path),
                                          labelled=False, chunk_rows=chunk_rows)

    def input_features(self, examples: Sequence[TextExample]) -> dict[str, np.ndarray]:
        features = classification_features(examples, self.tokenizer, self.config.seq_len, None)
        del features["labels"]
        return features

    def batches_of(self, arrays: dict[str, np.ndarray]) -> Iterator[HostBatch]:
        """This host's rows of `arrays` in padded global eval batches."""
        batch_size = self.config.eval_batch_size
        return iter(pipeline.make_dataset(
            ArraySource(padded(arrays, batch_size)), batch_size=batch_size,
            process_index=jax.process_index(), process_count=jax.process_count(), repeat=False,
            shuffle_seed=None, dynamic_masking=None))

    # --- Model -----------------------------------------------------------------------------------
    def apply(self, params: Any, batch: Batch, *, train: bool, rng: jax.Array | None
              ) -> jax.Array:
        """The pooled vectors [batch, hidden], float32, from the backbone of `params`."""
        del train, rng
        hidden, _ = self.backbone.apply({"params": params["albert"]}, batch["input_ids"],
                                        batch["segment_ids"], batch["input_mask"])
        hidden = hidden.astype(jnp.float32)
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = batch["input_mask"].astype(jnp.float32)[..., None]
        return jnp.sum(hidden * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)

    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return {}

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return {"embedding": outputs}

    def prediction_records(self, examples: list[TextExample],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """{"id", "embedding": float32 [hidden]} per example (`predictions`: its real rows, in
        the order of `examples`)."""
        return [{"id": example.id, "embedding": vector}
                for example, vector in zip(examples, predictions["embedding"])]
