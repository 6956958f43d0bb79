"""One trial of a sweep: `albert-jax finetune` of the sweep's config with the trial's values, in
a process of its own (nothing carried over from one trial to the next), in W/trials/<number>/:
an ordinary fine-tuning workdir that resumes, and that `evaluate`, `predict` and `export` read.

While it trains, every dev evaluation it writes to its metrics.jsonl goes to the pruner
(Optuna's `report`); a pruned run is stopped with SIGTERM (the loop saves a checkpoint and
ends). Its output goes to W/trials/<number>/output.log (appended: a resumed trial adds to it).
"""
from __future__ import annotations

import collections
import ctypes
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from etils import epath

from albert_jax import files
from albert_jax.finetune.sweep import plan as plan_lib
from albert_jax.finetune.sweep.plan import SweepPlan
from albert_jax.train import loop
from albert_jax.train import workdir as workdir_names

LOG_FILE = "output.log"
WATCH_SECONDS = 1.0  # how often a running trial's metrics.jsonl is read for new evaluations
_PR_SET_PDEATHSIG = 1


class TrialFailed(RuntimeError):
    """The trial's run ended with an error of its own (e.g. it diverged): recorded failed, with
    its reason, and the sweep goes on."""


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent dies (Linux): a killed worker leaves no run
    behind that holds its trial's folder."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def finetune_command(plan: SweepPlan, config_args: list[str], params: dict[str, Any],
                     folder: epath.Path) -> list[str]:
    """The trial's command line: the sweep's config flags, then the trial's values."""
    return [sys.executable, "-m", "albert_jax.cli", "finetune", *config_args,
            *plan_lib.trial_flags(plan, params), f"--workdir={folder}"]


def _watched_run(plan: SweepPlan, folder: epath.Path) -> epath.Path:
    """The run whose evaluations feed the pruner: the trial's, or its first seed's."""
    return folder if plan.trial_per_seed else workdir_names.seed_dir(folder, plan.seeds[0])


def dev_curve(plan: SweepPlan, run_dir: epath.Path) -> list[tuple[int, float]]:
    """(step, value) of the sweep's metric at every evaluation a run has logged so far."""
    path = run_dir / workdir_names.METRICS_LOG_FILE
    if not path.exists():
        return []
    curve = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if record.get("split") == plan.split and plan.metric in record:
            curve.append((int(record["step"]), float(record[plan.metric])))
    return curve


class _Output:
    """The run's output lines appended to its log (and kept: the last ones name an error)."""

    def __init__(self, process: subprocess.Popen, log: epath.Path, command: list[str]) -> None:
        self.last_lines: collections.deque[str] = collections.deque(maxlen=30)
        self._log = log
        files.append(log, "$ " + " ".join(command) + "\n")
        self._thread = threading.Thread(target=self._copy, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _copy(self, stream: Iterator[str]) -> None:
        for line in stream:
            self.last_lines.append(line.rstrip("\n"))
            files.append(self._log, line)

    def join(self) -> None:
        self._thread.join()

    def reason(self) -> str:
        errors = [line for line in self.last_lines if "error:" in line]
        return (errors or list(self.last_lines) or ["no output"])[-1].strip()


def run_trial(trial: Any, plan: SweepPlan, config_args: list[str], params: dict[str, Any],
              folder: epath.Path, workdir: str) -> list[dict[str, Any]]:
    """Runs the trial to its end (or until pruned: optuna.TrialPruned); returns its runs, one
    per seed: {"seed", "folder" (relative to the sweep's workdir), "value", "step"}.
    TrialFailed, with the user attribute "failure", for a run that ended with an error."""
    import optuna  # installed: the study that gave this trial is Optuna's

    command = finetune_command(plan, config_args, params, folder)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, preexec_fn=die_with_parent)  # noqa: PLW1509
    output = _Output(process, folder / LOG_FILE, command)
    watched = _watched_run(plan, folder)
    reported = -1
    try:
        while True:
            finished = process.poll() is not None
            for step, value in dev_curve(plan, watched):
                if step > reported:
                    trial.report(value, step)
                    reported = step
                    if not finished and trial.should_prune():
                        process.send_signal(signal.SIGTERM)  # a checkpoint, then the end
                        process.wait()
                        print(f"trial {trial.number}: pruned at step {step} (dev {plan.metric} "
                              f"{value:.4f})", flush=True)
                        raise optuna.TrialPruned(f"dev {plan.metric} {value:.4f} at step {step}")
            if finished:
                break
            time.sleep(WATCH_SECONDS)
    finally:
        if process.poll() is None:  # the worker is stopping: so is its run
            process.kill()
            process.wait()
        output.join()
    if process.returncode != 0:
        reason = output.reason()
        trial.set_user_attr("failure", reason)
        print(f"trial {trial.number}: failed: {reason}", flush=True)
        raise TrialFailed(reason)
    runs = trial_runs(plan, folder, workdir)
    trial.set_user_attr("runs", runs)
    return runs


def trial_runs(plan: SweepPlan, folder: epath.Path, workdir: str) -> list[dict[str, Any]]:
    """A finished trial's runs and their best dev value of the sweep's metric (at the
    checkpoint the task's selection kept, best.json)."""
    if plan.trial_per_seed:
        best = loop.read_best(folder)
        directories = [(folder, int(json.loads((folder / workdir_names.CONFIG_FILE)
                                               .read_text())["seed"]), best)]
    else:
        directories = [(workdir_names.seed_dir(folder, seed), seed,
                        loop.read_best(workdir_names.seed_dir(folder, seed)))
                       for seed in plan.seeds]
    return [{"seed": seed, "folder": str(directory.relative_to(epath.Path(workdir))),
             "value": float(best["metrics"][plan.split][plan.metric]), "step": int(best["step"])}
            for directory, seed, best in directories]
