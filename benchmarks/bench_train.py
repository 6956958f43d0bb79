"""Training-step throughput of the albert-base-v2 shape, fp32 and bf16, with MFU.

The case of ../shared/peers (batch 8, seq 128, 20 masked positions, LAMB), so the numbers
compare with HuggingFace's. MFU is against the XLA matmul ceiling measured in the same run
(fp32 for the fp32 step; bf16 inputs with fp32 accumulation for the bf16 step).

  python benchmarks/bench_train.py [--steps 6] [--preset albert-base-v2] [--batch 8]

Timings are medians; the script waits for a quiet machine first and reports the load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import ml_collections
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax import pretraining  # noqa: E402
from albert_jax.model import get_config  # noqa: E402
from albert_jax.train import flops, optim, sharding  # noqa: E402
from albert_jax.train import state as state_lib  # noqa: E402
from albert_jax.train import step as step_lib  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402


def random_batch(rng: np.random.Generator, batch: int, seq: int, predictions: int,
                 vocab: int) -> dict[str, np.ndarray]:
    """Full-length sequences, `predictions` masked positions each (the peers' case)."""
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), predictions, replace=False)
                                  for _ in range(batch)]), axis=1).astype(np.int32)
    return {
        "input_ids": rng.integers(5, vocab, (batch, seq)).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq)[None] >= seq // 2).repeat(batch, 0).astype(np.int32),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


def wait_for_quiet(max_wait_s: float = 60.0, threshold: float = 0.5) -> float:
    """Waits until the 1-minute load average is below `threshold` (or gives up); returns it."""
    deadline = time.time() + max_wait_s
    while os.getloadavg()[0] > threshold and time.time() < deadline:
        time.sleep(2)
    return os.getloadavg()[0]


def bench_step(preset: str, dtype: str, batch: int, seq: int, predictions: int,
               steps: int) -> dict[str, float]:
    model_config = get_config(preset, dtype=dtype)
    run_config = pretrain_config.get_config(f"model={preset}")
    run_config.seq_len, run_config.data.max_predictions = seq, predictions
    task = pretraining.PretrainingTask(run_config, model_config)
    model = task.model
    optim_config = ml_collections.ConfigDict(dict(
        name="lamb", lr=1e-3, warmup_steps=10, schedule="reference", power=1.0,
        weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
    optimizer, lr_fn = optim.make_optimizer(optim_config, total_steps=1000)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
                              devices=jax.devices()[:1])
    state = state_lib.init_train_state(model, optimizer, mesh, jax.random.PRNGKey(0),
                                       pretraining.init_inputs(seq, predictions))
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn), donate_argnums=(0,))
    batch_arrays = jax.device_put(random_batch(np.random.default_rng(0), batch, seq, predictions,
                                               model_config.vocab_size))
    rng = jax.random.PRNGKey(1)
    start = time.perf_counter()
    compiled = train_step.lower(state, batch_arrays, rng).compile()
    compile_s = time.perf_counter() - start
    state, _ = compiled(state, batch_arrays, rng)
    jax.block_until_ready(state)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = compiled(state, batch_arrays, rng)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    flops_per_step = flops.train_flops_per_step(model_config, batch, seq, predictions)
    return {"step_s": step_s, "seq_per_s": batch / step_s, "gflop_per_step": flops_per_step / 1e9,
            "achieved_gflops": flops_per_step / step_s / 1e9, "compile_s": compile_s,
            "spread": (max(times) - min(times)) / step_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="albert-base-v2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    load = wait_for_quiet()
    ceilings = {dtype: flops.measured_matmul_peak(size=2048, dtype=dtype, repeats=7)
                for dtype in ("float32", "bfloat16")}
    rows = []
    for dtype in ("float32", "bfloat16"):
        result = bench_step(args.preset, dtype, args.batch, args.seq, args.predictions, args.steps)
        rows.append((dtype, result, ceilings[dtype]))

    print(f"\n{args.preset}, batch {args.batch}, seq {args.seq}, {args.predictions} masked "
          f"positions, LAMB; {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} at start")
    print(f"XLA matmul ceiling (n=2048): fp32 {ceilings['float32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 inputs + fp32 accumulation {ceilings['bfloat16'] / 1e9:.0f} GFLOP/s\n")
    header = ("| compute | step s | seq/s | GFLOP/step | GFLOP/s | MFU vs own-dtype ceiling "
              "| MFU vs fp32 ceiling | compile s | spread |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for dtype, result, ceiling in rows:
        print(f"| {dtype} | {result['step_s']:.3f} | {result['seq_per_s']:.2f} | "
              f"{result['gflop_per_step']:.0f} | {result['achieved_gflops']:.0f} | "
              f"{100 * result['achieved_gflops'] * 1e9 / ceiling:.1f} % | "
              f"{100 * result['achieved_gflops'] * 1e9 / ceilings['float32']:.1f} % | "
              f"{result['compile_s']:.1f} | {100 * result['spread']:.0f} % |")


if __name__ == "__main__":
    main()
