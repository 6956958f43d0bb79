"""`albert-jax pretrain`: one straight path from config to trained checkpoint.

Config -> workdir (config.json) -> mesh -> per-host data -> abstract state -> shardings ->
restore (resume) or sharded init (+ init_from) -> jitted step -> loop (metrics on host 0, eval,
NaN guard, async Orbax saves, SIGTERM) -> final eval.
"""
from __future__ import annotations

import json
import signal
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from albert_jax import config as config_lib
from albert_jax.model import AlbertForPreTraining
from albert_jax.train import checkpoint, flops, metrics as metrics_lib, optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib

# Keys that may change when a run resumes: how it is run, not what it computes.
RESUMABLE_CHANGES = ("total_steps", "mesh", "log_every_steps", "eval_every_steps", "eval_steps",
                     "eval_batch_size", "checkpoint_every_steps", "keep_checkpoints",
                     "compute_dtype", "num_microbatches", "init_from", "data.num_workers",
                     "data.prefetch")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def prepare_workdir(config: ml_collections.ConfigDict, workdir: epath.Path) -> None:
    """Saves the resolved config; refuses a workdir holding a run with an incompatible config."""
    path = workdir / "config.json"
    new = json.loads(config_lib.to_json(config))
    if path.exists():
        old = json.loads(path.read_text())
        old_flat, new_flat = _flatten(old), _flatten(new)
        changed = sorted(
            key for key in set(old_flat) | set(new_flat)
            if old_flat.get(key) != new_flat.get(key)
            and not any(key == allowed or key.startswith(allowed + ".") for allowed in RESUMABLE_CHANGES))
        if changed:
            details = "; ".join(f"{key}: {old_flat.get(key)!r} in the workdir, {new_flat.get(key)!r} now"
                                for key in changed)
            raise ValueError(f"workdir {workdir} holds a run with an incompatible config ({details}). "
                             "Use a new --workdir, or the saved config.")
    if jax.process_index() == 0:
        workdir.mkdir(parents=True, exist_ok=True)
        temporary = workdir / "config.json.tmp"
        temporary.write_text(config_lib.to_json(config))
        temporary.replace(path)


class _Preemption:
    """Turns SIGTERM into a flag the loop checks after every step (save, wait, exit cleanly)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        logging.warning("SIGTERM received: saving a checkpoint and stopping.")
        self.requested = True

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _check_finite(step: int, values: dict[str, float]) -> None:
    bad = {key: value for key, value in values.items() if not np.isfinite(value)}
    if bad:
        raise TrainingDiverged(
            f"step {step}: non-finite {bad}. Training stopped; the last good checkpoint is kept. "
            "Lower optim.lr, raise optim.warmup_steps or check the data (an out-of-vocabulary "
            "token id also gives NaN).")


def evaluate(config: ml_collections.ConfigDict, eval_step: Any, params: Any,
             batch_sharding: jax.sharding.Sharding) -> dict[str, float]:
    """SPEC 5.6 metrics over up to `eval_steps` batches of the eval split."""
    from albert_jax.data import pipeline
    sums = None
    iterator = pipeline.make_iterator(config, "eval", repeat=False)
    for _, host_batch in zip(range(config.eval_steps), iterator):
        batch_sums = eval_step(params, pipeline.to_global_batch(host_batch, batch_sharding))
        sums = batch_sums if sums is None else jax.tree_util.tree_map(jnp.add, sums, batch_sums)
    if sums is None:
        logging.warning("the eval split is empty: no eval metrics")
        return {}
    return {key: float(value) for key, value in
            step_lib.metrics_from_sums(jax.device_get(sums), config.data.sentence_objective).items()}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       multihost: bool = False) -> dict[str, float]:
    """Pretrains until config.total_steps; returns the final eval metrics (empty if none)."""
    # --- Hosts ---
    from albert_jax import distributed
    distributed.initialize(multihost)  # settings from the environment or cluster detection
    workdir = epath.Path(workdir)
    prepare_workdir(config, workdir)
    model_config = config_lib.model_config(config)
    is_main = jax.process_index() == 0

    # --- Mesh ---
    mesh = sharding.make_mesh(config.mesh)
    batch_sharding = sharding.batch_sharding(mesh)
    replicated = sharding.replicated(mesh)
    if config.batch_size % (mesh.shape["data"] * mesh.shape["fsdp"]):
        raise ValueError(f"config batch_size={config.batch_size} must be divisible by the data x "
                         f"fsdp mesh axes ({mesh.shape['data']} x {mesh.shape['fsdp']})")

    # --- Data ---
    from albert_jax.data import pipeline
    train_iterator = pipeline.make_iterator(config, "train")

    # --- Model, optimizer, abstract state ---
    model = AlbertForPreTraining(model_config)
    optimizer, learning_rate_fn = optim.make_optimizer(config.optim, config.total_steps)
    abstract_state, state_shardings = state_lib.abstract_train_state(
        model, optimizer, mesh, seq_len=config.seq_len,
        max_predictions=config.data.max_predictions)
    if is_main:
        print(state_lib.param_table(model, mesh, config.seq_len, config.data.max_predictions),
              flush=True)

    # --- Restore (resume) or initialise ---
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints",
                                           max_to_keep=config.keep_checkpoints,
                                           save_interval_steps=config.checkpoint_every_steps)
    latest = checkpointer.latest_step()
    if latest is not None:
        state, _ = checkpointer.restore(latest, abstract_state, train_iterator)
        print(f"Resuming from the checkpoint at step {latest} in {workdir}.", flush=True)
    else:
        state = state_lib.init_train_state(model, optimizer, mesh, jax.random.PRNGKey(config.seed),
                                           seq_len=config.seq_len,
                                           max_predictions=config.data.max_predictions)
        if config.init_from:
            params = checkpoint.load_params_for_init(config.init_from, abstract_state.params)
            state = state.replace(params=params)
            print(f"Initialised weights from {config.init_from}.", flush=True)
    start_step = int(state.step)
    if latest is not None and is_main:
        _truncate_metrics(workdir / "metrics.jsonl", after_step=start_step)
    writer = metrics_lib.MetricsWriter(workdir)  # after the truncation: it appends
    if start_step >= config.total_steps:
        print(f"Training is done: the checkpoint in {workdir} is at step {start_step} of "
              f"{config.total_steps}. Raise --config.total_steps to train further.", flush=True)
        checkpointer.close()
        writer.close()
        return {}

    # --- Steps ---
    train_step = jax.jit(
        step_lib.make_train_step(model, optimizer, learning_rate_fn,
                                 num_microbatches=config.num_microbatches,
                                 sentence_objective=config.data.sentence_objective),
        in_shardings=(state_shardings, batch_sharding, replicated),
        out_shardings=(state_shardings, replicated),
        donate_argnums=(0,))
    eval_step = jax.jit(step_lib.make_eval_step(model),
                        in_shardings=(state_shardings.params, batch_sharding),
                        out_shardings=replicated)
    rng = jax.device_put(jax.random.PRNGKey(config.seed + 1), replicated)
    progress = metrics_lib.Progress(
        total_steps=config.total_steps, batch_size=config.batch_size, seq_len=config.seq_len,
        flops_per_step=flops.train_flops_per_step(model_config, config.batch_size,
                                                  config.seq_len, config.data.max_predictions),
        peak_flops=flops.peak_flops_per_device(config.compute_dtype) * jax.device_count())

    # --- Loop ---
    preemption = _Preemption()
    running_sums, running_count = None, 0
    eval_metrics: dict[str, float] = {}
    step = start_step
    progress.start(step)
    try:
        while step < config.total_steps:
            batch = pipeline.to_global_batch(next(train_iterator), batch_sharding)
            state, step_metrics = train_step(state, batch, rng)
            step += 1
            # Averages over the log interval, summed on device: no host sync between logs.
            running_sums = step_metrics if running_sums is None else jax.tree_util.tree_map(
                jnp.add, running_sums, step_metrics)
            running_count += 1
            last = step == config.total_steps
            if step % config.log_every_steps == 0 or last or preemption.requested:
                logged = {key: float(value) / running_count
                          for key, value in jax.device_get(running_sums).items()}
                logged["learning_rate"] = float(learning_rate_fn(step - 1))
                running_sums, running_count = None, 0
                _check_finite(step, logged)
                logged.update(progress.measure(step))
                writer.write(step, logged)
                if is_main:
                    print(progress.line(step, logged), flush=True)
            if step % config.eval_every_steps == 0 or last:
                eval_metrics = evaluate(config, eval_step, state.params, batch_sharding)
                if eval_metrics:
                    writer.write(step, eval_metrics, prefix="eval/")
                if is_main and eval_metrics:
                    print(f"eval at step {step}: " + ", ".join(
                        f"{key} {value:.4f}" for key, value in eval_metrics.items()), flush=True)
                progress.start(step)  # eval time is not training throughput
            if step % config.checkpoint_every_steps == 0 or last or preemption.requested:
                # Never save a diverged state: the last good checkpoint stays the latest.
                _check_finite(step, {"param_norm": float(step_metrics["param_norm"])})
                checkpointer.save(step, state, train_iterator, config_lib.to_json(config),
                                  force=True)
            if preemption.requested:
                print(f"Preempted: checkpoint saved at step {step}; rerun the same command to "
                      "resume.", flush=True)
                break
    finally:
        checkpointer.wait_until_finished()
        checkpointer.close()
        writer.close()
        preemption.restore()
    if is_main and step >= config.total_steps and eval_metrics:
        print("Final: " + ", ".join(f"{key} {eval_metrics[key]:.4f}" for key in
                                    ("masked_lm_accuracy", "sentence_order_accuracy",
                                     "masked_lm_loss", "sentence_order_loss")
                                    if key in eval_metrics), flush=True)
        baselines = majority_baselines(config)
        print("Baselines on the same eval batches: always the most frequent masked token "
              f"{baselines['masked_lm_accuracy']:.4f}, always the majority sentence-order "
              f"label {baselines['sentence_order_accuracy']:.4f}", flush=True)
    return eval_metrics


def majority_baselines(config: ml_collections.ConfigDict) -> dict[str, float]:
    """Accuracy of constant guesses on the eval batches `evaluate` scores: the most frequent
    masked token, and the more frequent sentence-order label."""
    from albert_jax.data import pipeline
    token_counts: dict[int, float] = {}
    label_counts = np.zeros(2)
    for _, batch in zip(range(config.eval_steps),
                        pipeline.make_iterator(config, "eval", repeat=False)):
        weights = batch["masked_lm_weights"] > 0
        ids, counts = np.unique(batch["masked_lm_ids"][weights], return_counts=True)
        for token, count in zip(ids.tolist(), counts.tolist()):
            token_counts[token] = token_counts.get(token, 0) + count
        label_counts += np.bincount(batch["next_sentence_labels"].reshape(-1), minlength=2)[:2]
    total_tokens = sum(token_counts.values())
    return {"masked_lm_accuracy": max(token_counts.values()) / total_tokens if total_tokens else 0.0,
            "sentence_order_accuracy": label_counts.max() / max(label_counts.sum(), 1)}


def _truncate_metrics(path: epath.Path, *, after_step: int) -> None:
    """Drops records past the resumed step: they belong to the run that was lost."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= after_step]
    temporary = path.parent / (path.name + ".tmp")
    temporary.write_text("".join(line + "\n" for line in kept))
    temporary.replace(path)
