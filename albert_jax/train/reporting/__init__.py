"""Reporting a run, what the loop shows and keeps of it (process 0 writes; every process runs
the same calls). The loop's one door in:

  progress = reporting.Progress(total_steps=..., batch_size=..., peak_flops=...)
  writer = reporting.open_writer(config, workdir, progress, step, task.console_line, hparams=...)
  writer.write(step, metrics[, split=...]); writer.write_summary(step, summary); writer.close()
  profiler = reporting.StepProfiler(config, workdir, start_step=step)

Behind it: metrics.py (the console, metrics.jsonl, TensorBoard; throughput and MFU),
tensorboard_events.py (TensorBoard's record format, no TensorFlow), trackers.py
(config.report_to: MLflow and W&B, each in its own thread: mlflow_writer.py, wandb_writer.py),
profiler.py (config.profile: a jax.profiler trace of chosen steps).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import ml_collections
from etils import epath

from albert_jax.train.reporting.metrics import ConsoleWriter, MetricsWriter, Progress
from albert_jax.train.reporting.profiler import StepProfiler
from albert_jax.train.reporting.trackers import open_trackers, report_to

__all__ = ["MetricsWriter", "Progress", "StepProfiler", "open_writer", "report_to"]


def open_writer(config: ml_collections.ConfigDict, workdir: epath.Path, progress: Progress,
                step: int, console_line: Callable[[Mapping[str, float]], list[str]], *,
                hparams: Mapping[str, Any]) -> MetricsWriter:
    """metrics.jsonl, the console (progress's line with the task's `console_line` parts),
    TensorBoard and the trackers of config.report_to (process 0), from `step` on; the trackers
    get `hparams` (the flattened config) once."""
    names = report_to(config)
    is_main = jax.process_index() == 0
    console = ConsoleWriter(lambda at, logged: progress.line(at, logged, console_line(logged)))
    writer = MetricsWriter(
        workdir, start_step=step, enabled=is_main, tensorboard="tensorboard" in names,
        writers=[console, *(open_trackers(config, workdir) if is_main else [])])
    writer.write_hparams(hparams)
    return writer
