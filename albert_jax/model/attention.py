"""The core of self-attention, softmax(q k^T / sqrt(D) + bias) v, by one of three kernels.

  xla     einsum + softmax: the scores and probabilities [batch, heads, q, k] are arrays in HBM
          and the backward pass keeps them (xxlarge at 16 x 512 a chip: 1 GiB each, several a
          layer); the only path with attention dropout.
  splash  the Pallas TPU flash kernel (jax.experimental.pallas.ops.tpu.splash_attention): the
          scores exist only blockwise in VMEM and the backward recomputes them. Per device
          inside `jax.shard_map` (batch over the mesh's batch axes, heads over "tensor", as
          MaxText wraps it); on CPU it runs in Pallas interpret mode (tests).
  cudnn   `jax.nn.dot_product_attention(implementation="cudnn")`, cuDNN's fused kernel on GPU
          (bfloat16 or float16 only).
  auto    splash on TPU, cudnn on GPU, xla elsewhere, or where the fused kernel cannot run
          this config (attention dropout > 0; cudnn with float32): `resolve`.

Padding (SPEC 3.2.6): the reference adds -10000 to the scores of padding keys and every query
row attends. The fused kernels get the same softmax up to exp(-10000) ~ 0 terms: splash as
segment ids (every query in segment 1, a key in segment 1 when real, 0 when padding: each query
sees exactly the real keys, and every row has at least [CLS]), cudnn as the same additive bias.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from albert_jax.errors import ConfigError
from albert_jax.model.presets import ModelConfig

# Splash's tiles are multiples of 128 lanes; 512 (or the sequence, if shorter) per tile side.
SPLASH_LANES = 128
SPLASH_MAX_BLOCK = 512


def target_platform() -> str:
    """The platform the model is being traced for: the devices of the mesh in context (a plan
    traces for abstract TPU devices on a CPU host), else JAX's default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and mesh.abstract_device is not None:
        return mesh.abstract_device.platform
    return jax.default_backend()


def resolve(config: ModelConfig, platform: str) -> str:
    """The kernel `config.attention_impl` means on `platform` ("tpu", "gpu", "cpu"): one of
    "xla", "splash", "cudnn". An explicit choice is kept (presets.validate has refused the
    configs a fused kernel cannot run); "auto" takes the platform's fused kernel where it can."""
    if config.attention_impl != "auto":
        return config.attention_impl
    if config.attention_probs_dropout_prob > 0:
        return "xla"
    if platform == "tpu":
        return "splash"
    if platform in ("gpu", "cuda") and config.dtype != "float32":
        return "cudnn"
    return "xla"


def attend(query: jax.Array, key: jax.Array, value: jax.Array, attention_bias: jax.Array,
           impl: str, dropout: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
    """query [batch, q, heads, D], key and value [batch, k, heads, D], attention_bias
    [batch, 1, 1, k] (0 for real keys, -10000 for padding) -> context [batch, q, heads, D] in
    the dtype of query. `dropout` (xla only) is applied to the probabilities."""
    if impl == "splash":
        return _splash(query, key, value, attention_bias)
    scale = 1.0 / math.sqrt(query.shape[-1])
    if impl == "cudnn":
        # cuDNN wants the bias at [batch, 1, q, k]: one [q, k] plane a sequence, not per head.
        bias = jnp.broadcast_to(attention_bias, (*attention_bias.shape[:2], query.shape[1],
                                                 key.shape[1])).astype(query.dtype)
        return jax.nn.dot_product_attention(query, key, value, bias=bias, scale=scale,
                                            implementation="cudnn")
    scores = jnp.einsum("bqnd,bknd->bnqk", query, key, preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(scores * scale + attention_bias, axis=-1)
    if dropout is not None:
        probs = dropout(probs)
    return jnp.einsum("bnqk,bknd->bqnd", probs.astype(query.dtype), value,
                      preferred_element_type=jnp.float32).astype(query.dtype)


def splash_block(seq_len: int) -> int:
    """The splash tile side for a sequence: the largest multiple of 128 up to 512 dividing it.
    Raises ConfigError for a sequence that is not a multiple of 128."""
    if seq_len % SPLASH_LANES:
        raise ConfigError(f"model attention_impl='splash' needs a sequence length that is a "
                          f"multiple of {SPLASH_LANES}, got {seq_len}; set seq_len (and "
                          "max_seq_length) to one, or attention_impl='xla'")
    return max(block for block in range(SPLASH_LANES, SPLASH_MAX_BLOCK + 1, SPLASH_LANES)
               if seq_len % block == 0)


def _splash_per_device(query: jax.Array, key: jax.Array, value: jax.Array,
                       key_is_real: jax.Array, interpret: bool) -> jax.Array:
    """One device's shard: [b, s, n, D] x3 and key_is_real [b, s] -> [b, s, n, D]."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    _, seq_len, heads, _ = query.shape
    block = splash_block(seq_len)
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                              block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                              block_q_dq=block, block_kv_dq=block)
    mask = splash.MultiHeadMask([splash.FullMask((seq_len, seq_len))] * heads)
    kernel = splash.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                                    interpret=interpret)
    query = query * jnp.asarray(1.0 / math.sqrt(query.shape[-1]), query.dtype)
    segments = splash.SegmentIds(q=jnp.ones_like(key_is_real), kv=key_is_real)
    heads_first = functools.partial(jnp.swapaxes, axis1=1, axis2=2)  # [b, s, n, D] <-> [b, n, s, D]
    context = jax.vmap(kernel)(heads_first(query), heads_first(key), heads_first(value), segments)
    return heads_first(context)


def _splash(query: jax.Array, key: jax.Array, value: jax.Array,
            attention_bias: jax.Array) -> jax.Array:
    if query.shape[1] != key.shape[1]:
        raise NotImplementedError("splash attends all positions; gathered queries use xla")
    # The bias is exactly 0 or -10000 per key (encoder.py), so this is the input mask. A row
    # of padding only (a batch filled up to size) has all its keys at -10000 under xla: the
    # softmax is then uniform over every key, which is what all keys in segment 1 gives.
    key_is_real = attention_bias[:, 0, 0, :] == 0
    key_is_real = (key_is_real | ~key_is_real.any(axis=1, keepdims=True)).astype(jnp.int32)
    interpret = target_platform() != "tpu"
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return _splash_per_device(query, key, value, key_is_real, interpret)
    # The activations' own layout (model/layers.py names, bound by the train step's rules):
    # batch over the data axes, heads over "tensor"; each device runs the kernel on its shard.
    spec = nn.logical_to_mesh_axes(("batch", "length", "activation_heads", None))
    assert spec is not None  # None only for no names
    mask_spec = jax.sharding.PartitionSpec(spec[0], None)
    return jax.shard_map(functools.partial(_splash_per_device, interpret=interpret), mesh=mesh,
                         in_specs=(spec, spec, spec, mask_spec), out_specs=spec,
                         check_vma=False)(query, key, value, key_is_real)
