"""Output heads: masked LM (tied, gathered), sentence order, classification, span, multiple choice."""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from albert_jax.model import layers
from albert_jax.model.encoder import compute_dtype


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """sequence [batch, seq, hidden], positions [batch, predictions] -> [batch, predictions, hidden]."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


class MaskedLMHead(nn.Module):
    """SPEC 5.2: gather at masked_lm_positions FIRST, then dense H->E, act, LN, tied decoder + bias.

    Gathering first computes V logits for the P masked positions only, not for all S positions
    (DESIGN 5; HF computes all S, SPEC 11.4).
    """

    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, sequence_output: jax.Array, masked_lm_positions: jax.Array,
                 attend: Callable[[jax.Array], jax.Array]) -> jax.Array:
        """sequence_output [batch, seq, hidden], masked_lm_positions [batch, predictions]
        -> logits [batch, predictions, vocab] (float32). `attend` is the tied word-embedding
        projection [..., embedding] -> [..., vocab]."""
        config = self.config
        dtype = compute_dtype(config)
        hidden = gather_positions(sequence_output, masked_lm_positions)
        hidden = layers.Dense(config.embedding_size, ("hidden", "embedding"),
                              layers.truncated_normal(config.initializer_range), dtype=dtype,
                              name="dense")(hidden)
        hidden = layers.activation(config.hidden_act)(hidden)
        hidden = layers.LayerNorm(config.layer_norm_eps, "embedding", dtype=dtype,
                                  name="LayerNorm")(hidden)
        output_bias = self.param("output_bias",
                                 nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                                 (config.vocab_size,), jnp.float32)
        return attend(hidden) + output_bias


class ClassifierHead(nn.Module):
    """Dropout then dense on a pooled vector: [batch, hidden] -> [batch, num_labels].

    The sentence-order head uses it with dropout 0 (SPEC 5.4: the reference has none there);
    GLUE uses dropout 0.1 (SPEC 8.2); STS-B regression is num_labels=1.
    """

    config: ml_collections.ConfigDict
    num_labels: int
    dropout_rate: float = 0.0

    @nn.compact
    def __call__(self, pooled_output: jax.Array, deterministic: bool = True) -> jax.Array:
        if self.dropout_rate > 0:
            pooled_output = nn.Dropout(self.dropout_rate)(pooled_output, deterministic=deterministic)
        logits = layers.Dense(self.num_labels, ("hidden_out", "classes"),
                              layers.truncated_normal(self.config.initializer_range),
                              dtype=compute_dtype(self.config), name="dense")(pooled_output)
        return logits.astype(jnp.float32)


class SpanHead(nn.Module):
    """SQuAD v1 head (SPEC 8.3): [batch, seq, hidden] -> (start_logits, end_logits) [batch, seq]."""

    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, sequence_output: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = layers.Dense(2, ("hidden", "classes"),
                              layers.truncated_normal(self.config.initializer_range),
                              dtype=compute_dtype(self.config), name="dense")(sequence_output)
        logits = logits.astype(jnp.float32)
        return logits[..., 0], logits[..., 1]
