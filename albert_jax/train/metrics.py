"""Where metrics go: the console, `metrics.jsonl` and TensorBoard event files (host 0 only).

TensorBoard files are written with tensorboardX, which needs no TensorFlow.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Mapping

import jax
from etils import epath

from albert_jax.train import workdir as workdir_names


class MetricsWriter:
    """Writes one record per logged step. `metrics.jsonl` gets one JSON object per line."""

    def __init__(self, workdir: str, *, enabled: bool | None = None) -> None:
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self._jsonl = None
        self._tensorboard = None
        if self.enabled:
            directory = epath.Path(workdir)
            directory.mkdir(parents=True, exist_ok=True)
            self._jsonl = (directory / workdir_names.METRICS_FILE).open("a")
            from tensorboardX import SummaryWriter  # imported here: only host 0 writes
            self._tensorboard = SummaryWriter(os.fspath(directory / "tensorboard"))

    def write(self, step: int, metrics: Mapping[str, float], split: str | None = None) -> None:
        """Appends {"step": step, **metrics} and flushes. Evaluation records carry the eval
        split, {"step": step, "split": "dev", **metrics}; TensorBoard tags are "<split>/<key>"."""
        if not self.enabled:
            return
        values = {key: float(value) for key, value in metrics.items()}
        record = {"step": int(step), **({"split": split} if split else {}), **values}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for key, value in values.items():
            if math.isfinite(value):
                tag = f"{split}/{key}" if split else key
                self._tensorboard.add_scalar(tag, value, global_step=int(step))
        self._tensorboard.flush()

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            self._tensorboard.close()


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
