"""ALBERT: factorized embedding + shared encoder + pooler, and the task models built on it.

Parameter tree of `AlbertModel` (the backbone; every task model holds it under `albert`):
  embeddings/{word,token_type,position}_embeddings/embedding   [V|T|P, E]
  embeddings/LayerNorm/{scale,bias}                            [E]
  encoder/embedding_hidden_mapping_in/{kernel,bias}            [E, H] (absent when E == H)
  encoder/group_{g}/inner_group_{i}/{attention,ffn}/...        shared halves
  encoder/group_{g}_per_layer/inner_group_{i}/{attention,ffn}/...   unshared halves, [L_g, ...]
  pooler/{kernel,bias}                                         [H, H]
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from albert_jax.model import heads, layers
from albert_jax.model.encoder import Encoder
from albert_jax.model.presets import ModelConfig


def example_inputs(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(input_ids, segment_ids, input_mask) of `shape` ([batch, seq], or [batch, choices, seq]
    for multiple choice), int32: what `init` and `jax.eval_shape` need, every position real."""
    ids = jnp.zeros(shape, jnp.int32)
    return ids, ids, jnp.ones(shape, jnp.int32)


def abstract_backbone_params(config: ModelConfig) -> Any:
    """The backbone's parameter tree as shapes boxed with their logical axis names
    (`nn.Partitioned`), nothing allocated: where each loaded weight goes on a mesh."""
    model = AlbertModel(config)
    return jax.eval_shape(lambda rng: model.init(rng, *example_inputs((1, 1)))["params"],
                          jax.random.key(0))


def _check_ids(name: str, ids: jax.Array, limit: int, config_key: str) -> None:
    """Eagerly reject out-of-range ids when the values are known (not under jit)."""
    if isinstance(ids, jax.core.Tracer) or not isinstance(ids, (np.ndarray, jax.Array)):
        return  # traced (checked by the NaN fill below) or abstract (ShapeDtypeStruct)
    values = np.asarray(ids)
    bad = np.argwhere((values < 0) | (values >= limit))
    if bad.size:
        position = tuple(int(i) for i in bad[0])
        raise ValueError(f"{name} has id {int(values[position])} at position {position}, outside "
                         f"[0, {limit}) set by model config {config_key}={limit}; check the "
                         "tokenizer matches the model's vocabulary")


def _lookup(table: layers.Embed, ids: jax.Array) -> jax.Array:
    """The rows of `table` at `ids` [batch, seq] -> [batch, seq, features].

    Under a mesh (a sharded train step) the table's gradient is a matmul over the batch rows,
    the same form as the tied MLM output's (`_rows_with_matmul_gradient`)."""
    embedding = jnp.asarray(table.embedding)
    if jax.sharding.get_abstract_mesh().empty:
        return _rows(embedding, ids).astype(table.dtype)
    return _rows_with_matmul_gradient(embedding, ids).astype(table.dtype)


def _rows(embedding: jax.Array, ids: jax.Array) -> jax.Array:
    # Under jit an out-of-range id cannot raise; it yields NaN (mode="fill") so the NaN guard
    # catches it instead of a silent clamp to the last row. Negative ids are out of range too:
    # NumPy-style wrapping would silently read row V-1 for an id of -1.
    return embedding.at[ids].get(mode="fill", fill_value=jnp.nan, wrap_negative_indices=False)


@jax.custom_vjp
def _rows_with_matmul_gradient(embedding: jax.Array, ids: jax.Array) -> jax.Array:
    """`_rows`, whose table gradient is one_hot(ids)^T @ cotangent [V, E] instead of a scatter.

    Why: the word embeddings are used twice (this lookup and the tied MLM output projection),
    and the data-parallel gradient is reduced over the batch devices where each use's gradient
    is computed. libtpu adds two such reductions before they cross slices when they have the
    same form (as it does for the layers' uses), but not a scatter's and a matmul's: the table's
    gradient then crossed the data-center network twice (2 x v5e:2x2, albert-base: 1.32 x the
    parameters per device per step, 0.99 x with this). The one-hot operand is built in the
    matmul's fusion, not kept; its cost, 2 x V x E FLOPs per token, is ~1.5 % of base's step.
    An out-of-range id's row gets no gradient, as with the scatter."""
    return _rows(embedding, ids)


def _rows_forward(embedding: jax.Array, ids: jax.Array
                  ) -> tuple[jax.Array, tuple[jax.Array, int]]:
    return _rows(embedding, ids), (ids, embedding.shape[0])


def _rows_backward(saved: tuple[jax.Array, int], cotangent: jax.Array) -> tuple[jax.Array, None]:
    ids, num_rows = saved
    one_hot = jax.nn.one_hot(ids, num_rows, dtype=cotangent.dtype)
    return jnp.einsum("bsv,bse->ve", one_hot, cotangent,
                      preferred_element_type=jnp.float32), None


_rows_with_matmul_gradient.defvjp(_rows_forward, _rows_backward)


class Embeddings(nn.Module):
    """SPEC 3.2.1-3: word + token type + position, all of width E, then LayerNorm and dropout."""

    config: ModelConfig

    def setup(self) -> None:
        config = self.config
        dtype = config.compute_dtype
        init = layers.truncated_normal(config.initializer_range)
        self.word_embeddings = layers.Embed(config.vocab_size, config.embedding_size,
                                            ("vocab", "embedding"), init, dtype=dtype)
        self.token_type_embeddings = layers.Embed(config.type_vocab_size, config.embedding_size,
                                                  ("token_types", "embedding"), init, dtype=dtype)
        self.position_embeddings = layers.Embed(config.max_position_embeddings,
                                                config.embedding_size,
                                                ("positions", "embedding"), init, dtype=dtype)
        self.LayerNorm = layers.LayerNorm(config.layer_norm_eps, "embedding", dtype=dtype)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 deterministic: bool = True) -> jax.Array:
        """input_ids, segment_ids [batch, seq] -> [batch, seq, embedding]."""
        seq = input_ids.shape[1]
        embedded = (_lookup(self.word_embeddings, input_ids)
                    + _lookup(self.token_type_embeddings, segment_ids)
                    + self.position_embeddings.embedding[None, :seq].astype(self.config.compute_dtype))
        embedded = nn.with_logical_constraint(embedded, layers.SEQUENCE_EMBEDDING)
        embedded = self.LayerNorm(embedded)
        if self.config.hidden_dropout_prob > 0:
            embedded = self.dropout(embedded, deterministic=deterministic)
        return nn.with_logical_constraint(embedded, layers.SEQUENCE_EMBEDDING)


class AlbertModel(nn.Module):
    """The backbone: (sequence_output [batch, seq, hidden], pooled_output [batch, hidden])."""

    config: ModelConfig

    def setup(self) -> None:
        config = self.config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = layers.Dense(config.hidden_size, ("hidden", "hidden_out"),
                                   layers.truncated_normal(config.initializer_range),
                                   dtype=config.compute_dtype)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
                 input_mask: jax.Array | None = None, deterministic: bool = True,
                 output_positions: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """input_ids, segment_ids (0 first segment, 1 second), input_mask (1 real, 0 padding),
        all [batch, seq]. The names are the data's (the reference's features); HuggingFace
        calls the last two token_type_ids and attention_mask.

        output_positions [batch, k]: sequence_output only at those positions, [batch, k, hidden]
        (k may be 0: a classifier that reads the pooled [CLS] alone), which spares most of the
        last layer's work (`Encoder`); None: every position.
        """
        config = self.config
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        seq = input_ids.shape[1]
        if seq > config.max_position_embeddings:
            raise ValueError(f"sequence length {seq} exceeds model config max_position_embeddings="
                             f"{config.max_position_embeddings}; truncate the input or use a model "
                             "with more positions")
        if segment_ids is None:
            segment_ids = jnp.zeros_like(input_ids)
        if input_mask is None:
            input_mask = jnp.ones_like(input_ids)
        _check_ids("input_ids", input_ids, config.vocab_size, "vocab_size")
        _check_ids("segment_ids", segment_ids, config.type_vocab_size, "type_vocab_size")
        embedded = self.embeddings(input_ids, segment_ids, deterministic)
        if output_positions is None:
            sequence_output = self.encoder(embedded, input_mask, deterministic)
            cls_output = sequence_output[:, 0]
        else:  # [CLS] (position 0) first, for the pooler
            positions = jnp.concatenate([jnp.zeros((input_ids.shape[0], 1), jnp.int32),
                                         output_positions.astype(jnp.int32)], axis=1)
            encoded = self.encoder(embedded, input_mask, deterministic, positions)
            sequence_output, cls_output = encoded[:, 1:], encoded[:, 0]
        # SPEC 3.2.7: pooled = tanh(dense(sequence_output[:, 0])).
        pooled_output = jnp.tanh(self.pooler(cls_output).astype(jnp.float32))
        return sequence_output, pooled_output.astype(sequence_output.dtype)

    @staticmethod
    def cls_only(input_ids: jax.Array) -> jax.Array:
        """The output_positions of a model that reads the pooled [CLS] alone: [batch, 0]."""
        return jnp.zeros((input_ids.shape[0], 0), jnp.int32)

    def attend_word_embeddings(self, hidden: jax.Array) -> jax.Array:
        """The tied MLM decoder: [..., embedding] -> [..., vocab] float32 logits (SPEC 4.2)."""
        return self.embeddings.word_embeddings.attend(hidden)


class AlbertForPreTraining(nn.Module):
    """Backbone + masked-LM head + sentence-order (or NSP) head (SPEC 5).

    Params: {albert: <AlbertModel tree>, predictions: {dense, LayerNorm, output_bias},
             seq_relationship: {dense}}.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, input_mask: jax.Array,
                 masked_lm_positions: jax.Array, deterministic: bool = True
                 ) -> tuple[jax.Array, jax.Array]:
        """[batch, seq] inputs and masked_lm_positions [batch, predictions]
        -> (mlm_logits [batch, predictions, vocab], sop_logits [batch, 2]), float32."""
        albert = AlbertModel(self.config, name="albert")
        masked_hidden, pooled_output = albert(input_ids, segment_ids, input_mask, deterministic,
                                              output_positions=masked_lm_positions)
        mlm_logits = heads.MaskedLMHead(self.config, name="predictions")(
            masked_hidden, albert.attend_word_embeddings)
        # SPEC 5.4: on the pooled output, no dropout.
        sop_logits = heads.ClassifierHead(self.config, num_labels=2, name="seq_relationship")(
            pooled_output)
        return mlm_logits, sop_logits


class _Classifier(nn.Module):
    """The fields of a backbone with a `classifier` head of `num_labels` outputs."""

    config: ModelConfig
    num_labels: int
    classifier_dropout: float = 0.1


class AlbertForSequenceClassification(_Classifier):
    """GLUE (SPEC 8.2): pooled -> dropout -> dense; num_labels=1 is regression (STS-B)."""

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, deterministic: bool = True) -> jax.Array:
        """[batch, seq] inputs -> logits [batch, num_labels]."""
        _, pooled = AlbertModel(self.config, name="albert")(
            input_ids, segment_ids, input_mask, deterministic,
            output_positions=AlbertModel.cls_only(input_ids))
        return heads.ClassifierHead(self.config, self.num_labels, self.classifier_dropout,
                                    name="classifier")(pooled, deterministic)


class AlbertForTokenClassification(_Classifier):
    """Tagging (HuggingFace's AlbertForTokenClassification): every position's hidden state ->
    dropout -> dense -> logits [batch, seq, num_labels], float32. Params: {albert, classifier:
    {dense}} (the pooler is computed and unused, as the export leaves it out)."""

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, deterministic: bool = True) -> jax.Array:
        sequence_output, _ = AlbertModel(self.config, name="albert")(
            input_ids, segment_ids, input_mask, deterministic)
        return heads.ClassifierHead(self.config, self.num_labels, self.classifier_dropout,
                                    name="classifier")(sequence_output, deterministic)


class AlbertForQuestionAnswering(nn.Module):
    """SQuAD v1.1 (SPEC 8.3): per-token start/end logits [batch, seq] each, float32.

    Params: {albert: <AlbertModel tree>, squad: {output_weights [2, H], output_bias [2]}}, the
    reference's cls/squad/* (SPEC 4.3).
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, deterministic: bool = True
                 ) -> tuple[jax.Array, jax.Array]:
        sequence_output, _ = AlbertModel(self.config, name="albert")(
            input_ids, segment_ids, input_mask, deterministic)
        return heads.SquadV1Head(self.config, name="squad")(sequence_output)


class AlbertForQuestionAnsweringV2(nn.Module):
    """SQuAD v2.0 (SPEC 8.3): the XLNet-style head of `heads.SquadV2Head` on the backbone.

    Params: {albert: <AlbertModel tree>, squad: {start_logits: {dense}, end_logits: {dense_0,
    LayerNorm, dense_1}, answer_class: {dense_0, dense_1 (no bias)}}} (SPEC 4.3 names).
    """

    config: ModelConfig
    start_n_top: int = 5
    end_n_top: int = 5
    answer_class_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, p_mask: jax.Array,
                 start_positions: jax.Array | None = None,
                 deterministic: bool = True) -> dict[str, jax.Array]:
        """[batch, seq] inputs, p_mask [batch, seq] (1 = cannot be in the answer), gold
        start_positions [batch] for the training outputs (else the top-k beam); see
        `heads.SquadV2Head` for the returned dict."""
        sequence_output, _ = AlbertModel(self.config, name="albert")(
            input_ids, segment_ids, input_mask, deterministic)
        return heads.SquadV2Head(self.config, self.start_n_top, self.end_n_top,
                                 self.answer_class_dropout, name="squad")(
            sequence_output, p_mask, start_positions, deterministic)


class AlbertForMultipleChoice(nn.Module):
    """RACE (SPEC 8.4): [batch, choices, seq] -> pooled -> dropout -> dense(1) -> [batch, choices]."""

    config: ModelConfig
    classifier_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, deterministic: bool = True) -> jax.Array:
        batch, choices, seq = input_ids.shape
        def flat(x: jax.Array) -> jax.Array:
            return x.reshape(batch * choices, seq)

        _, pooled = AlbertModel(self.config, name="albert")(
            flat(input_ids), flat(segment_ids), flat(input_mask), deterministic,
            output_positions=AlbertModel.cls_only(flat(input_ids)))
        logits = heads.ClassifierHead(self.config, 1, self.classifier_dropout,
                                      name="classifier")(pooled, deterministic)
        return logits.reshape(batch, choices)
