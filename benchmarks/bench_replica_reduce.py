"""The albert-base train step on 8 CPU devices with the gradient summed per data replica (one
psum a step, train/step.py) against the compiler's reduction (one per use of a parameter),
interleaved in one process; medians.

  python benchmarks/bench_replica_reduce.py [--rounds 5] [--batch 16] [--seq 128]

Both steps are `step.jit_train_step` for the same mesh; the compiler's reduction is the same
step traced with the per-replica sum switched off (what the step did before it).
"""
from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

import jax  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax import pretraining  # noqa: E402
from albert_jax.model import get_config  # noqa: E402
from albert_jax.train import optim, sharding  # noqa: E402
from albert_jax.train import state as state_lib  # noqa: E402
from albert_jax.train import step as step_lib  # noqa: E402
from benchmarks.bench_train import random_batch  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    predictions = 20
    run_config = pretrain_config.get_config("model=albert-base-v2")
    run_config.seq_len, run_config.data.max_predictions = args.seq, predictions
    task = pretraining.PretrainingTask(run_config, get_config("albert-base-v2"))
    optim_config = ml_collections.ConfigDict(dict(
        name="lamb", lr=1e-3, warmup_steps=10, schedule="reference", power=1.0,
        weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
    optimizer, lr_fn = optim.make_optimizer(optim_config, total_steps=1000)
    rows = []
    for data, fsdp in ((2, 4), (8, 1)):
        mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=1)))
        _, shardings = state_lib.abstract_train_state(task.model, optimizer, mesh,
                                                      task.init_inputs())
        batch = jax.device_put(random_batch(np.random.default_rng(0), args.batch, args.seq,
                                            predictions, 30000), sharding.batch_sharding(mesh))
        rng = jax.random.PRNGKey(1)
        steps, states = {}, {}
        for name, per_replica in (("compiler", False), ("per replica", True)):
            with mock.patch.object(step_lib, "_reduces_per_replica",
                                   lambda task, mesh, on=per_replica: on):
                train_step = step_lib.jit_train_step(task, optimizer, lr_fn, mesh, shardings)
                state = state_lib.init_train_state(task.model, optimizer, mesh,
                                                   jax.random.PRNGKey(0), task.init_inputs())
                steps[name] = train_step.lower(state, batch, rng).compile()
            states[name], _ = steps[name](state, batch, rng)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, compiled in steps.items():
                start = time.perf_counter()
                states[name], metrics = compiled(states[name], batch, rng)
                jax.block_until_ready(metrics)
                times[name].append(time.perf_counter() - start)
        before, after = (statistics.median(times[name]) for name in ("compiler", "per replica"))
        rows.append((f"data={data} x fsdp={fsdp}", before, after))
    print(f"albert-base-v2, batch {args.batch} x {args.seq}, 8 CPU devices, {args.rounds} "
          f"rounds interleaved, load {os.getloadavg()[0]:.1f}")
    print("| mesh | compiler's reduction (s/step) | per replica (s/step) | ratio |")
    print("|---|---|---|---|")
    for mesh_name, before, after in rows:
        print(f"| {mesh_name} | {before:.3f} | {after:.3f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
