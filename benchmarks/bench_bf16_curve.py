"""Loss curves of fp32 and bf16 compute over the same steps: is bf16 within fp32's noise?

  .venv/bin/python -m benchmarks.bench_bf16_curve [--steps=200] [--model=demo]
      [--layers=N] [--workdir=DIR]

Data and settings are the demo's (configs/pretrain.py:runlocal: seq 64, batch 32, LAMB at lr
3e-3 with 80 warmup steps, on the stdlib-docstring corpus), built once with the real
`albert-jax tokenizer train` / `data build` into --workdir (kept, so a second run reuses them).
The first --steps batches are read once and fed to every run, in the same order:

  fp32        compute_dtype float32, init seed S
  bf16        compute_dtype bfloat16 (bf16 matmul inputs and activations, float32 parameters,
              accumulation, LayerNorm, softmax and loss: model/layers.py), init seed S
  fp32 seed   float32, init seed S + 1: how far two equally good fp32 runs drift apart

Printed: the training loss at steps 50, 100, ... (and its mean over the 10 steps before), the
fp32 step-to-step noise (std of the loss around its 10-step moving mean, steps 21..end: each
step sees a different batch), and max |bf16 - fp32| and max |fp32 seed - fp32| over the steps,
raw and 10-step-smoothed, also as multiples of that noise.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from albert_jax import config as config_lib
from albert_jax import pretraining
from albert_jax.train import optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from configs import pretrain as pretrain_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = 10  # steps of the moving mean


def run_config(workdir: str, model: str, layers: int | None) -> ml_collections.ConfigDict:
    """configs/pretrain.py:runlocal with its tokenizer and data in `workdir`."""
    config = pretrain_config.get_config(f"runlocal,model={model}")
    config.data.tokenizer = os.path.join(workdir, "spm.model")
    config.data.dir = os.path.join(workdir, "data")
    if layers is not None:
        config.model_overrides.num_hidden_layers = layers
    return config


def build_data(config: ml_collections.ConfigDict) -> None:
    """The demo tokenizer and dataset, by the real CLI, unless already there."""
    flags = ["--config=configs/pretrain.py:runlocal",
             f"--config.data.tokenizer={config.data.tokenizer}",
             f"--config.data.dir={config.data.dir}"]
    for command, done in ((["tokenizer", "train"], os.path.exists(config.data.tokenizer)),
                          (["data", "build"], os.path.isdir(config.data.dir))):
        if done:
            continue
        print(f"albert-jax {' '.join(command)} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "albert_jax.cli", *command, *flags], cwd=REPO,
                       check=True, stdout=subprocess.DEVNULL)


def first_batches(config: ml_collections.ConfigDict, steps: int) -> list[dict[str, np.ndarray]]:
    iterator = pretraining.PretrainingTask(config, config_lib.model_config(config)).train_iterator()
    return [next(iterator) for _ in range(steps)]


def loss_curve(config: ml_collections.ConfigDict, compute_dtype: str, seed: int,
               batches: list[dict[str, np.ndarray]]) -> np.ndarray:
    """Training loss [steps] of the real train step (train/step.py, LAMB) over `batches`."""
    config = config.copy_and_resolve_references()
    config.compute_dtype = compute_dtype
    task = pretraining.PretrainingTask(config, config_lib.model_config(config))
    optimizer, lr_fn = optim.make_optimizer(config.optim, config.total_steps)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
                              devices=jax.devices()[:1])
    state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(seed),
                                       task.init_inputs())
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn, mesh=mesh),
                         donate_argnums=(0,))
    rng = jax.random.PRNGKey(seed + 1)
    losses = []
    start = time.perf_counter()
    for batch in batches:
        state, metrics = train_step(state, batch, rng)
        losses.append(metrics["loss"])
    losses = np.asarray(jax.device_get(losses), np.float64)
    print(f"{compute_dtype} seed {seed}: {len(batches)} steps in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return losses


def moving_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the WINDOW steps ending at each step (fewer at the start)."""
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - WINDOW, 0)
    return (cumulative[ends] - cumulative[starts]) / (ends - starts)


def summary(curves: dict[str, np.ndarray]) -> dict[str, Any]:
    fp32 = curves["fp32"]
    smoothed = {name: moving_mean(curve) for name, curve in curves.items()}
    # After the first 2 windows the loss moves slowly against the batch-to-batch scatter.
    noise = float(np.std((fp32 - smoothed["fp32"])[2 * WINDOW:]))
    result: dict[str, Any] = {"fp32_step_noise": noise, "checkpoints": {}}
    for step in range(50, len(fp32) + 1, 50):
        result["checkpoints"][step] = {name: (float(curve[step - 1]),
                                              float(smoothed[name][step - 1]))
                                       for name, curve in curves.items()}
    for name in ("bf16", "fp32 seed"):
        raw = float(np.max(np.abs(curves[name] - fp32)))
        smooth = float(np.max(np.abs(smoothed[name] - smoothed["fp32"])[WINDOW:]))
        result[name] = {"max_abs_diff": raw, "max_abs_diff_smoothed": smooth,
                        "in_noise_units": raw / noise, "smoothed_in_noise_units": smooth / noise}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--model", default="demo", help="a preset of model/presets.py")
    parser.add_argument("--layers", type=int, default=None, help="num_hidden_layers override")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=os.path.join(REPO, "runs", "bf16_curve"),
                        help="where the demo tokenizer and data are built (and reused)")
    args = parser.parse_args()
    if args.steps < 50:
        parser.error(f"--steps={args.steps}: give at least 50 (the summary is every 50 steps)")
    config = run_config(os.path.abspath(args.workdir), args.model, args.layers)
    build_data(config)
    batches = first_batches(config, args.steps)
    curves = {"fp32": loss_curve(config, "float32", args.seed, batches),
              "bf16": loss_curve(config, "bfloat16", args.seed, batches),
              "fp32 seed": loss_curve(config, "float32", args.seed + 1, batches)}
    result = summary(curves)
    model = config_lib.model_config(config)
    print(f"model {args.model} (H{model.hidden_size} L{model.num_hidden_layers} "
          f"E{model.embedding_size}), seq {config.seq_len}, batch {config.batch_size}, "
          f"LAMB lr {config.optim.lr} warmup {config.optim.warmup_steps}, {args.steps} steps, "
          f"same batches; seeds {args.seed} and {args.seed + 1}")
    print(f"| step | fp32 | bf16 | fp32 seed+1 |  (loss at the step / mean of the {WINDOW} "
          "steps up to it)")
    print("|---|---|---|---|")
    for step, values in result["checkpoints"].items():
        cells = [f"{values[name][0]:.4f} / {values[name][1]:.4f}"
                 for name in ("fp32", "bf16", "fp32 seed")]
        print(f"| {step} | " + " | ".join(cells) + " |")
    noise = result["fp32_step_noise"]
    print(f"fp32 step-to-step noise (std around the {WINDOW}-step mean): {noise:.4f}")
    for name in ("bf16", "fp32 seed"):
        diff = result[name]
        print(f"max |{name} - fp32|: {diff['max_abs_diff']:.4f} per step "
              f"({diff['in_noise_units']:.2f} x noise), {diff['max_abs_diff_smoothed']:.4f} "
              f"smoothed ({diff['smoothed_in_noise_units']:.2f} x noise)")


if __name__ == "__main__":
    main()
