"""Where metrics go: the console, `metrics.jsonl` and TensorBoard event files (host 0 only).

Each record is added to the end of its files at once (`files.append`: on a gs:// workdir, a
compose onto the object), so a run killed at any moment keeps every record written before it.
The event files' records are encoded by tensorboard_events.py, not written by
tensorboardX's SummaryWriter: on gs:// that uploads the whole file again at every flush, from a
background thread that ends at its first failed upload (an outage), after which the run blocks
once its queue of 10 events is full.
"""
from __future__ import annotations

import abc
import json
import math
import os
import socket
import time
from typing import Any, Callable, Mapping, Sequence

import jax
from etils import epath

from albert_jax import files
from albert_jax.train import workdir as workdir_names
from albert_jax.train.reporting import tensorboard_events


class MetricWriter(abc.ABC):
    """Where one run's metrics go (the shape of clu's MetricWriter, without its TensorFlow)."""

    @abc.abstractmethod
    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        """The values of one logged step; `split` names an evaluation's split."""

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        """The run's flattened config, once at the start."""

    def write_summary(self, step: int, summary: Mapping[str, float]) -> None:
        """The run's outcome at its end (best.json's metrics, the last evaluation)."""

    def flush(self) -> None:
        """Everything written so far reaches its destination."""

    def close(self) -> None:
        """No more writes."""


class JsonlWriter(MetricWriter):
    """`metrics.jsonl`: one JSON object per line, {"step": s, **metrics}; evaluation records
    carry their split, {"step": s, "split": "dev", **metrics}."""

    def __init__(self, workdir: str | epath.Path) -> None:
        self._path = epath.Path(workdir) / workdir_names.METRICS_LOG_FILE

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        record = {"step": int(step), **({"split": split} if split else {}), **scalars}
        files.append(self._path, json.dumps(record) + "\n")


class TensorBoardWriter(MetricWriter):
    """One event file per run started in <workdir>/tensorboard/; tags are "<split>/<key>"."""

    def __init__(self, workdir: str | epath.Path, *, start_step: int = 0) -> None:
        """start_step: the step the run starts from (a resumed run: its checkpoint's).

        The file opens with a SessionLog START at start_step + 1, the first step this run
        computes: TensorBoard's reader drops every point at or past a START's step that earlier
        files hold, so the points an earlier run logged after its checkpoint go (as
        `metrics.jsonl` has lost them) and those up to the checkpoint, start_step's included,
        stay, each once."""
        directory = epath.Path(workdir) / workdir_names.TENSORBOARD_SUBDIR
        directory.mkdir(parents=True, exist_ok=True)
        self._events = directory / (
            f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}")
        now = time.time()
        first_step = start_step + 1
        files.append(self._events, tensorboard_events.file_version_record(now, first_step)
                     + tensorboard_events.session_start_record(now, first_step))

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        now = time.time()
        events = b"".join(
            tensorboard_events.scalar_record(now, int(step), f"{split}/{key}" if split else key,
                                             value)
            for key, value in scalars.items() if math.isfinite(value))
        if events:
            files.append(self._events, events)


class ConsoleWriter(MetricWriter):
    """The console: `train_line(step, metrics)` for a train step, "<split> at step s: ..." for
    an evaluation."""

    def __init__(self, train_line: Callable[[int, Mapping[str, float]], str]) -> None:
        self._train_line = train_line

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        if split is None:
            print(self._train_line(step, scalars), flush=True)
        elif scalars:
            print(f"{split} at step {step}: " + ", ".join(
                f"{key} {value:.4f}" for key, value in scalars.items()), flush=True)


class MetricsWriter:
    """Every writer of a run (host 0 only): metrics.jsonl always, then `writers` (console,
    TensorBoard, trackers) in order. A tracker's failure is its own (trackers.py)."""

    def __init__(self, workdir: str | epath.Path, *, start_step: int = 0,
                 enabled: bool | None = None, tensorboard: bool = True,
                 writers: Sequence[MetricWriter] = ()) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.writers: list[MetricWriter] = []
        if self.enabled:
            self.writers = [JsonlWriter(workdir), *(
                [TensorBoardWriter(workdir, start_step=start_step)] if tensorboard else []),
                *writers]

    def write(self, step: int, metrics: Mapping[str, float], split: str | None = None) -> None:
        values = {key: float(value) for key, value in metrics.items()}
        for writer in self.writers:
            writer.write_scalars(step, values, split)

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        for writer in self.writers:
            writer.write_hparams(hparams)

    def write_summary(self, step: int, summary: Mapping[str, float]) -> None:
        for writer in self.writers:
            writer.write_summary(step, summary)

    def close(self) -> None:
        for writer in self.writers:
            writer.flush()
            writer.close()


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """Throughput, MFU and ETA between two logged steps, and the console line."""

    def __init__(self, *, total_steps: int, batch_size: int, peak_flops: float) -> None:
        self.total_steps = total_steps
        self.batch_size = batch_size
        self.peak_flops = peak_flops  # over all devices
        self._last_step: int | None = None
        self._last_time = 0.0
        self._flops = self._tokens = 0.0

    def start(self, step: int) -> None:
        self._restart(step, time.perf_counter())

    def _restart(self, step: int, now: float) -> None:
        self._last_step, self._last_time = step, now
        self._flops = self._tokens = 0.0

    def count(self, *, flops: float, tokens: int) -> None:
        """One step done: its model FLOPs and the positions it ran (padding included), which
        differ between steps when batches run at their length bucket."""
        self._flops += flops
        self._tokens += tokens

    def measure(self, step: int) -> dict[str, float]:
        """steps/s, examples/s, tokens/s, mfu and eta_seconds since the last call."""
        now = time.perf_counter()
        steps = step - (self._last_step if self._last_step is not None else step)
        elapsed = max(now - self._last_time, 1e-9)
        flops_done, tokens_done = self._flops, self._tokens
        self._restart(step, now)
        if steps <= 0:
            return {}
        steps_per_second = steps / elapsed
        return {
            "steps_per_second": steps_per_second,
            "examples_per_second": steps_per_second * self.batch_size,
            "tokens_per_second": tokens_done / elapsed,
            "mfu": flops_done / elapsed / self.peak_flops,
            "eta_seconds": (self.total_steps - step) / steps_per_second,
        }

    def line(self, step: int, metrics: Mapping[str, float], task_parts: list[str]) -> str:
        """One console line: step, the task's losses and accuracies (`task_parts`), lr, speed,
        MFU, ETA."""
        parts = [f"step {step:>7d}/{self.total_steps}", *task_parts,
                 f"lr {metrics['learning_rate']:.3g}"]
        if "steps_per_second" in metrics:
            parts += [f"{metrics['steps_per_second']:.2f} steps/s",
                      f"{metrics['examples_per_second']:.1f} ex/s",
                      f"{metrics['tokens_per_second']:.0f} tok/s",
                      *([f"MFU {100 * metrics['mfu']:.1f}%"] if metrics["mfu"] else []),
                      f"ETA {format_duration(metrics['eta_seconds'])}"]
        return " | ".join(parts)
