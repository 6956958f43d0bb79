"""The experiment trackers a run reports to besides metrics.jsonl: `config.report_to`.

A comma-separated list of tensorboard, mlflow, wandb, or none. Only process 0 reports. Each
tracker runs in its own thread behind a queue, so a slow or unreachable server never stalls a
step; a tracker that raises (server down, bad credentials) is dropped with one warning line
naming it and why, and metrics.jsonl and TensorBoard go on. A tracker whose package is not
installed is a one-line ConfigError at the start, before anything is written.
"""
from __future__ import annotations

import importlib.util
import queue
import threading
from typing import Any, Callable, Mapping

import ml_collections
from absl import logging
from etils import epath

from albert_jax.errors import ConfigError
from albert_jax.train.reporting import metrics as metrics_lib

REPORT_TO = ("tensorboard", "mlflow", "wandb", "none")
# The package each tracker imports, and the extra that installs it.
PACKAGES = {"mlflow": ("mlflow", "albert-jax[mlflow]"), "wandb": ("wandb", "albert-jax[wandb]")}
QUEUE_SIZE = 10_000  # calls waiting for a slow tracker before it is dropped
CLOSE_TIMEOUT_S = 60.0  # the most the end of a run waits for a tracker to send what it holds


def report_to(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The names in config.report_to; ConfigError for an unknown one or a tracker whose
    package is missing."""
    names = tuple(name.strip() for name in config.get("report_to", "tensorboard").split(",")
                  if name.strip())
    for name in names:
        if name not in REPORT_TO:
            raise ConfigError(f"config report_to={config.report_to!r}: unknown {name!r}; "
                              f"choose from {', '.join(REPORT_TO)} (comma-separated)")
    if "none" in names and len(names) > 1:
        raise ConfigError(f"config report_to={config.report_to!r}: 'none' goes alone")
    for name in names:
        if name in PACKAGES and not _installed(PACKAGES[name][0]):
            raise ConfigError(f"config report_to={config.report_to!r}: {name} is not installed; "
                              f"pip install '{PACKAGES[name][1]}'")
    return names


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # sys.modules[module] = None: blocked
        return False


def open_trackers(config: ml_collections.ConfigDict,
                  workdir: epath.Path) -> list[metrics_lib.MetricWriter]:
    """A guarded writer per tracker in config.report_to (not tensorboard: MetricsWriter's)."""
    trackers: list[metrics_lib.MetricWriter] = []
    for name in report_to(config):
        if name == "mlflow":
            from albert_jax.train.reporting import mlflow_writer  # imports mlflow: only when asked
            trackers.append(Guarded(name, lambda: mlflow_writer.MlflowWriter(config, workdir)))
        elif name == "wandb":
            from albert_jax.train.reporting import wandb_writer
            trackers.append(Guarded(name, lambda: wandb_writer.WandbWriter(config, workdir)))
    return trackers


class Guarded(metrics_lib.MetricWriter):
    """A tracker built and called in its own thread: calls are queued and return at once.
    Its first failure ends it with one warning line; training never waits on it, except up
    to CLOSE_TIMEOUT_S at `close` for what it still holds."""

    def __init__(self, name: str, make: Callable[[], metrics_lib.MetricWriter]) -> None:
        self.name = name
        self._calls: queue.Queue = queue.Queue(QUEUE_SIZE)
        self._failed = False
        self._thread = threading.Thread(target=self._run, args=(make,), daemon=True,
                                        name=f"tracker-{name}")
        self._thread.start()

    def _fail(self, why: str) -> None:
        if not self._failed:
            self._failed = True
            logging.warning("report_to %s: stopped reporting (%s); metrics.jsonl and "
                            "TensorBoard go on", self.name, why)

    def _run(self, make: Callable[[], metrics_lib.MetricWriter]) -> None:
        try:
            writer = make()
        except Exception as error:  # pylint: disable=broad-except
            self._fail(f"{type(error).__name__}: {error}")
            writer = None
        while True:
            call = self._calls.get()
            if call is None:
                return
            if writer is None or self._failed:
                continue
            method, arguments = call
            try:
                getattr(writer, method)(*arguments)
            except Exception as error:  # pylint: disable=broad-except
                self._fail(f"{type(error).__name__} in {method}: {error}")

    def _put(self, method: str, *arguments: Any) -> None:
        if self._failed:
            return
        try:
            self._calls.put_nowait((method, arguments))
        except queue.Full:
            self._fail(f"{QUEUE_SIZE} calls waiting: the tracker does not keep up")

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        self._put("write_scalars", step, dict(scalars), split)

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        self._put("write_hparams", dict(hparams))

    def write_summary(self, step: int, summary: Mapping[str, float]) -> None:
        self._put("write_summary", step, dict(summary))

    def flush(self) -> None:
        pass  # close waits for the queue

    def close(self) -> None:
        self._put("close")
        try:
            self._calls.put(None, timeout=CLOSE_TIMEOUT_S)
        except queue.Full:
            pass
        self._thread.join(CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            self._fail(f"still sending after {CLOSE_TIMEOUT_S:.0f} s at the end; left behind")
