"""Analytic FLOPs of a pretraining step (SPEC 7.3) and the peak to compute MFU against.

Matmul FLOPs only, 1 multiply-add = 2 FLOPs; a training step is 3x the forward (forward +
two backward matmuls per forward matmul). Shared layers cost FLOPs once per application.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from albert_jax.model import ModelConfig

# A training step is the forward plus two backward matmuls per forward matmul.
TRAIN_FLOPS_PER_FORWARD = 3.0
# Dense bf16 peak FLOP/s per JAX device, from the vendors' data sheets. A v2 or v3 chip is two
# JAX devices (one per TensorCore), so its per-chip 45 / 123 TFLOP/s are halved; from v4 on a
# device is a whole chip (train/plan.py CHIPS holds the same numbers, tests/test_plan.py checks).
PEAK_FLOPS_BY_DEVICE_KIND = {
    "TPU v2": 22.5e12, "TPU v3": 61.5e12, "TPU v4": 275e12, "TPU v5 lite": 197e12,
    "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
    "NVIDIA A100-SXM4-40GB": 312e12, "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H200": 989e12,
}


def forward_flops_per_sequence(model: ModelConfig, seq_len: int, masked_positions: int,
                               output_positions: int | None = None) -> float:
    """Forward matmul FLOPs of AlbertForPreTraining for one sequence: the FLOPs it computes.

    `output_positions`: how many positions are read from the last layer (pretraining: the masked
    ones and [CLS]; a classifier: [CLS] alone; None: every one, as SQuAD). With both halves shared
    the last block runs its queries, attention output and FFN at those positions only
    (model/encoder.py); the other sharing modes compute every position.
    """
    hidden, embed, inner = model.hidden_size, model.embedding_size, model.intermediate_size
    blocks = model.num_hidden_layers * model.inner_group_num
    projects = embed != hidden or model.always_project_embeddings
    projection = 2 * seq_len * embed * hidden if projects else 0

    def block(queries: int) -> int:  # q, o and FFN at the queries; k, v at every position
        return (2 * (2 * queries + 2 * seq_len) * hidden * hidden + 4 * queries * hidden * inner
                + 2 * 2 * queries * seq_len * hidden)  # scores and context

    last_queries = seq_len
    if output_positions is not None and model.sharing == "all":
        last_queries = min(output_positions, seq_len)
    pooler_and_sop = 2 * hidden * hidden + 2 * hidden * 2
    mlm_head = 2 * masked_positions * (hidden * embed + embed * model.vocab_size)
    return (projection + (blocks - 1) * block(seq_len) + block(last_queries) + pooler_and_sop
            + mlm_head)


def train_flops_per_step(model: ModelConfig, batch_size: int, seq_len: int,
                         masked_positions: int) -> float:
    """FLOPs of one pretraining step over the global batch (3x forward)."""
    return (TRAIN_FLOPS_PER_FORWARD * batch_size
            * forward_flops_per_sequence(model, seq_len, masked_positions, masked_positions + 1))


def measured_matmul_peak(size: int = 1024, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of a jitted [size, size] matmul on device 0: the ceiling on CPUs with no data sheet."""
    operand = jnp.ones((size, size), jnp.dtype(dtype))
    matmul = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    matmul(operand, operand).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(operand, operand).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def peak_flops_per_device(compute_dtype: str) -> float:
    """The data-sheet peak of this device kind, else a measured matmul ceiling."""
    kind = jax.devices()[0].device_kind
    if kind in PEAK_FLOPS_BY_DEVICE_KIND:
        return PEAK_FLOPS_BY_DEVICE_KIND[kind]
    return measured_matmul_peak(dtype=compute_dtype)
