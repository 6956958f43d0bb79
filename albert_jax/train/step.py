"""The pure pretraining and evaluation steps: losses and metrics exactly SPEC 5.

Gradient accumulation (T5X style): the batch is split into `num_microbatches` along the batch
axis and a `lax.scan` sums the microbatch gradients. Each microbatch loss is normalised by the
WHOLE batch's denominators (masked-LM weight sum + 1e-5, sentence count), which do not depend on
the parameters, so the summed loss and gradient equal those of one big batch exactly.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

Batch = dict[str, jax.Array]
Metrics = dict[str, jax.Array]

MLM_DENOMINATOR_EPSILON = 1e-5  # SPEC 5.3


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


def metrics_from_sums(sums: dict[str, jax.Array], sentence_objective: str) -> Metrics:
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


def _forward(model: nn.Module, params: Any, batch: Batch, deterministic: bool,
             dropout_rng: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    rngs = {} if dropout_rng is None else {"dropout": dropout_rng}
    return model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                       batch["input_mask"], batch["masked_lm_positions"],
                       deterministic=deterministic, rngs=rngs)


def _split_microbatches(batch: Batch, num_microbatches: int) -> Batch:
    """[batch, ...] -> [num_microbatches, batch / num_microbatches, ...]."""
    def split(x: jax.Array) -> jax.Array:
        if x.shape[0] % num_microbatches:
            raise ValueError(f"batch size {x.shape[0]} is not divisible by num_microbatches="
                             f"{num_microbatches}")
        return x.reshape(num_microbatches, x.shape[0] // num_microbatches, *x.shape[1:])
    return jax.tree_util.tree_map(split, batch)


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation,
                    learning_rate_fn: Callable[[jax.Array], jax.Array], *,
                    num_microbatches: int = 1, sentence_objective: str = "sop"
                    ) -> Callable[..., tuple[Any, Metrics]]:
    """Returns train_step(state, batch, rng) -> (state, metrics), a pure function to jit.

    `state` has `.step`, `.params`, `.opt_state` and `.replace` (train/state.py TrainState).
    """
    use_sentence = sentence_objective != "none"

    def train_step(state: Any, batch: Batch, rng: jax.Array) -> tuple[Any, Metrics]:
        dropout_rng = jax.random.fold_in(rng, state.step)
        # Whole-batch denominators, fixed before the microbatch split (module docstring).
        mlm_denominator = (jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))
                           + MLM_DENOMINATOR_EPSILON)
        sentence_count = jnp.asarray(batch["input_ids"].shape[0], jnp.float32)

        def microbatch_loss(params: Any, microbatch: Batch, index: jax.Array):
            mlm_logits, sop_logits = _forward(model, params, microbatch, False,
                                              jax.random.fold_in(dropout_rng, index))
            sums = loss_sums(mlm_logits, sop_logits, microbatch)
            loss = sums["masked_lm_loss_sum"] / mlm_denominator
            if use_sentence:
                loss = loss + sums["sentence_order_loss_sum"] / sentence_count
            return loss, sums

        grad_fn = jax.value_and_grad(microbatch_loss, has_aux=True)
        if num_microbatches == 1:
            (_, sums), grads = grad_fn(state.params, batch, jnp.int32(0))
        else:
            microbatches = _split_microbatches(batch, num_microbatches)

            def accumulate(carry, inputs):
                grads_sum, sums_sum = carry
                index, microbatch = inputs
                (_, sums), grads = grad_fn(state.params, microbatch, index)
                add = lambda a, b: a + b
                return (jax.tree_util.tree_map(add, grads_sum, grads),
                        jax.tree_util.tree_map(add, sums_sum, sums)), None

            zeros_grads = jax.tree_util.tree_map(jnp.zeros_like, state.params)
            first = jax.tree_util.tree_map(lambda x: x[0], microbatches)
            sums_shape = jax.eval_shape(grad_fn, state.params, first, jnp.int32(0))[0][1]
            zeros_sums = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), sums_shape)
            (grads, sums), _ = jax.lax.scan(
                accumulate, (zeros_grads, zeros_sums),
                (jnp.arange(num_microbatches), microbatches))

        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = metrics_from_sums(sums, sentence_objective)
        metrics["learning_rate"] = learning_rate_fn(state.step)
        metrics["grad_norm"] = optax.tree.norm(grads)  # before clipping
        metrics["param_norm"] = optax.tree.norm(params)
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return train_step


def make_eval_step(model: nn.Module) -> Callable[[Any, Batch], dict[str, jax.Array]]:
    """Returns eval_step(params, batch) -> loss sums; add them over batches, then
    `metrics_from_sums` gives the SPEC 5.6 eval metrics over the whole eval set."""

    def eval_step(params: Any, batch: Batch) -> dict[str, jax.Array]:
        mlm_logits, sop_logits = _forward(model, params, batch, True, None)
        return loss_sums(mlm_logits, sop_logits, batch)

    return eval_step
