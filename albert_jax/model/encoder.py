"""The ALBERT encoder: one post-LN block per (group, inner group), applied L times with nn.scan.

Sharing (SPEC 3.3, paper Table 4). A block has an attention half and an FFN half. A half that is
*shared* has one parameter set per (group, inner group), created once under
`group_{g}/inner_group_{i}/{attention,ffn}` and passed into the scan as a broadcast value, so its
gradient is the sum over all applications. A half that is *not shared* lives inside the scanned
body, stacked on a leading "layers" axis (`nn.scan(variable_axes={"params": 0})`) under
`group_{g}_per_layer/inner_group_{i}/...`. ALBERT shares both halves, BERT neither; the paper's
shared-attention and shared-FFN ablations share one. In every mode a group of more than
`scan_unroll` layers (presets.py) traces its body once, so compile time does not grow with
depth; a shallower group is unrolled whole, which runs faster.
"""
from __future__ import annotations

import functools
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from albert_jax.model import attention, layers
from albert_jax.model.presets import REMAT_POLICIES, ModelConfig, group_of_layer


class AttentionBlock(nn.Module):
    """Self-attention half of the post-LN block (SPEC 3.2.6): LN(x + dense(attend(x)))."""

    config: ModelConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, hidden: jax.Array, attention_bias: jax.Array,
                 query_positions: jax.Array | None = None) -> jax.Array:
        """hidden [batch, seq, hidden], attention_bias [batch, 1, 1, seq] -> [batch, seq, hidden].

        With query_positions [batch, k], only those positions attend (every position is still a
        key and a value) and the output is [batch, k, hidden]: the same rows, less work.
        """
        config = self.config
        dtype = config.compute_dtype
        batch, _, width = hidden.shape
        heads = config.num_attention_heads
        head_dim = width // heads
        init = layers.truncated_normal(config.initializer_range)
        hidden = nn.with_logical_constraint(hidden, layers.SEQUENCE_HIDDEN)
        queries_from = (hidden if query_positions is None
                        else layers.gather_positions(hidden, query_positions))

        def project(name: str, inputs: jax.Array) -> jax.Array:
            # Kernel stored 2-D [H, N*D] as in the checkpoint (SPEC 3.2.12); split heads after.
            # (One fused [H, 3 N*D] matmul measured no faster on CPU: benchmarks/RESULTS.md.)
            out = layers.Dense(width, ("hidden", "heads"), init, dtype=dtype, name=name)(inputs)
            return nn.with_logical_constraint(out.reshape(batch, -1, heads, head_dim),
                                              layers.SEQUENCE_HEADS)

        query = project("query", queries_from)
        key, value = project("key", hidden), project("value", hidden)
        # The fused kernels attend every position; a few gathered queries (the last layer of a
        # classifier or the MLM head) are cheap in xla, whose scores are then [b, n, k, seq].
        impl = ("xla" if query_positions is not None
                else attention.resolve(config, attention.target_platform()))
        dropout = None
        if config.attention_probs_dropout_prob > 0:  # xla only (presets.validate)
            dropout = functools.partial(nn.Dropout(config.attention_probs_dropout_prob),
                                        deterministic=self.deterministic)
        context = attention.attend(query, key, value, attention_bias, impl, dropout)
        context = nn.with_logical_constraint(context, layers.SEQUENCE_HEADS)
        context = context.reshape(batch, -1, width)
        output = layers.Dense(width, ("heads", "hidden"), init, dtype=dtype, name="output")(context)
        if config.hidden_dropout_prob > 0:
            output = nn.Dropout(config.hidden_dropout_prob)(output, deterministic=self.deterministic)
        output = layers.LayerNorm(config.layer_norm_eps, "hidden", dtype=dtype,
                                  name="LayerNorm")(output + queries_from)
        return nn.with_logical_constraint(output, layers.SEQUENCE_HIDDEN)


class FeedForwardBlock(nn.Module):
    """FFN half of the post-LN block (SPEC 3.2.6): LN(a + dense(act(dense(a))))."""

    config: ModelConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, hidden: jax.Array) -> jax.Array:
        """[batch, seq, hidden] -> [batch, seq, hidden]."""
        config = self.config
        dtype = config.compute_dtype
        init = layers.truncated_normal(config.initializer_range)
        hidden = nn.with_logical_constraint(hidden, layers.SEQUENCE_HIDDEN)
        inner = layers.Dense(config.intermediate_size, ("hidden", "mlp"), init, dtype=dtype,
                             name="intermediate")(hidden)
        inner = nn.with_logical_constraint(layers.activation(config.hidden_act)(inner),
                                           layers.SEQUENCE_MLP)
        output = layers.Dense(config.hidden_size, ("mlp", "hidden"), init, dtype=dtype,
                              name="output")(inner)
        if config.hidden_dropout_prob > 0:
            output = nn.Dropout(config.hidden_dropout_prob)(output, deterministic=self.deterministic)
        output = layers.LayerNorm(config.layer_norm_eps, "hidden", dtype=dtype,
                                  name="LayerNorm")(output + hidden)
        return nn.with_logical_constraint(output, layers.SEQUENCE_HIDDEN)


def _draws_dropout(config: ModelConfig, deterministic: bool) -> bool:
    """Whether a layer application needs a "dropout" key: some dropout rate and training."""
    return not deterministic and (config.hidden_dropout_prob > 0
                                  or config.attention_probs_dropout_prob > 0)


def _shares(config: ModelConfig) -> tuple[bool, bool]:
    """(attention shared, FFN shared) for the config's sharing mode."""
    return config.sharing in ("all", "attention"), config.sharing in ("all", "ffn")


class InnerGroup(nn.Module):
    """The parameter scope of one inner group: its attention and/or FFN halves."""

    config: ModelConfig
    with_attention: bool
    with_ffn: bool
    deterministic: bool = True

    def setup(self) -> None:
        if self.with_attention:
            self.attention = AttentionBlock(self.config, self.deterministic)
        if self.with_ffn:
            self.ffn = FeedForwardBlock(self.config, self.deterministic)


class SharedGroup(nn.Module):
    """Holds the shared halves of one group under inner_group_{i}/{attention,ffn}.

    Called only at init, to create the parameters; the scanned body applies them functionally.
    Why not the usual `nn.scan(..., variable_broadcast="params")`: nn.scan takes one policy per
    collection, so a body could not hold broadcast (shared) and stacked (per-layer) params at
    once, which the paper's shared-attention and shared-FFN modes need. The shared halves live
    here instead and enter the scan as a broadcast input; one mechanism serves every mode.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: jax.Array, attention_bias: jax.Array) -> jax.Array:
        share_attention, share_ffn = _shares(self.config)
        for inner in range(self.config.inner_group_num):
            group = InnerGroup(self.config, share_attention, share_ffn, name=f"inner_group_{inner}")
            if share_attention:
                hidden = group.attention(hidden, attention_bias)
            if share_ffn:
                hidden = group.ffn(hidden)
        return hidden


class LayerBody(nn.Module):
    """One application of a group (all its inner groups, in order): the body of the scan.

    `shared_params` holds, per inner group, the parameters of the shared halves.
    """

    config: ModelConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, hidden: jax.Array, attention_bias: jax.Array,
                 shared_params: dict[str, Any], query_positions: jax.Array | None = None
                 ) -> tuple[jax.Array, None]:
        """hidden [batch, seq, hidden] -> ([batch, seq, hidden], None); with query_positions
        [batch, k] (the last application, both halves shared) the last inner group runs at
        those positions only and the output is [batch, k, hidden]."""
        config = self.config
        share_attention, share_ffn = _shares(config)
        dropout_rng = (self.make_rng("dropout") if _draws_dropout(config, self.deterministic)
                       else None)

        def rngs(index: int) -> dict[str, jax.Array]:
            # A module applied functionally (parent=None) does not draw from the scan's split
            # "dropout" stream, so each shared half gets this layer's key folded with its index.
            return {} if dropout_rng is None else {"dropout": jax.random.fold_in(dropout_rng, index)}

        for inner in range(config.inner_group_num):
            name = f"inner_group_{inner}"
            shared = shared_params.get(name, {})
            unshared = None
            if not (share_attention and share_ffn):
                unshared = InnerGroup(config, not share_attention, not share_ffn,
                                      self.deterministic, name=name)
            last = inner == config.inner_group_num - 1
            # cast: without mutable=, `apply` returns the output alone (flax types it either way)
            if share_attention:
                attention_block = AttentionBlock(config, self.deterministic, parent=None)
                hidden = cast(jax.Array, attention_block.apply(
                    {"params": shared["attention"]}, hidden, attention_bias,
                    query_positions if last else None, rngs=rngs(2 * inner)))
            else:
                assert unshared is not None  # built above when a block is not shared
                hidden = unshared.attention(hidden, attention_bias)
            if share_ffn:
                ffn_block = FeedForwardBlock(config, self.deterministic, parent=None)
                hidden = cast(jax.Array, ffn_block.apply(
                    {"params": shared["ffn"]}, hidden, rngs=rngs(2 * inner + 1)))
            else:
                assert unshared is not None  # built above when a block is not shared
                hidden = unshared.ffn(hidden)
        return hidden, None


class Encoder(nn.Module):
    """Embedding projection E -> H (SPEC 3.2.4) and the L layer applications (SPEC 3.2.5)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, embedded: jax.Array, input_mask: jax.Array,
                 deterministic: bool = True, output_positions: jax.Array | None = None
                 ) -> jax.Array:
        """embedded [batch, seq, embedding], input_mask [batch, seq] -> [batch, seq, hidden];
        with output_positions [batch, k], the final hidden states at those positions only,
        [batch, k, hidden].

        Only the last layer's queries need to be at those positions (its keys and values, and
        every earlier layer, need all of them). With both halves shared, the last application
        runs apart from the scan at those positions: a classifier reads [CLS] alone and the MLM
        head the masked positions, so most of one layer's work is skipped. The other sharing
        modes compute every position and gather (their last layer's parameters are stacked
        inside the scan).
        """
        config = self.config
        dtype = config.compute_dtype
        hidden = embedded
        if config.embedding_size != config.hidden_size or config.always_project_embeddings:
            # The reference creates no projection when E == H (SPEC 3.2.4); HF does (SPEC 11.2).
            hidden = layers.Dense(config.hidden_size, ("embedding", "hidden"),
                                  layers.truncated_normal(config.initializer_range), dtype=dtype,
                                  name="embedding_hidden_mapping_in")(hidden)
        hidden = nn.with_logical_constraint(hidden, layers.SEQUENCE_HIDDEN)
        # SPEC 3.2.6: adder (1 - mask) * -10000 on the keys; every query position attends.
        attention_bias = ((1.0 - input_mask.astype(jnp.float32)) * -10000.0)[:, None, None, :]

        num_layers, num_groups = config.num_hidden_layers, config.num_hidden_groups
        apart = output_positions is not None and config.sharing == "all"
        for group in range(num_groups):
            # Layer l uses group int(l / L * G): each group covers a run of consecutive layers.
            length = sum(group_of_layer(layer, num_layers, num_groups) == group
                         for layer in range(num_layers))
            last_apart = apart and group == num_groups - 1
            length -= last_apart
            # Remat is only honoured inside a rolled scan: unrolled, full remat saved nothing
            # (albert-base L=12 on CPU: 1102 MiB of temporaries with and without it, also with
            # prevent_cse; rolled: 147 MiB). A run that asks for remat wants the memory.
            unrolled = length <= config.scan_unroll and config.remat_policy == "none"
            body = LayerBody
            if config.remat_policy != "none":
                body = nn.remat(body, policy=REMAT_POLICIES[config.remat_policy], prevent_cse=False)
            shared = SharedGroup(config, name=f"group_{group}")
            if self.is_initializing():
                shared(hidden, attention_bias)
            shared_params = nn.unbox(shared.variables.get("params", {}))
            if length:
                stack = nn.scan(
                    body,
                    variable_axes={"params": 0},
                    split_rngs={"params": True, "dropout": True},
                    in_axes=(nn.broadcast, nn.broadcast),
                    length=length,
                    unroll=length if unrolled else 1,
                    metadata_params={nn.PARTITION_NAME: "layers"},
                )(config, deterministic, name=f"group_{group}_per_layer")
                hidden, _ = stack(hidden, attention_bias, shared_params)
            if last_apart:
                # The body holds no parameters of its own when both halves are shared.
                rngs = ({"dropout": self.make_rng("dropout")}
                        if _draws_dropout(config, deterministic) else {})
                hidden, _ = LayerBody(config, deterministic, parent=None).apply(
                    {}, hidden, attention_bias, shared_params, output_positions, rngs=rngs)
        if output_positions is not None and not apart:
            hidden = layers.gather_positions(hidden, output_positions)
        return hidden
