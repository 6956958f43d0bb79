"""Pretraining as a task of the loop: n-gram masked LM + sentence order (SPEC 5).

  albert-jax pretrain --config=configs/pretrain.py:size=base --workdir=DIR

Losses and metrics exactly SPEC 5: masked_lm_loss = sum(w * nll) / (sum(w) + 1e-5) over the
masked positions, the sentence-order (or NSP) loss the mean cross-entropy, loss their sum (the
sentence term dropped for the "none" ablation, paper Table 5). Data: the TFDS shards that
`albert-jax data build` wrote, streamed by data/input/pipeline.py. Evaluation: the SPEC 5.6 metrics
over up to `eval_steps` batches of the eval split, always the same examples (SPEC 5.7).
"""
from __future__ import annotations

import os
from typing import Any, Iterator, Mapping, TypeVar, cast

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

from albert_jax.data.input import pipeline
from albert_jax.data.tokenizers import TextSettings, Tokenizer
from albert_jax.model import AlbertForPreTraining, ModelConfig, example_inputs
from albert_jax.train import checkpoint, flops
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import Batch, HostBatch, Task

MLM_DENOMINATOR_EPSILON = 1e-5  # SPEC 5.3
EVAL_SPLIT = "eval"


def loss_sums(mlm_logits: jax.Array, sop_logits: jax.Array, batch: Batch) -> dict[str, jax.Array]:
    """Sums over the batch from which every SPEC 5 loss and accuracy is a ratio.

    mlm_logits [batch, predictions, vocab], sop_logits [batch, 2] (float32).
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)  # [batch, predictions]
    labels = batch["masked_lm_ids"]
    log_probs = jax.nn.log_softmax(mlm_logits.astype(jnp.float32), axis=-1)
    label_log_probs = jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    mlm_correct = (jnp.argmax(mlm_logits, axis=-1) == labels).astype(jnp.float32)

    sop_labels = batch["next_sentence_labels"].reshape(-1)
    sop_log_probs = jax.nn.log_softmax(sop_logits.astype(jnp.float32), axis=-1)
    sop_label_log_probs = jnp.take_along_axis(sop_log_probs, sop_labels[:, None], axis=-1)[:, 0]
    sop_correct = (jnp.argmax(sop_logits, axis=-1) == sop_labels).astype(jnp.float32)
    return {
        "masked_lm_loss_sum": -jnp.sum(weights * label_log_probs),
        "masked_lm_correct_sum": jnp.sum(weights * mlm_correct),
        "masked_lm_weight_sum": jnp.sum(weights),
        "sentence_order_loss_sum": -jnp.sum(sop_label_log_probs),
        "sentence_order_correct_sum": jnp.sum(sop_correct),
        "sentence_count": jnp.asarray(sop_labels.shape[0], jnp.float32),
    }


# The sums on device in a train step (jax.Array), on the host after evaluation (np.ndarray).
Sums = TypeVar("Sums", jax.Array, np.ndarray)


def metrics_from_sums(sums: dict[str, Sums], sentence_objective: str) -> dict[str, Sums]:
    """SPEC 5.3-5.6: masked_lm_loss = sum(w * nll) / (sum(w) + 1e-5); sentence loss = mean CE;
    loss = their sum (the sentence term is dropped for the "none" ablation)."""
    masked_lm_loss = sums["masked_lm_loss_sum"] / (sums["masked_lm_weight_sum"]
                                                   + MLM_DENOMINATOR_EPSILON)
    sentence_order_loss = sums["sentence_order_loss_sum"] / sums["sentence_count"]
    use_sentence = sentence_objective != "none"
    return {
        "loss": masked_lm_loss + (sentence_order_loss if use_sentence else 0.0),
        "masked_lm_loss": masked_lm_loss,
        "masked_lm_accuracy": sums["masked_lm_correct_sum"] / (sums["masked_lm_weight_sum"]
                                                               + MLM_DENOMINATOR_EPSILON),
        "sentence_order_loss": sentence_order_loss,
        "sentence_order_accuracy": sums["sentence_order_correct_sum"] / sums["sentence_count"],
    }


def init_inputs(seq_len: int, max_predictions: int) -> tuple[jax.Array, ...]:
    """`AlbertForPreTraining.init`'s inputs, batch 1: input_ids, segment_ids, input_mask
    [1, seq] and masked_lm_positions [1, max_predictions]."""
    return (*example_inputs((1, seq_len)), jnp.zeros((1, max_predictions), jnp.int32))


class PretrainingTask(Task):
    """AlbertForPreTraining on the shards of `config.data` (SPEC 1.5 feature names)."""

    eval_splits = (EVAL_SPLIT,)

    def __init__(self, config: ml_collections.ConfigDict,
                 model_config: ModelConfig) -> None:
        self.config = config
        self.model_config = model_config
        self.model = AlbertForPreTraining(model_config)
        self.sentence_objective = config.data.sentence_objective

    def init_inputs(self) -> tuple[jax.Array, ...]:
        return init_inputs(self.config.seq_len, self.config.data.max_predictions)

    def initial_params(self, params: Any) -> Any:
        # init_from: every parameter, heads included (continued pretraining); fresh optimizer.
        if not self.config.init_from:
            return params
        target = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                                sharding=leaf.sharding), params)
        params = checkpoint.load_params_for_init(self.config.init_from, target)
        print(f"Initialised weights from {self.config.init_from}.", flush=True)
        return params

    def apply(self, params: Any, batch: Batch, *, train: bool,
              rng: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        rngs = {"dropout": rng} if train and rng is not None else {}
        # cast: without mutable=, `apply` returns the output alone (flax types it either way)
        return cast(tuple[jax.Array, jax.Array], self.model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            batch["masked_lm_positions"], deterministic=not train, rngs=rngs))

    def loss_sums(self, outputs: tuple[jax.Array, jax.Array], batch: Batch) -> dict[str, jax.Array]:
        mlm_logits, sop_logits = outputs
        return loss_sums(mlm_logits, sop_logits, batch)

    def denominators(self, batch: Batch) -> dict[str, jax.Array]:
        return {"masked_lm": (jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))
                              + MLM_DENOMINATOR_EPSILON),
                "sentences": jnp.asarray(batch["input_ids"].shape[0], jnp.float32)}

    def loss(self, sums: dict[str, jax.Array], denominators: dict[str, jax.Array]) -> jax.Array:
        loss = sums["masked_lm_loss_sum"] / denominators["masked_lm"]
        if self.sentence_objective != "none":
            loss = loss + sums["sentence_order_loss_sum"] / denominators["sentences"]
        return loss

    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return metrics_from_sums(sums, self.sentence_objective)

    def train_iterator(self) -> Any:
        return pipeline.make_iterator(self.config, "train")

    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        # SPEC 1.5 features (data/building/builder.py example_features).
        seq, predictions = self.config.seq_len, self.config.data.max_predictions
        def ints(*shape: int) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct((batch_size, *shape), jnp.int32)

        return {"input_ids": ints(seq), "segment_ids": ints(seq), "input_mask": ints(seq),
                "token_boundary": ints(seq),
                "masked_lm_positions": ints(predictions), "masked_lm_ids": ints(predictions),
                "masked_lm_weights": jax.ShapeDtypeStruct((batch_size, predictions), jnp.float32),
                "next_sentence_labels": ints(1)}

    def eval_batches(self, split: str) -> Iterator[HostBatch]:
        iterator = pipeline.make_iterator(self.config, split, repeat=False)
        for _, batch in zip(range(self.config.eval_steps), iterator):
            yield batch

    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        return {key: float(value) for key, value in
                metrics_from_sums(sums, self.sentence_objective).items()}

    def console_line(self, metrics: Mapping[str, float]) -> list[str]:
        return [f"loss {metrics['loss']:.4f}",
                f"mlm_loss {metrics['masked_lm_loss']:.4f}",
                f"mlm_acc {metrics['masked_lm_accuracy']:.3f}",
                f"sop_loss {metrics['sentence_order_loss']:.4f}",
                f"sop_acc {metrics['sentence_order_accuracy']:.3f}"]

    def workdir_files(self) -> dict[str, bytes]:
        # The tokenizer travels with the weights, with the run's text settings (lower-casing,
        # the SPEC 2.3 digit-comma rule): fine-tuning from this workdir finds them.
        path = epath.Path(self.config.data.tokenizer)
        if not path.exists():
            return {}
        tokenizer = Tokenizer.from_bytes(path.read_bytes(), path=os.fspath(path),
                                         settings=TextSettings.from_config(self.config.data))
        return tokenizer.files(workdir_names.TOKENIZER_FILES[tokenizer.kind])

    def flops_per_example(self, seq_len: int) -> float:
        predictions = self.config.data.max_predictions
        return flops.forward_flops_per_sequence(self.model_config, seq_len, predictions,
                                                output_positions=predictions + 1)

    def final_report(self, eval_metrics: dict[str, dict[str, float]]) -> None:
        metrics = eval_metrics.get(EVAL_SPLIT, {})
        if not metrics:
            return
        print("Final: " + ", ".join(f"{key} {metrics[key]:.4f}" for key in
                                    ("masked_lm_accuracy", "sentence_order_accuracy",
                                     "masked_lm_loss", "sentence_order_loss")), flush=True)
        baselines = majority_baselines(self.eval_batches(EVAL_SPLIT))
        print("Baselines on the same eval batches: always the most frequent masked token "
              f"{baselines['masked_lm_accuracy']:.4f}, always the majority sentence-order "
              f"label {baselines['sentence_order_accuracy']:.4f}", flush=True)


def majority_baselines(batches: Iterator[HostBatch]) -> dict[str, float]:
    """Accuracy of constant guesses on `batches`: the most frequent masked token, and the more
    frequent sentence-order label."""
    token_counts: dict[int, float] = {}
    label_counts = np.zeros(2)
    for batch in batches:
        weights = batch["masked_lm_weights"] > 0
        ids, counts = np.unique(batch["masked_lm_ids"][weights], return_counts=True)
        for token, count in zip(ids.tolist(), counts.tolist()):
            token_counts[token] = token_counts.get(token, 0) + count
        label_counts += np.bincount(batch["next_sentence_labels"].reshape(-1), minlength=2)[:2]
    total_tokens = sum(token_counts.values())
    return {"masked_lm_accuracy": max(token_counts.values()) / total_tokens if total_tokens else 0.0,
            "sentence_order_accuracy": label_counts.max() / max(label_counts.sum(), 1)}
