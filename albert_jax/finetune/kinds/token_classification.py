"""Token classification (tagging: named entities, parts of speech, chunks, slots): the model,
loss, predictions, metrics and records of any tagging task (custom/tagging_task.py registers
the one on your own files).

  AlbertForTokenClassification over `labels` (IOB2 tags, "O" first); softmax cross-entropy over
  the positions that carry a label (a word's first piece; every piece with label_all_pieces),
  averaged over the whole batch's labelled positions, as HuggingFace's token classifier;
  predictions: the arg-max tag of every position, mapped back to words by each row's
  `word_index` (token_features.py: each word from the window where it has the most context);
  dev metrics: entity precision, recall and F1 as seqeval computes them (core/entities.py), word
  accuracy and the per-type scores; `f1` keeps the best checkpoint.

A family subclass supplies the sentences (`split_examples`, `read_inputs`: lists of
examples.Sentence) and `labels`.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax import files
from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.data.tokenizers import Tokenizer
from albert_jax.finetune.core import entities
from albert_jax.finetune.core.examples import Sentence
from albert_jax.finetune.core.pretrained import Pretrained
from albert_jax.finetune.core.task import FinetuneTask, real_rows
from albert_jax.finetune.kinds import token_features
from albert_jax.model import AlbertForTokenClassification, ModelConfig
from albert_jax.train import flops
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Batch

SELECTION_METRICS = ("f1", "precision", "recall", "accuracy")


class TokenClassificationTask(FinetuneTask):
    """Words -> one tag each (module docstring)."""

    labels: tuple[str, ...]
    # labels is cut with the inputs to each batch's length bucket; word_index is not (it only
    # travels back with the predictions, padded to seq_len like them).
    sequence_fields = ("input_ids", "segment_ids", "input_mask", "labels")

    def __init__(self, config: ml_collections.ConfigDict, model_config: ModelConfig,
                 tokenizer: Tokenizer | None, pretrained: Pretrained | None,
                 run_dir: epath.Path | None = None) -> None:
        super().__init__(config, model_config, tokenizer, pretrained, run_dir)
        self._per_type: dict[str, dict[str, Any]] = {}  # split -> the last eval's type scores
        self.model = AlbertForTokenClassification(
            model_config, num_labels=len(self.labels),
            classifier_dropout=config.classifier_dropout)

    # --- Features --------------------------------------------------------------------------------
    def features(self, sentences: Sequence[Sentence], *, labelled: bool) -> dict[str, np.ndarray]:
        """token_features.build's rows of `sentences` (labels only when `labelled`)."""
        data = self.config.data
        assert self.tokenizer is not None  # only a task for shapes (plan) has none
        return token_features.build(
            sentences, self.tokenizer, seq_len=self.config.seq_len, doc_stride=data.doc_stride,
            label_ids={tag: index for index, tag in enumerate(self.labels)} if labelled else None,
            label_all_pieces=data.label_all_pieces)

    def train_features(self) -> dict[str, np.ndarray]:
        arrays = self.features(self.split_examples("train"), labelled=True)
        del arrays["word_index"], arrays["sentence_index"]  # the loss needs neither
        return arrays

    def eval_features(self, split: str) -> dict[str, np.ndarray]:
        return self.features(self.split_examples(split), labelled=True)

    def input_features(self, examples: list[Any]) -> dict[str, np.ndarray]:
        arrays = self.features(examples, labelled=False)
        arrays["labels"] = np.full_like(arrays["input_ids"], token_features.IGNORED)
        return arrays

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        spec = super().train_batch_spec(batch_size)
        spec["labels"] = spec["input_ids"]  # [batch, seq] int32, -100 where no label
        return spec

    # --- Loss: cross-entropy over the labelled positions -----------------------------------------
    def _labelled(self, batch: Batch) -> jax.Array:
        """float32 [batch, seq]: 1 where a real example's position carries a label."""
        return ((batch["labels"] >= 0).astype(jnp.float32)
                * batch["example_weight"].astype(jnp.float32)[:, None])

    def loss_sums(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        """outputs: logits [batch, seq, labels], float32."""
        weights = self._labelled(batch)
        labels = jnp.maximum(batch["labels"], 0)
        log_probs = jax.nn.log_softmax(outputs.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
        correct = (jnp.argmax(outputs, axis=-1) == labels).astype(jnp.float32)
        return {"loss_sum": jnp.sum(weights * nll), "correct_sum": jnp.sum(weights * correct),
                "label_count": jnp.sum(weights)}

    def denominators(self, batch: Batch) -> dict[str, jax.Array]:
        return {"labels": jnp.maximum(jnp.sum(self._labelled(batch)), 1.0)}

    def loss(self, sums: dict[str, jax.Array], denominators: dict[str, jax.Array]) -> jax.Array:
        return sums["loss_sum"] / denominators["labels"]

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        count = jnp.maximum(sums["label_count"], 1.0)
        return {"loss": sums["loss_sum"] / count, "accuracy": sums["correct_sum"] / count}

    def console_line(self, metrics: Mapping[str, float]) -> list[str]:
        line = [f"loss {metrics['loss']:.4f}", f"acc {metrics['accuracy']:.3f}"]
        return line + [f"f1 {metrics['f1']:.3f}"] if "f1" in metrics else line

    def flops_per_example(self, seq_len: int) -> float:
        # Every position is read from the last layer (output_positions None).
        return flops.forward_flops_per_sequence(self.model_config, seq_len, 0)

    # --- Predictions -----------------------------------------------------------------------------
    def predictions(self, outputs: jax.Array, batch: Batch) -> dict[str, jax.Array]:
        """prediction (tag id) and word_index [batch, seq_len] (a batch cut to its length
        bucket padded back, so that batches concatenate), sentence_index [batch]."""
        prediction = jnp.argmax(outputs, axis=-1).astype(jnp.int32)
        prediction = jnp.pad(prediction, ((0, 0), (0, self.config.seq_len - prediction.shape[1])))
        return {"prediction": prediction, "word_index": batch["word_index"],
                "sentence_index": batch["sentence_index"]}

    def sentence_tags(self, sentences: Sequence[Sentence],
                      predictions: dict[str, np.ndarray]) -> list[list[str]]:
        """The predicted tags of each of `sentences`, one per word."""
        return token_features.word_tags(real_rows(predictions), len(sentences), self.labels)

    def prediction_records(self, examples: list[Any],
                           predictions: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One JSON object per sentence: id, tokens, tags (one per word) and entities (type,
        start and end word, end exclusive, and their text joined by spaces)."""
        records = []
        for sentence, tags in zip(examples, self.sentence_tags(examples, predictions)):
            records.append({
                "id": sentence.id, "tokens": list(sentence.tokens), "tags": tags,
                "entities": [{"type": kind, "start": start, "end": end,
                              "text": " ".join(sentence.tokens[start:end])}
                             for kind, start, end in entities.entities(tags)]})
        return records

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        """f1, precision, recall (entities), accuracy (words), and <type>_f1 per entity type."""
        sentences = self.split_examples(split)
        scores = entities.entity_scores([sentence.tags for sentence in sentences],
                                        self.sentence_tags(sentences, predictions))
        report = {key: float(scores[key]) for key in ("f1", "precision", "recall", "accuracy")}
        report.update({f"{kind}_f1": float(values["f1"])
                       for kind, values in scores["per_type"].items()})
        self._per_type[split] = scores["per_type"]
        return report

    def write_dev_metrics(self, split_metrics: dict[str, dict[str, float]], step: int,
                          directory: str) -> list[str]:
        """metrics.json: the dev metrics, with each type's precision, recall, F1 and support
        (its gold entities) under `per_type`."""
        report = dict(split_metrics.get("dev", {}), step=step,
                      per_type=self._per_type.get("dev", {}))
        path = os.path.join(directory, workdir_names.SCORES_FILE)
        files.write_atomically(path, json.dumps(report, indent=2, sort_keys=True))
        return [path]

    def huggingface_head(self) -> FinetunedHead:
        return FinetunedHead("AlbertForTokenClassification", tuple(self.labels))

