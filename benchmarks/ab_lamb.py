"""A/B: the reference LAMB (train/optim.py, a chain of optax transformations) against the same
update written as one pass, per leaf or over one flattened vector.

  .venv/bin/python -m benchmarks.ab_lamb [--repeats=7] [--steps=5] [--cases=update,step]
      [--optimizers=optax_clip,make_optimizer,per_leaf,flattened]

Every contender clips to global norm 1.0 first (SPEC 6.2), on albert-base's parameters,
interleaved (A, B, C per round, medians of per-round ratios against the first):
  update  the jitted optimizer update + apply_updates alone, params and state donated
  step    the whole pretraining train step (train/step.py, batch 8, seq 128) with each optimizer

Before timing, each contender's parameters after 3 updates are compared with the first's.

Optimizers:
  optax_clip      optax.clip_by_global_norm, then optim.lamb: moments, masked decay, masked trust
                  ratio, lr, each a transformation over the tree
  make_optimizer  optim.make_optimizer: optim.clip_by_global_norm (the reference's scalar
                  factor), then optim.lamb
  per_leaf        clipping and LAMB in one function per leaf: the same arithmetic in one pass
  flattened       every leaf raveled into one vector (jax.flatten_util), the moments and the
                  update over it in one pass, per-variable norms as segment sums, then unraveled
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from albert_jax import pretraining
from albert_jax.model import get_config
from albert_jax.train import optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from albert_jax.train.tree_names import path_name
from benchmarks import bench_table

LR, WEIGHT_DECAY, BETA_1, BETA_2, EPSILON, CLIP_NORM = 1e-3, 0.01, 0.9, 0.999, 1e-6, 1.0


class MomentsState(NamedTuple):
    mu: Any
    nu: Any


def _leaf_kinds(params: Any) -> tuple[Any, Any]:
    """Trees of bools like `params`: decayed-and-adapted (SPEC 6.3 mask), per-layer norms."""
    decayed = jax.tree_util.tree_map_with_path(
        lambda path, _: not optim.is_excluded(path_name(path)), params)
    per_layer = jax.tree_util.tree_map_with_path(
        lambda path, _: bool(optim.LAYER_STACKED_SCOPE.search(path_name(path))), params)
    return decayed, per_layer


def _clip(grads: Any) -> Any:
    norm = optax.tree.norm(grads)
    return jax.tree.map(lambda g: g * jnp.minimum(1.0, CLIP_NORM / norm), grads)


def per_leaf_lamb() -> optax.GradientTransformation:
    """Clip, then the reference LAMB (SPEC 6.3), all of a leaf's update in one function."""

    def init_fn(params: Any) -> MomentsState:
        zeros = lambda p: jnp.zeros_like(p, dtype=jnp.float32)
        return MomentsState(jax.tree.map(zeros, params), jax.tree.map(zeros, params))

    def update_fn(grads: Any, state: MomentsState, params: Any) -> tuple[Any, MomentsState]:
        decayed, per_layer = _leaf_kinds(params)
        grads = _clip(grads)

        def leaf(g, m, v, w, decay, layered):
            m = BETA_1 * m + (1.0 - BETA_1) * g
            v = BETA_2 * v + (1.0 - BETA_2) * jnp.square(g)
            update = m / (jnp.sqrt(v) + EPSILON)
            if decay:
                update = update + WEIGHT_DECAY * w
                update = update * optim._trust_ratio(w, update, layered)
            return -LR * update, m, v

        out = jax.tree.map(leaf, grads, state.mu, state.nu, params, decayed, per_layer)
        pick = lambda i: jax.tree.map(lambda _, o: o[i], params, out)
        return pick(0), MomentsState(pick(1), pick(2))

    return optax.GradientTransformation(init_fn, update_fn)


def flattened_lamb(params_template: Any) -> optax.GradientTransformation:
    """Clip, then the reference LAMB over one raveled vector; per-variable (per-layer-slice)
    norms as segment sums over a segment id per element."""
    decayed, per_layer = _leaf_kinds(params_template)
    segment_ids, decay_flags, start = [], [], 0
    for leaf, decay, layered in zip(jax.tree.leaves(params_template), jax.tree.leaves(decayed),
                                    jax.tree.leaves(per_layer)):
        slices = leaf.shape[0] if layered else 1
        segment_ids.append(start + np.repeat(np.arange(slices), leaf.size // slices))
        decay_flags.append(np.full(slices, decay))
        start += slices
    segment_ids = jnp.asarray(np.concatenate(segment_ids), jnp.int32)
    decay_flags = jnp.asarray(np.concatenate(decay_flags))
    num_segments = start

    def init_fn(params: Any) -> MomentsState:
        flat, _ = ravel_pytree(params)
        return MomentsState(jnp.zeros_like(flat), jnp.zeros_like(flat))

    def update_fn(grads: Any, state: MomentsState, params: Any) -> tuple[Any, MomentsState]:
        g, _ = ravel_pytree(_clip(grads))
        w, unravel = ravel_pytree(params)
        m = BETA_1 * state.mu + (1.0 - BETA_1) * g
        v = BETA_2 * state.nu + (1.0 - BETA_2) * jnp.square(g)
        decay = decay_flags[segment_ids]
        update = m / (jnp.sqrt(v) + EPSILON) + jnp.where(decay, WEIGHT_DECAY * w, 0.0)
        w_norm = jnp.sqrt(jax.ops.segment_sum(jnp.square(w), segment_ids, num_segments))
        u_norm = jnp.sqrt(jax.ops.segment_sum(jnp.square(update), segment_ids, num_segments))
        either_zero = (w_norm == 0.0) | (u_norm == 0.0)
        ratio = jnp.where(either_zero | ~decay_flags, 1.0,
                          w_norm / jnp.where(either_zero, 1.0, u_norm))
        return unravel(-LR * ratio[segment_ids] * update), MomentsState(m, v)

    return optax.GradientTransformation(init_fn, update_fn)


def make_optimizer_lamb() -> optax.GradientTransformation:
    config = ml_collections.ConfigDict(dict(
        name="lamb", lr=LR, warmup_steps=0, schedule="constant", power=1.0,
        weight_decay=WEIGHT_DECAY, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON,
        clip_norm=CLIP_NORM))
    return optim.make_optimizer(config, total_steps=1000)[0]


def optax_clip_lamb() -> optax.GradientTransformation:
    """What make_optimizer built before optim.clip_by_global_norm: optax's clipping in front."""
    return optax.chain(optax.clip_by_global_norm(CLIP_NORM),
                       optim.lamb(LR, WEIGHT_DECAY, BETA_1, BETA_2, EPSILON))


def base_task() -> pretraining.PretrainingTask:
    run_config = ml_collections.ConfigDict(dict(
        seq_len=bench_table.SEQ_LEN, init_from="",
        data=dict(max_predictions=bench_table.MAX_PREDICTIONS, sentence_objective="sop")))
    return pretraining.PretrainingTask(run_config, get_config("albert-base-v2"))


def optimizers(params: Any, names: list[str]) -> dict[str, optax.GradientTransformation]:
    builders = {"optax_clip": optax_clip_lamb, "make_optimizer": make_optimizer_lamb,
                "per_leaf": per_leaf_lamb, "flattened": lambda: flattened_lamb(params)}
    return {name: builders[name]() for name in names}


def check_same_updates(params: Any, grads_list: list[Any], names: list[str]) -> None:
    results = {}
    for name, optimizer in optimizers(params, names).items():
        state, current = optimizer.init(params), params
        update = jax.jit(optimizer.update)
        for grads in grads_list:
            updates, state = update(grads, state, current)
            current = optax.apply_updates(current, updates)
        results[name] = current
    for name in names[1:]:
        worst = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
                    zip(jax.tree.leaves(results[name]), jax.tree.leaves(results[names[0]])))
        print(f"{name}: max |params - {names[0]}'s| after {len(grads_list)} updates {worst:.1e}")


def update_contender(name: str, optimizer: optax.GradientTransformation, params: Any,
                     grads: Any) -> bench_table.Contender:
    def apply(params, state, grads):
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    jitted = jax.jit(apply, donate_argnums=(0, 1))
    params = jax.tree.map(jnp.copy, params)
    state = optimizer.init(params)
    compiled, compile_s = bench_table.compile_timed(jitted, params, state, grads)
    holder = {"params": params, "state": state}

    def run() -> None:
        holder["params"], holder["state"] = compiled(holder["params"], holder["state"], grads)
        jax.block_until_ready(holder["params"])

    return bench_table.Contender(name, run, compile_s, bench_table.peak_bytes(compiled))


def step_contender(name: str, optimizer: optax.GradientTransformation,
                   task: pretraining.PretrainingTask) -> bench_table.Contender:
    lr_fn: Callable[[Any], jax.Array] = lambda step: jnp.asarray(LR, jnp.float32)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
                              devices=jax.devices()[:1])
    state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(0),
                                       task.init_inputs())
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn), donate_argnums=(0,))
    inputs = jax.device_put(bench_table.pretraining_batch(8, task.model_config.vocab_size))
    rng = jax.random.PRNGKey(1)
    compiled, compile_s = bench_table.compile_timed(train_step, state, inputs, rng)
    holder = {"state": state}

    def run() -> None:
        holder["state"], metrics = compiled(holder["state"], inputs, rng)
        jax.block_until_ready(metrics)

    return bench_table.Contender(name, run, compile_s, bench_table.peak_bytes(compiled))


def report(label: str, times: dict[str, list[float]]) -> None:
    first = next(iter(times))
    for name, values in times.items():
        line = f"{label:6s} {name:14s} {1e3 * np.median(values):9.1f} ms"
        if name != first:
            line += f"   {first} / this {bench_table.median_ratio(times[first], values):.3f}x"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="optimizer updates per turn")
    parser.add_argument("--cases", default="update,step")
    parser.add_argument("--optimizers", default="optax_clip,make_optimizer,per_leaf,flattened",
                        help="the first is the baseline of the ratios")
    args = parser.parse_args()
    names = args.optimizers.split(",")
    task = base_task()
    params = jax.tree.map(jnp.asarray, sharding.unbox(
        task.model.init(jax.random.PRNGKey(0), *task.init_inputs())["params"]))
    rng = np.random.default_rng(0)
    grads_list = [jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape) * 1e-2, p.dtype),
                               params) for _ in range(3)]
    check_same_updates(params, grads_list, names)
    start = time.perf_counter()
    if "update" in args.cases:
        contenders = [update_contender(name, optimizer, params, grads_list[0])
                      for name, optimizer in optimizers(params, names).items()]
        report("update", bench_table.interleave(contenders, args.repeats, args.steps))
    if "step" in args.cases:
        contenders = [step_contender(name, optimizer, task)
                      for name, optimizer in optimizers(params, names).items()]
        report("step", bench_table.interleave(contenders, args.repeats, 1))
    print(f"({args.repeats} interleaved rounds, medians; {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
