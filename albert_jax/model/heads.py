"""Output heads: masked LM (tied, gathered), sentence order, classification, span, multiple choice."""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from albert_jax.model import layers
from albert_jax.model.presets import ModelConfig


class MaskedLMHead(nn.Module):
    """SPEC 5.2: on the hidden states at masked_lm_positions, dense H->E, act, LN, tied decoder
    + bias.

    Its input is already gathered at the P masked positions (the backbone computes its last layer
    there only), so V logits are computed for P positions, not for all S (as the reference does;
    HF computes all S, SPEC 11.4).
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, masked_hidden: jax.Array,
                 attend: Callable[[jax.Array], jax.Array]) -> jax.Array:
        """masked_hidden [batch, predictions, hidden] -> logits [batch, predictions, vocab]
        (float32). `attend` is the tied word-embedding projection [..., embedding] -> [..., vocab]."""
        config = self.config
        dtype = config.compute_dtype
        hidden = nn.with_logical_constraint(masked_hidden, layers.SEQUENCE_HIDDEN)
        hidden = layers.Dense(config.embedding_size, ("hidden", "embedding"),
                              layers.truncated_normal(config.initializer_range), dtype=dtype,
                              name="dense")(hidden)
        hidden = layers.activation(config.hidden_act)(hidden)
        hidden = layers.LayerNorm(config.layer_norm_eps, "embedding", dtype=dtype,
                                  name="LayerNorm")(hidden)
        output_bias = self.param("output_bias",
                                 layers.with_axes(nn.initializers.zeros, ("vocab",)),
                                 (config.vocab_size,), jnp.float32)
        # Logits [batch, predictions, vocab] split by batch like everything before them, not by
        # vocab like the table they come from (which would all-reduce the softmax over fsdp).
        return nn.with_logical_constraint(attend(hidden) + output_bias,
                                          ("batch", "length", None))


class ClassifierHead(nn.Module):
    """Dropout then dense on a pooled vector: [batch, hidden] -> [batch, num_labels].

    The sentence-order head uses it with dropout 0 (SPEC 5.4: the reference has none there);
    GLUE uses dropout 0.1 (SPEC 8.2); STS-B regression is num_labels=1.
    """

    config: ModelConfig
    num_labels: int
    dropout_rate: float = 0.0

    @nn.compact
    def __call__(self, pooled_output: jax.Array, deterministic: bool = True) -> jax.Array:
        if self.dropout_rate > 0:
            pooled_output = nn.Dropout(self.dropout_rate)(pooled_output, deterministic=deterministic)
        logits = layers.Dense(self.num_labels, ("hidden_out", "classes"),
                              layers.truncated_normal(self.config.initializer_range),
                              dtype=self.config.compute_dtype, name="dense")(pooled_output)
        return logits.astype(jnp.float32)


# ----------------------------------------------------------------------------------------------
# SQuAD (SPEC 8.3). The head of either model lives under "squad"; its names map to the reference's
# TF variables (SPEC 4.3) as: v1.1 squad/output_weights, output_bias <- cls/squad/output_weights
# [2, H], cls/squad/output_bias [2] (same layout); v2.0 squad/<X>/.../{kernel,bias}
# <- <X>/.../{kernel,bias} for X in start_logits, end_logits, answer_class, and the LayerNorm's
# scale, bias <- gamma, beta.
# ----------------------------------------------------------------------------------------------

_SQUAD_LAYER_NORM_EPS = 1e-12  # tf.contrib.layers.layer_norm, fixed whatever the model config
_MASKED_LOGIT = 1e30  # SPEC 8.3: logit * (1 - p_mask) - 1e30 * p_mask


class SquadV1Head(nn.Module):
    """SQuAD v1.1: [batch, seq, hidden] -> (start_logits, end_logits) [batch, seq], float32.

    logits = sequence_output @ output_weights^T + output_bias with output_weights [2, H] stored
    as the reference stores cls/squad/output_weights.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, sequence_output: jax.Array) -> tuple[jax.Array, jax.Array]:
        dtype = self.config.compute_dtype
        output_weights = self.param(
            "output_weights", layers.with_axes(
                layers.truncated_normal(self.config.initializer_range), ("classes", "hidden")),
            (2, sequence_output.shape[-1]), jnp.float32)
        output_bias = self.param(
            "output_bias", layers.with_axes(nn.initializers.zeros, ("classes",)),
            (2,), jnp.float32)
        logits = jnp.einsum("bsh,ch->bsc", sequence_output.astype(dtype),
                            output_weights.astype(dtype),
                            preferred_element_type=jnp.float32) + output_bias
        return logits[..., 0], logits[..., 1]


def squad_v1_loss(start_logits: jax.Array, end_logits: jax.Array, start_positions: jax.Array,
                  end_positions: jax.Array) -> jax.Array:
    """SPEC 8.3 v1.1 loss per feature, [batch]: the mean of the start and end cross-entropies.

    The batch mean of it is the reference's total_loss. Logits [batch, seq], positions [batch].
    """
    def cross_entropy(logits: jax.Array, positions: jax.Array) -> jax.Array:
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return -jnp.take_along_axis(log_probs, positions[:, None].astype(jnp.int32), axis=-1)[:, 0]

    return 0.5 * (cross_entropy(start_logits, start_positions)
                  + cross_entropy(end_logits, end_positions))


class _ConcatDense(nn.Module):
    """dense([x ; y]) with the TF kernel [in_x + in_y, features], without building [x ; y]:
    x @ kernel[:in_x] + y @ kernel[in_x:] + bias. x and y broadcast against each other, so the
    end logits of k candidate starts cost one [S, H] x [H, H] product, not k of [S, 2H] x [2H, H].
    """

    features: int
    kernel_init: layers.Initializer
    use_bias: bool = True
    dtype: jax.typing.DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        in_x = x.shape[-1]
        kernel = self.param("kernel", layers.with_axes(self.kernel_init, ("hidden", "hidden_out")),
                            (in_x + y.shape[-1], self.features), jnp.float32).astype(self.dtype)
        outputs = (jnp.dot(x.astype(self.dtype), kernel[:in_x], preferred_element_type=jnp.float32)
                   + jnp.dot(y.astype(self.dtype), kernel[in_x:],
                             preferred_element_type=jnp.float32))
        if self.use_bias:
            outputs = outputs + self.param(
                "bias", layers.with_axes(nn.initializers.zeros, ("hidden_out",)),
                (self.features,), jnp.float32)
        return outputs


class _SquadStartLogits(nn.Module):
    """start_logits/dense: [batch, seq, hidden] -> [batch, seq] (before masking), float32."""

    config: ModelConfig

    @nn.compact
    def __call__(self, sequence_output: jax.Array) -> jax.Array:
        logits = layers.Dense(1, ("hidden", "classes"),
                              layers.truncated_normal(self.config.initializer_range),
                              dtype=self.config.compute_dtype, name="dense")(sequence_output)
        return logits[..., 0].astype(jnp.float32)


class _SquadEndLogits(nn.Module):
    """end_logits: dense_1(LayerNorm(tanh(dense_0([h_j ; h_start])))) for every position j.

    sequence_output [batch, seq, hidden], start_features [batch, k, hidden] (the hidden states
    at k candidate starts) -> [batch, k, seq] (before masking), float32.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, sequence_output: jax.Array, start_features: jax.Array) -> jax.Array:
        config = self.config
        dtype = config.compute_dtype
        init = layers.truncated_normal(config.initializer_range)
        hidden = _ConcatDense(config.hidden_size, init, dtype=dtype, name="dense_0")(
            sequence_output[:, None, :, :], start_features[:, :, None, :])  # [batch, k, seq, H]
        hidden = jnp.tanh(hidden).astype(dtype)
        hidden = layers.LayerNorm(_SQUAD_LAYER_NORM_EPS, "hidden_out", dtype=dtype,
                                  name="LayerNorm")(hidden)
        logits = layers.Dense(1, ("hidden_out", "classes"), init, dtype=dtype,
                              name="dense_1")(hidden)
        return logits[..., 0].astype(jnp.float32)


class _SquadAnswerClass(nn.Module):
    """answer_class: dense_1(dropout(tanh(dense_0([start_feature ; cls_feature])))), no bias on
    dense_1: [batch, hidden] twice -> cls_logits [batch], float32 (log-odds of no answer)."""

    config: ModelConfig
    dropout_rate: float

    @nn.compact
    def __call__(self, start_feature: jax.Array, cls_feature: jax.Array,
                 deterministic: bool) -> jax.Array:
        config = self.config
        dtype = config.compute_dtype
        init = layers.truncated_normal(config.initializer_range)
        hidden = jnp.tanh(_ConcatDense(config.hidden_size, init, dtype=dtype, name="dense_0")(
            start_feature, cls_feature)).astype(dtype)
        if self.dropout_rate > 0:
            hidden = nn.Dropout(self.dropout_rate)(hidden, deterministic=deterministic)
        logits = layers.Dense(1, ("hidden_out", "classes"), init, use_bias=False, dtype=dtype,
                              name="dense_1")(hidden)
        return logits[..., 0].astype(jnp.float32)


def _mask_logits(logits: jax.Array, p_mask: jax.Array) -> jax.Array:
    return logits * (1.0 - p_mask) - _MASKED_LOGIT * p_mask


class SquadV2Head(nn.Module):
    """SQuAD v2.0, XLNet-style (SPEC 8.3, reference `create_v2_model`).

    Start logits dense(H -> 1) masked with p_mask (1 = cannot be in the answer); end logits
    conditioned on a start: the gold start when `start_positions` is given (training, and the
    dev loss), else a beam over the start_n_top best starts x end_n_top best ends; the
    answerability class on [sum_j softmax(start)_j h_j ; h_[CLS]]. End logits are masked with
    p_mask as well (the reference does, SPEC 8.3 names only the start).

    Returns with start_positions: start_log_probs, end_log_probs [batch, seq], cls_logits
    [batch]; without: start_top_log_probs, start_top_index [batch, start_n_top],
    end_top_log_probs, end_top_index [batch, start_n_top * end_n_top] (entry i * end_n_top + j:
    the j-th end of the i-th start), cls_logits [batch]. All float32 / int32.
    """

    config: ModelConfig
    start_n_top: int = 5
    end_n_top: int = 5
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, sequence_output: jax.Array, p_mask: jax.Array,
                 start_positions: jax.Array | None = None,
                 deterministic: bool = True) -> dict[str, jax.Array]:
        """sequence_output [batch, seq, hidden], p_mask [batch, seq], start_positions [batch]."""
        p_mask = p_mask.astype(jnp.float32)
        start_logits = _mask_logits(
            _SquadStartLogits(self.config, name="start_logits")(sequence_output), p_mask)
        start_log_probs = jax.nn.log_softmax(start_logits, axis=-1)
        end_logits_module = _SquadEndLogits(self.config, name="end_logits")
        outputs = {}
        if start_positions is not None:
            start_features = layers.gather_positions(sequence_output, start_positions[:, None])
            end_logits = _mask_logits(end_logits_module(sequence_output, start_features)[:, 0],
                                      p_mask)
            outputs["start_log_probs"] = start_log_probs
            outputs["end_log_probs"] = jax.nn.log_softmax(end_logits, axis=-1)
        else:
            start_top_log_probs, start_top_index = jax.lax.top_k(start_log_probs,
                                                                 self.start_n_top)
            start_features = layers.gather_positions(sequence_output, start_top_index)
            end_logits = _mask_logits(end_logits_module(sequence_output, start_features),
                                      p_mask[:, None, :])  # [batch, start_n_top, seq]
            end_top_log_probs, end_top_index = jax.lax.top_k(
                jax.nn.log_softmax(end_logits, axis=-1), self.end_n_top)
            batch = sequence_output.shape[0]
            outputs["start_top_log_probs"] = start_top_log_probs
            outputs["start_top_index"] = start_top_index.astype(jnp.int32)
            outputs["end_top_log_probs"] = end_top_log_probs.reshape(batch, -1)
            outputs["end_top_index"] = end_top_index.reshape(batch, -1).astype(jnp.int32)
        start_probs = jax.nn.softmax(start_logits, axis=-1)
        start_feature = jnp.einsum("bs,bsh->bh", start_probs,
                                   sequence_output.astype(jnp.float32))
        outputs["cls_logits"] = _SquadAnswerClass(self.config, self.dropout_rate,
                                                  name="answer_class")(
            start_feature, sequence_output[:, 0], deterministic)
        return outputs


def squad_v2_loss(outputs: dict[str, jax.Array], start_positions: jax.Array,
                  end_positions: jax.Array, is_impossible: jax.Array) -> jax.Array:
    """SPEC 8.3 v2.0 loss per feature, [batch]: 0.5 (start CE + end CE) + 0.5 sigmoid CE of
    cls_logits against is_impossible. `outputs` from SquadV2Head with start_positions; the batch
    mean is the reference's total_loss."""
    def negative_log_likelihood(log_probs: jax.Array, positions: jax.Array) -> jax.Array:
        return -jnp.take_along_axis(log_probs, positions[:, None].astype(jnp.int32), axis=-1)[:, 0]

    logits = outputs["cls_logits"]
    labels = is_impossible.astype(jnp.float32)
    # tf.nn.sigmoid_cross_entropy_with_logits, the stable form.
    class_loss = jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    return (0.5 * (negative_log_likelihood(outputs["start_log_probs"], start_positions)
                   + negative_log_likelihood(outputs["end_log_probs"], end_positions))
            + 0.5 * class_loss)
