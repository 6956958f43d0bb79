"""The one training loop of every job: one straight path from config and task to trained checkpoint.

Config -> workdir lock -> newest intact checkpoint -> workdir (config.json) -> mesh -> task data
-> abstract state -> shardings -> restore (resume) or sharded init (+ the task's initial
weights) -> jitted steps -> loop (metrics on host 0, evaluation, best checkpoint, NaN guard, async
Orbax saves, SIGTERM) -> the task's report.

What differs between pretraining, GLUE, RACE and SQuAD is the `Task` (train/task.py); nothing
here knows a batch key or a model argument.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import signal
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from albert_jax import config as config_lib
from albert_jax import files
from albert_jax.train import (
    buckets,
    checkpoint,
    flops,
    optim,
    reporting,
    sharding,
    validation,
    workdir_lock,
)
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from albert_jax.train import workdir as workdir_names
from albert_jax.train.task import HostBatch, Task

# Keys that may change when a run resumes: how it is run, not what it computes. Not
# data.num_workers: grain's saved iterator state has one entry per worker process, and a state
# saved with one count cannot be set on an iterator with another.
RESUMABLE_CHANGES = ("total_steps", "mesh", "log_every_steps", "eval_every_steps", "eval_steps",
                     "eval_batch_size", "checkpoint_every_steps", "keep_checkpoints",
                     "compute_dtype", "num_microbatches", "init_from", "data.prefetch",
                     "data.local_dir", "length_buckets", "model_overrides.attention_impl",
                     "report_to", "mlflow", "wandb", "profile", "sweep")
# The checkpoint record's key of the open log interval (`_RunningMetrics.saved`).
LOG_INTERVAL = "log_interval"


class TrainingDiverged(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept."""


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as one level of dotted keys: {"optim": {"lr": x}} -> {"optim.lr": x}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_workdir_config(config: ml_collections.ConfigDict, workdir: epath.Path) -> None:
    """Refuses a workdir holding a run whose config differs from `config` in more than how it
    is run (RESUMABLE_CHANGES); reads only. The loop writes config.json later, once the data
    and the model have been built with `config`."""
    path = workdir / workdir_names.CONFIG_FILE
    if not path.exists():
        return
    old_flat = flatten(json.loads(path.read_text()))
    new_flat = flatten(json.loads(config_lib.to_json(config)))
    changed = sorted(
        key for key in set(old_flat) | set(new_flat)
        if old_flat.get(key) != new_flat.get(key)
        and not any(key == allowed or key.startswith(allowed + ".") for allowed in RESUMABLE_CHANGES))
    if changed:
        details = "; ".join(f"{key}: {old_flat.get(key)!r} in the workdir, {new_flat.get(key)!r} now"
                            for key in changed)
        raise ValueError(f"workdir {workdir} holds a run with an incompatible config ({details}). "
                         "Use a new --workdir, or the saved config.")


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


def predict_batches(eval_step: Any, params: Any, batch_sharding: jax.sharding.Sharding,
                    host_batches: Iterator[HostBatch], sequence_fields: tuple[str, ...],
                    lengths: tuple[int, ...]
                    ) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray]]:
    """`eval_step` over `host_batches` (this host's rows of global batches), each batch cut to
    its length bucket among `lengths` (train/buckets.py): (the summed loss sums, or None if there
    was no batch; the per-example predictions concatenated, padding rows included)."""
    sums = None
    predictions: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    for host_batch in host_batches:
        host_batch = buckets.trim(host_batch, sequence_fields, lengths)
        batch_sums, batch_predictions = eval_step(
            params, sharding.to_global_batch(host_batch, batch_sharding))
        sums = batch_sums if sums is None else jax.tree_util.tree_map(jnp.add, sums, batch_sums)
        for key, value in jax.device_get(batch_predictions).items():  # replicated: every host
            predictions[key].append(np.asarray(value))
    return (None if sums is None else jax.device_get(sums),
            {key: np.concatenate(values) for key, values in predictions.items()})


def predict(task: Task, eval_step: Any, params: Any, batch_sharding: jax.sharding.Sharding,
            split: str, lengths: tuple[int, ...]
            ) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray]]:
    """`predict_batches` over one pass of the task's eval split `split`."""
    return predict_batches(eval_step, params, batch_sharding, task.eval_batches(split),
                           task.sequence_fields, lengths)


def evaluate(task: Task, eval_step: Any, params: Any, batch_sharding: jax.sharding.Sharding,
             split: str, lengths: tuple[int, ...]) -> dict[str, float]:
    """The task's metrics over one pass of eval split `split` (empty if it has no batch)."""
    sums, predictions = predict(task, eval_step, params, batch_sharding, split, lengths)
    if sums is None:
        logging.warning("eval split %r is empty: no eval metrics", split)
        return {}
    return task.eval_metrics(split, sums, predictions)


def _checkpoint_record(config: ml_collections.ConfigDict, task: Task,
                       best: dict[str, Any] | None,
                       running: _RunningMetrics | None = None) -> str:
    """The JSON saved with every checkpoint: the run config, the model config it resolved to
    (`checkpoint.load` reads it), the best evaluation so far and the open log interval's sums
    (both restored on resume; a best checkpoint has no log interval)."""
    record = config.to_dict()
    record["model_config"] = task.model_config.to_dict()
    record["best"] = best
    if running is not None:
        record[LOG_INTERVAL] = running.saved()
    return json.dumps(record)


def _new_best(task: Task, eval_metrics: dict[str, dict[str, float]],
              best: dict[str, Any] | None, step: int) -> dict[str, Any] | None:
    """The best record if this evaluation beats `best` on the task's selection, else None."""
    selection = task.selection
    assert selection is not None  # the caller checks
    value = eval_metrics.get(selection.split, {}).get(selection.metric)
    if value is None or not np.isfinite(value):
        return None
    if best is not None and value <= best["value"]:
        return None  # ties keep the earlier checkpoint
    # The selection split's metrics also at the top level: `best.json` reads as "step and the
    # metrics of the best checkpoint"; `metrics` keeps every split (MNLI mismatched, ...).
    return {**eval_metrics[selection.split], "step": step, "split": selection.split,
            "metric": selection.metric, "value": value, "metrics": eval_metrics}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       task: Task) -> dict[str, dict[str, float]]:
    """Trains `task` until config.total_steps; returns the last evaluation (split -> metrics).

    One run per workdir: its lock (train/workdir_lock.py) is taken before anything is written
    there and released when the run ends. Multi-host jobs call `distributed.initialize` before
    (the CLI does).
    """
    validation.check_run(config)  # a bad value: one line, and the workdir is left as it was
    with workdir_lock.hold(workdir):
        return _train(config, epath.Path(workdir), task)


def _train(config: ml_collections.ConfigDict, workdir: epath.Path,
           task: Task) -> dict[str, dict[str, float]]:
    """The run itself, under the workdir's lock. One function from config to last checkpoint
    (as big_vision's train.py), over the ~80 lines wanted: the order of its banners is what a
    resume relies on (the checkpoint found before anything is written, the config written only
    once data and model work, metrics.jsonl cut back before the writer opens), and split into
    pieces that order would hide behind calls."""
    # --- The newest intact checkpoint, before anything is written (none intact: stop) ---
    checkpointer = checkpoint.Checkpointer(workdir / workdir_names.CHECKPOINTS_SUBDIR,
                                           max_to_keep=config.keep_checkpoints,
                                           save_interval_steps=config.checkpoint_every_steps)
    latest = checkpointer.newest_intact_step()
    check_workdir_config(config, workdir)
    is_main = jax.process_index() == 0

    # --- Mesh ---
    mesh = sharding.make_mesh(config.mesh)
    batch_sharding = sharding.batch_sharding(mesh)

    # --- A finished run stops here, before the data is read ---
    if latest is not None and latest >= config.total_steps:
        print(f"Training is done: the checkpoint in {workdir} is at step {latest} of "
              f"{config.total_steps}. Raise --config.total_steps to train further.", flush=True)
        checkpointer.close()
        return {}

    # --- Data ---
    train_iterator = task.train_iterator()

    # --- Model, optimizer, abstract state ---
    optimizer, learning_rate_fn = optim.make_optimizer(config.optim, config.total_steps)
    init_inputs = task.init_inputs()
    boxed_state = state_lib.boxed_abstract_state(task.model, optimizer, init_inputs)
    abstract_state, state_shardings = state_lib.shard_abstract_state(boxed_state, mesh)
    if is_main:
        print(state_lib.param_table(boxed_state.params, mesh), flush=True)
        # Written only now that the data and the model are known to work with this config.
        files.write_atomically(workdir / workdir_names.CONFIG_FILE, config_lib.to_json(config))

    # --- Restore (resume) or initialise; the workdir's files ---
    if latest is not None:
        state, record = checkpointer.restore(latest, abstract_state, train_iterator)
        best = record.get("best")
        print(f"Resuming from the checkpoint at step {latest} in {workdir}.", flush=True)
        running = _resumed_interval(config, record, latest, is_main)
    else:
        state = _initial_state(config, task, optimizer, mesh, init_inputs, state_shardings)
        best, running = None, _RunningMetrics()
    step = int(state.step)
    if is_main:  # a fresh start too: a run killed before its first checkpoint logged steps
        _truncate_metrics(workdir / workdir_names.METRICS_LOG_FILE, after_step=step)
        for name, content in task.workdir_files().items():
            (workdir / name).write_bytes(content)
    best_checkpointer, best = _open_best(workdir, task, best)

    # --- Steps ---
    train_step = step_lib.jit_train_step(task, optimizer, learning_rate_fn, mesh, state_shardings,
                                         num_microbatches=config.num_microbatches)
    eval_step = step_lib.jit_eval_step(task, mesh, state_shardings.params)
    rng = jax.device_put(jax.random.PRNGKey(config.seed + 1), sharding.replicated(mesh))
    lengths = _announced_lengths(config, task)
    progress = reporting.Progress(
        total_steps=config.total_steps, batch_size=config.batch_size,
        peak_flops=flops.peak_flops_per_device(config.compute_dtype) * jax.device_count())
    writer = reporting.open_writer(config, workdir, progress, step, task.console_line,
                                   hparams=flatten(config.to_dict()))  # after the truncation
    profiler = reporting.StepProfiler(config, workdir, start_step=step)

    # --- Loop ---
    preemption = _Preemption()
    eval_metrics: dict[str, dict[str, float]] = {}
    progress.start(step)
    try:
        while step < config.total_steps:
            host_batch = buckets.trim(next(train_iterator), task.sequence_fields, lengths)
            batch = sharding.to_global_batch(host_batch, batch_sharding)
            with profiler.annotate(step + 1):
                state, step_metrics = train_step(state, batch, rng)
            step += 1
            profiler.step_done(step, state)
            length = batch["input_ids"].shape[-1]
            progress.count(flops=flops.TRAIN_FLOPS_PER_FORWARD * config.batch_size
                           * task.flops_per_example(length),
                           tokens=batch["input_ids"].size)
            checkpointer.raise_if_save_failed()  # stop now, not one save interval later
            running.add(step_metrics)
            last = step == config.total_steps
            # Not on preemption: the open interval goes into the checkpoint and the resumed run
            # logs it where an uninterrupted run would.
            if step % config.log_every_steps == 0 or last:
                logged = running.average(learning_rate=float(learning_rate_fn(step - 1)))
                _check_finite(step, logged)
                logged.update(progress.measure(step))
                writer.write(step, logged)
            if step % config.eval_every_steps == 0 or last:
                eval_metrics = {split: evaluate(task, eval_step, state.params, batch_sharding,
                                                split, lengths) for split in task.eval_splits}
                best = _report_and_keep_best(config, workdir, task, writer, best_checkpointer,
                                             best, state, step, eval_metrics)
                progress.start(step)  # eval time is not training throughput
            if step % config.checkpoint_every_steps == 0 or last or preemption.requested:
                # Never save a diverged state: the last good checkpoint stays the latest.
                _check_finite(step, {"param_norm": float(step_metrics["param_norm"])})
                checkpointer.save(step, state, train_iterator,
                                  _checkpoint_record(config, task, best, running), force=True)
            if preemption.requested:
                print(f"Preempted: checkpoint saved at step {step}; rerun the same command to "
                      "resume.", flush=True)
                break
        if step >= config.total_steps:
            writer.write_summary(*_summary(best, eval_metrics, step))
    finally:
        try:
            checkpointer.close()  # waits for the last save; raises if it failed
        finally:
            if best_checkpointer is not None:
                best_checkpointer.close()
            preemption.restore()
            profiler.stop()
            writer.close()
    if is_main and step >= config.total_steps:
        task.final_report(eval_metrics)
    return eval_metrics


def _summary(best: dict[str, Any] | None, eval_metrics: dict[str, dict[str, float]],
             step: int) -> tuple[int, dict[str, float]]:
    """A finished run's outcome for the trackers: best.json's metrics as best/<key> at the
    best step (fine-tuning), else the last evaluation as <split>/<key>."""
    if best is not None:
        return best["step"], {f"best/{key}": float(value) for key, value in best.items()
                              if isinstance(value, (int, float)) and key != "step"}
    return step, {f"{split}/{key}": value for split, metrics in eval_metrics.items()
                  for key, value in metrics.items()}


def _initial_state(config: ml_collections.ConfigDict, task: Task, optimizer: Any,
                   mesh: jax.sharding.Mesh, init_inputs: tuple[jax.Array, ...],
                   state_shardings: Any) -> Any:
    """A new run's state, born sharded, with the task's initial weights (e.g. init_from)."""
    state = state_lib.init_train_state(task.model, optimizer, mesh,
                                       jax.random.PRNGKey(config.seed), init_inputs,
                                       shardings=state_shardings)
    return dataclasses.replace(state, params=task.initial_params(state.params))


def _announced_lengths(config: ml_collections.ConfigDict, task: Task) -> tuple[int, ...]:
    """The sequence lengths batches run at (train/buckets.py), said once when there are
    several."""
    lengths = buckets.lengths_of(config)
    if jax.process_index() == 0 and task.sequence_fields and len(lengths) > 1:
        print(f"Each batch runs at the shortest of the sequence lengths {lengths} that holds its "
              "longest example (config length_buckets); each length compiles once.", flush=True)
    return lengths


class _RunningMetrics:
    """Train metrics summed on device over the log interval: no host sync between logs.

    Every checkpoint saves the open interval (`saved`: its sums, their dtypes, its step count)
    and a resumed run goes on with it (`restored`), so its next record averages the steps an
    uninterrupted run's does, bit for bit: float32 values survive JSON exactly, and the sums go
    on adding in their own dtype."""

    def __init__(self, sums: dict[str, Any] | None = None, count: int = 0) -> None:
        self.sums: dict[str, Any] | None = sums
        self.count = count

    def saved(self) -> dict[str, Any]:
        """{"steps": n, "sums": {key: value}, "dtypes": {key: dtype name}} (a host sync)."""
        sums = {key: np.asarray(value) for key, value in jax.device_get(self.sums or {}).items()}
        return {"steps": self.count, "sums": {key: value.tolist() for key, value in sums.items()},
                "dtypes": {key: value.dtype.name for key, value in sums.items()}}

    @classmethod
    def restored(cls, saved: dict[str, Any]) -> "_RunningMetrics":
        """The interval `saved` wrote; its sums as host arrays, added to the next step's."""
        sums = {key: np.asarray(value, saved["dtypes"][key])
                for key, value in saved["sums"].items()}
        return cls(sums or None, int(saved["steps"]))

    def add(self, step_metrics: dict[str, jax.Array]) -> None:
        self.sums = step_metrics if self.sums is None else jax.tree_util.tree_map(
            jnp.add, self.sums, step_metrics)
        self.count += 1

    def average(self, **extra: float) -> dict[str, float]:
        """The interval's averages (plus `extra`), and a new interval."""
        averages = {key: float(value) / self.count
                    for key, value in jax.device_get(self.sums).items()}
        self.sums, self.count = None, 0
        return {**averages, **extra}


def _resumed_interval(config: ml_collections.ConfigDict, record: dict[str, Any], step: int,
                      is_main: bool) -> _RunningMetrics:
    """The log interval open at checkpoint `step`; a checkpoint saved before checkpoints kept
    it starts a new one, said in one line when its first record then averages fewer steps."""
    if LOG_INTERVAL in record:
        return _RunningMetrics.restored(record[LOG_INTERVAL])
    if is_main and step % config.log_every_steps:
        logged_at = min(step - step % config.log_every_steps + config.log_every_steps,
                        config.total_steps)
        print(f"The checkpoint at step {step} holds no open log interval (saved by an older "
              f"albert-jax): the train record of step {logged_at} averages steps {step + 1}-"
              f"{logged_at} only.", flush=True)
    return _RunningMetrics()


def _open_best(workdir: epath.Path, task: Task, best: dict[str, Any] | None
               ) -> tuple[checkpoint.Checkpointer | None, dict[str, Any] | None]:
    """The best-checkpoint directory of a task that keeps one, and the best record still valid:
    a damaged best checkpoint is moved aside and training goes on (the train checkpoints are
    intact); the next evaluation becomes the new best."""
    if task.selection is None:
        return None, best
    best_checkpointer = checkpoint.Checkpointer(workdir / workdir_names.BEST_SUBDIR,
                                                max_to_keep=1, async_save=False)
    if best_checkpointer.newest_intact_step(stop_if_all_damaged=False) is None and best:
        logging.warning("the best checkpoint (step %d) is not in %s; the next evaluation "
                        "becomes the best", best["step"], best_checkpointer.directory)
        best = None
    return best_checkpointer, best


def _report_and_keep_best(config: ml_collections.ConfigDict, workdir: epath.Path, task: Task,
                          writer: reporting.MetricsWriter,
                          best_checkpointer: checkpoint.Checkpointer | None,
                          best: dict[str, Any] | None, state: Any, step: int,
                          eval_metrics: dict[str, dict[str, float]]) -> dict[str, Any] | None:
    """Writes and prints an evaluation; saves the best checkpoint if it beats `best`. Returns
    the best record."""
    is_main = jax.process_index() == 0
    for split, metrics in eval_metrics.items():
        if metrics:
            writer.write(step, metrics, split=split)  # and the console
    new_best = _new_best(task, eval_metrics, best, step) if task.selection is not None else None
    if new_best is None:
        return best
    # Saved before the train checkpoint of this step, so a resume never skips it.
    assert best_checkpointer is not None  # opened whenever the task has a selection
    best_checkpointer.save(step, {"step": state.step, "params": state.params}, None,
                           _checkpoint_record(config, task, new_best), force=True)
    if is_main:
        files.write_atomically(workdir / workdir_names.BEST_FILE,
                               json.dumps(new_best, indent=2, sort_keys=True))
        print(f"new best {new_best['split']} {new_best['metric']} {new_best['value']:.4f} "
              f"at step {step}", flush=True)
    return new_best


def read_best(workdir: str | epath.Path) -> dict[str, Any]:
    """The `best.json` of a workdir: step, split, metric, value and the metrics of that step."""
    path = epath.Path(workdir) / workdir_names.BEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the run in {workdir} has not evaluated "
                                "yet; run `albert-jax finetune` with this workdir to train it")
    return json.loads(path.read_text())


def _truncate_metrics(path: epath.Path, *, after_step: int) -> None:
    """Drops records past the resumed step (they belong to the run that was lost) and a line a
    kill cut short, so every step has one record, in order. Rewritten only if one is dropped."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the last line of a killed run, written half
        if record["step"] <= after_step:
            kept.append(line)
    if len(kept) < len(lines):
        files.write_atomically(path, "".join(line + "\n" for line in kept))
