"""Sequence classification and regression on one text or a pair (SPEC 8.2): the head, loss and
prediction records shared by GLUE (glue/task.py) and a user's own files (custom/task.py).

  ClassificationTask: AlbertForSequenceClassification over `labels`; softmax cross-entropy;
                      predictions carry the class and every class's probability.
  RegressionTask:     the same model with one output; mean squared error (STS-B, SPEC 8.2).

A family subclass supplies the data (`train_features`, `eval_features`, `split_examples`,
`read_inputs`), `eval_metrics` and `write_predictions`; examples are objects with `id`,
`text_a`, `text_b`, `label` and `source` (examples.TextExample).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.data.tokenizers import Tokenizer
from albert_jax.finetune.core import features
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.core.task import FinetuneTask
from albert_jax.model import AlbertForSequenceClassification, ModelConfig
from albert_jax.train.task import Batch


class ClassificationTask(FinetuneTask):
    """One text or a pair -> one of `labels` (strings, in class-index order)."""

    labels: tuple[str, ...]

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        self.model = self.build_model()

    def build_model(self) -> nn.Module:
        return AlbertForSequenceClassification(
            self.model_config, num_labels=self.num_outputs(),
            classifier_dropout=self.config.classifier_dropout)

    def num_outputs(self) -> int:
        return len(self.labels)

    def features(self, examples: Sequence[Any]) -> dict[str, np.ndarray]:
        """input_ids, segment_ids, input_mask [examples, seq_len]; labels [examples]."""
        assert self.tokenizer is not None  # only a task for shapes (plan) has none
        return features.classification_features(examples, self.tokenizer, self.config.seq_len,
                                                self.labels)

    def input_features(self, examples: Sequence[Any]) -> dict[str, np.ndarray]:
        return self.features(examples)

    # --- Loss: cross-entropy over class labels ----------------------------------------------------
    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        """outputs: logits [batch, classes], float32."""
        weights = batch["example_weight"].astype(jnp.float32)
        labels = batch["labels"].astype(jnp.int32)
        log_probs = jax.nn.log_softmax(outputs.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
        correct = (jnp.argmax(outputs, axis=-1) == labels).astype(jnp.float32)
        return {"loss_sum": jnp.sum(weights * nll), "correct_sum": jnp.sum(weights * correct),
                "example_count": jnp.sum(weights)}

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        count = jnp.maximum(sums["example_count"], 1.0)
        return dict(super().metrics_from_sums(sums), accuracy=sums["correct_sum"] / count)

    def console_line(self, metrics: Mapping[str, float]) -> list[str]:
        return [*super().console_line(metrics), f"acc {metrics['accuracy']:.3f}"]

    # --- Predictions -----------------------------------------------------------------------------
    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        """prediction [batch] (class index), labels [batch], probabilities [batch, classes]."""
        return {"prediction": jnp.argmax(outputs, axis=-1), "labels": batch["labels"],
                "probabilities": jax.nn.softmax(outputs.astype(jnp.float32), axis=-1)}

    def prediction_records(self, examples: Sequence[Any],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per example: id, prediction (label), probabilities (label -> p)."""
        return [{"id": example.id, "prediction": self.labels[int(prediction)],
                 "probabilities": {label: float(p) for label, p in zip(self.labels, probabilities)}}
                for example, prediction, probabilities in zip(
                    examples, predictions["prediction"], predictions["probabilities"])]

    def label_strings(self, values: Iterable[Any]) -> list[str]:
        """Predicted class indices as their label strings."""
        return [self.labels[int(value)] for value in values]

    def huggingface_head(self) -> FinetunedHead:
        return FinetunedHead("AlbertForSequenceClassification", tuple(self.labels))


class RegressionTask(ClassificationTask):
    """One text or a pair -> a real number: one output, mean squared error (SPEC 8.2, STS-B)."""

    # No classes: features.classification_features reads the labels as numbers.
    labels = None  # type: ignore[assignment]  # a regression task has no label list

    def num_outputs(self) -> int:
        return 1

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        spec = super().train_batch_spec(batch_size)
        spec["labels"] = jax.ShapeDtypeStruct((batch_size,), jnp.float32)  # a score
        return spec

    # The loss alone (no accuracy): FinetuneTask's.
    metrics_from_sums = FinetuneTask.metrics_from_sums
    console_line = FinetuneTask.console_line

    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        weights = batch["example_weight"].astype(jnp.float32)
        error = outputs[:, 0].astype(jnp.float32) - batch["labels"].astype(jnp.float32)
        return {"loss_sum": jnp.sum(weights * jnp.square(error)), "example_count": jnp.sum(weights)}

    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        return {"prediction": outputs[:, 0], "labels": batch["labels"]}

    def prediction_records(self, examples: Sequence[Any],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per example: id, prediction and score (the same number)."""
        return [{"id": example.id, "prediction": float(value), "score": float(value)}
                for example, value in zip(examples, predictions["prediction"])]

    def label_strings(self, values: Iterable[Any]) -> list[str]:
        return [f"{float(value):.3f}" for value in values]

    def huggingface_head(self) -> FinetunedHead:
        return FinetunedHead("AlbertForSequenceClassification", ())
