"""Dense, Embed and LayerNorm with logical axis names, storage dtype apart from compute dtype.

Every parameter is float32 and carries logical axis names (`nn.with_logical_partitioning`), so
sharding is a rules table (train/sharding.py), never a model edit. Matmuls take their inputs in
the compute dtype and accumulate in float32 (`preferred_element_type`): on CPU and accelerators a
bf16 x bf16 -> f32 dot is the fast path, a pure bf16 dot is not faster and loses precision.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

Initializer = Callable[..., jax.Array]


def with_axes(init: Initializer, axes: tuple[str | None, ...]) -> Initializer:
    """`nn.with_logical_partitioning(init, axes)`, typed as what `Module.param` hands back: it
    unboxes the `LogicallyPartitioned` box (unbox=True), so the module computes with the array."""
    return cast(Initializer, nn.with_logical_partitioning(init, axes))

# Logical axes of activations, for `nn.with_logical_constraint`: train/sharding.py binds them to
# the mesh while a train or eval step is traced (the batch over data x fsdp, heads and the FFN
# inner dimension over tensor) and they are no-ops elsewhere. They change layouts, never values.
SEQUENCE_EMBEDDING = ("batch", "length", "activation_embedding")  # [batch, seq, embedding]
SEQUENCE_HIDDEN = ("batch", "length", "activation_hidden")  # [batch, seq, hidden]
SEQUENCE_HEADS = ("batch", "length", "activation_heads", None)  # [batch, seq, heads, head_dim]
SEQUENCE_MLP = ("batch", "length", "activation_mlp")  # [batch, seq, intermediate]
# A kernel where it is used: gathered over fsdp (ZeRO-3: stored split, used whole), still split
# over tensor. Left to itself, XLA may instead move the batch-split activations to the kernel's
# fsdp split and keep those copies alive for the backward pass.
_KERNEL_AT_USE = {"hidden": "activation_hidden", "heads": "activation_heads",
                  "mlp": "activation_mlp", "embedding": "activation_embedding"}


@jax.custom_vjp
def _low_precision_dot(inputs: jax.Array, kernel: jax.Array) -> jax.Array:
    """inputs [..., in] @ kernel [in, out] -> float32, both operands in the compute dtype; the
    backward dots take the cotangent rounded to that dtype too (bf16 x bf16 -> float32, like the
    forward). Plain autodiff would run them in float32: the cotangent of a float32-output dot is
    float32, which made bf16 no faster than fp32 (benchmarks/RESULTS.md, "bf16 on CPU")."""
    return jnp.dot(inputs, kernel, preferred_element_type=jnp.float32)


def _low_precision_dot_forward(inputs: jax.Array, kernel: jax.Array
                               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _low_precision_dot(inputs, kernel), (inputs, kernel)


def _low_precision_dot_backward(saved: tuple[jax.Array, jax.Array], upstream: jax.Array
                                ) -> tuple[jax.Array, jax.Array]:
    inputs, kernel = saved
    upstream = upstream.astype(inputs.dtype)
    grad_inputs = jnp.dot(upstream, kernel.T, preferred_element_type=jnp.float32)
    grad_kernel = jnp.dot(inputs.reshape(-1, inputs.shape[-1]).T,
                          upstream.reshape(-1, upstream.shape[-1]),
                          preferred_element_type=jnp.float32)
    return grad_inputs.astype(inputs.dtype), grad_kernel.astype(kernel.dtype)


_low_precision_dot.defvjp(_low_precision_dot_forward, _low_precision_dot_backward)


def matmul(inputs: jax.Array, kernel: jax.Array, dtype: Any) -> jax.Array:
    """inputs [..., in] @ kernel [in, out] in the compute `dtype`, accumulated and returned in
    float32. Below float32 the backward dots run in `dtype` as well (fp32 accumulation)."""
    inputs, kernel = inputs.astype(dtype), kernel.astype(dtype)
    if jnp.dtype(dtype) == jnp.float32:
        return jnp.dot(inputs, kernel, preferred_element_type=jnp.float32)
    return _low_precision_dot(inputs, kernel)


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """sequence [batch, seq, features], positions [batch, k] -> [batch, k, features]."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


def truncated_normal(stddev: float) -> Initializer:
    """The reference initializer: normal(0, stddev) truncated at two stddevs (SPEC 3.2.10)."""
    return nn.initializers.truncated_normal(stddev=stddev)


class Dense(nn.Module):
    """y = x @ kernel + bias over the last axis: [..., in] -> [..., features].

    The kernel is stored [in, features], the TF layout (SPEC 4: no transpose for Flax).
    """

    features: int
    axes: tuple[str, str]
    kernel_init: Initializer
    use_bias: bool = True
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel = self.param("kernel", with_axes(self.kernel_init, self.axes),
                            (inputs.shape[-1], self.features), jnp.float32)
        kernel = nn.with_logical_constraint(
            kernel.astype(self.dtype), tuple(_KERNEL_AT_USE.get(axis) for axis in self.axes))
        outputs = matmul(inputs, kernel, self.dtype)
        if self.use_bias:
            bias = self.param("bias", with_axes(nn.initializers.zeros, self.axes[1:]),
                              (self.features,), jnp.float32)
            outputs = outputs + bias
        return outputs.astype(self.dtype)


class Embed(nn.Module):
    """A lookup table [num_embeddings, features]; `attend` is the tied output projection."""

    num_embeddings: int
    features: int
    axes: tuple[str, str]
    embedding_init: Initializer
    dtype: Any = jnp.float32

    def setup(self) -> None:
        self.embedding = self.param(
            "embedding", with_axes(self.embedding_init, self.axes),
            (self.num_embeddings, self.features), jnp.float32)

    def __call__(self, ids: jax.Array) -> jax.Array:
        """[...] int -> [..., features]."""
        return jnp.take(self.embedding, ids, axis=0).astype(self.dtype)

    def attend(self, query: jax.Array) -> jax.Array:
        """[..., features] -> [..., num_embeddings] logits against the table, in float32."""
        return matmul(query, self.embedding.T, self.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float) -> jax.Array:
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis, float32 [..., H]."""
    return _layer_norm_forward(x, scale, bias, epsilon)[0]


def _layer_norm_forward(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float
                        ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    # Two-pass variance (mean of squared deviations): no cancellation when |mean| >> std.
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    inverse_std = jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=-1, keepdims=True) + epsilon)
    normed = centered * inverse_std
    return normed * scale + bias, (normed, inverse_std, scale)


def _layer_norm_backward(epsilon: float, saved: tuple[jax.Array, ...], upstream: jax.Array
                         ) -> tuple[jax.Array, jax.Array, jax.Array]:
    # The closed form of the gradient, in one pass over [..., H] (autodiff of the two-pass
    # forward takes several: the profile's LayerNorm backward was 2.8x HF's; the train step is
    # 1.03x faster with this, benchmarks/RESULTS.md).
    del epsilon
    normed, inverse_std, scale = saved
    batch_axes = tuple(range(upstream.ndim - 1))
    scaled = upstream * scale
    grad_x = inverse_std * (scaled - jnp.mean(scaled, axis=-1, keepdims=True)
                            - normed * jnp.mean(scaled * normed, axis=-1, keepdims=True))
    return grad_x, jnp.sum(upstream * normed, axis=batch_axes), jnp.sum(upstream, axis=batch_axes)


_layer_norm.defvjp(_layer_norm_forward, _layer_norm_backward)


class LayerNorm(nn.Module):
    """LayerNorm over the last axis, computed in float32 (SPEC 3.2.3: eps 1e-12), with its
    closed-form gradient."""

    epsilon: float
    axis_name: str
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        features = inputs.shape[-1]
        scale = self.param("scale", with_axes(nn.initializers.ones, (self.axis_name,)),
                           (features,), jnp.float32)
        bias = self.param("bias", with_axes(nn.initializers.zeros, (self.axis_name,)),
                          (features,), jnp.float32)
        return _layer_norm(inputs.astype(jnp.float32), scale, bias,
                           self.epsilon).astype(self.dtype)


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation named in the model config (presets.ACTIVATIONS)."""
    return {
        "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),  # SPEC 3.2.8, the reference
        "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
        "relu": jax.nn.relu,
    }[name]
