"""Sweeps whose workers share a PostgreSQL server (tests/postgres_server.py, started here on
127.0.0.1), as workers on several machines do."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import optuna
import pytest

from cli_fixtures import start_cli
from configs import glue as glue_config
from finetune_fixtures import write_glue_task


def test_two_processes_share_one_study_on_the_server(postgres_url):
    """The server as Optuna's RDB storage: a study made here, trials added by two processes."""
    optuna.create_study(study_name="shared", storage=postgres_url, direction="minimize")
    worker = textwrap.dedent(f"""
        import os, optuna
        study = optuna.load_study(study_name="shared", storage={postgres_url!r})
        def objective(trial):
            trial.set_user_attr("pid", os.getpid())
            return trial.suggest_float("x", -1.0, 1.0) ** 2
        study.optimize(objective, n_trials=3)
    """)
    workers = [subprocess.Popen([sys.executable, "-c", worker]) for _ in range(2)]
    assert [process.wait(timeout=120) for process in workers] == [0, 0]

    trials = optuna.load_study(study_name="shared", storage=postgres_url).get_trials()
    assert sorted(trial.number for trial in trials) == list(range(6))
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)
    assert {trial.user_attrs["pid"] for trial in trials} == {process.pid for process in workers}
    assert all(trial.value == trial.params["x"] ** 2 for trial in trials)


def sweep_flags(pretrained: Path, tmp_path: Path, storage: str) -> list[str]:
    """`albert-jax sweep` of a 2 x 2 grid (two learning rates x two seeds) of tiny RTE runs of
    8 steps, a checkpoint every 2, on `storage`; a dead worker's trial is stale after 3 s."""
    data_path = write_glue_task(str(tmp_path / "glue_data"), "rte", num_train=16, num_dev=8,
                                num_test=2, seed=3)
    return ["sweep", "--config=configs/glue.py:task=rte,runlocal",
            f"--config.data.path={data_path}", f"--config.init_from={pretrained}",
            "--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
            "--config.total_steps=8", "--config.eval_every_steps=2",
            "--config.checkpoint_every_steps=2", "--config.log_every_steps=2",
            "--config.sweep.space={'optim.lr': [1e-4, 3e-4]}", "--config.sweep.seeds=2",
            f"--config.sweep.storage={storage}", "--config.sweep.heartbeat_seconds=1",
            f"--workdir={tmp_path / 'sweep'}"]


def trial_held_by(workdir: Path, pid: int) -> Path | None:
    """The trial folder whose lock the worker process `pid` holds, if any."""
    for lock in workdir.glob("trials/*/trial.lock"):
        try:
            if json.loads(lock.read_text())["pid"] == pid:
                return lock.parent
        except (OSError, ValueError, KeyError):
            continue  # being written or released
    return None


def has_checkpoint(folder: Path) -> bool:
    checkpoints = folder / "checkpoints"
    return checkpoints.is_dir() and any(path.name.isdigit() for path in checkpoints.iterdir())


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout} s for {what}")


@pytest.mark.slow
def test_two_machines_share_a_sweep_and_a_killed_ones_trial_is_rerun(postgres_url,
                                                                     pretrained_tiny, tmp_path):
    """Machine B (one worker) takes a trial and is SIGKILLed after its first checkpoint;
    machine A (two worker processes) runs the rest of the grid, finds B's trial stale by
    Optuna's heartbeat and runs it again in its folder, where it resumes."""
    flags = sweep_flags(pretrained_tiny, tmp_path, postgres_url)
    workdir = tmp_path / "sweep"
    machine_b = start_cli(*flags)  # its one worker is the command's own process
    try:
        held = wait_for(lambda: trial_held_by(workdir, machine_b.pid), "machine B's trial")
        machine_a = start_cli(*flags, "--workers=2", stdout=subprocess.PIPE, text=True)
        wait_for(lambda: has_checkpoint(held), f"a checkpoint in {held}")
    finally:
        machine_b.kill()
    assert machine_b.wait() == -signal.SIGKILL
    output, _ = machine_a.communicate(timeout=600)
    assert machine_a.returncode == 0, output[-3000:]

    record = json.loads((workdir / "sweep.json").read_text())
    trials = optuna.load_study(study_name=record["study_name"], storage=postgres_url).get_trials()
    done = [trial for trial in trials if trial.state == optuna.trial.TrialState.COMPLETE]
    # Every configuration x seed ran to the end exactly once, each in a folder of its own.
    seed = glue_config.get_config("task=rte").seed  # sweep.seeds=2: seed and seed + 1
    assert sorted((trial.params["optim.lr"], trial.params["seed"]) for trial in done) == [
        (1e-4, seed), (1e-4, seed + 1), (3e-4, seed), (3e-4, seed + 1)]
    folders = sorted(trial.user_attrs["folder"] for trial in done)
    assert len(set(folders)) == 4 and sorted(path.name for path in
                                             (workdir / "trials").iterdir()) == [
        folder.split("/")[1] for folder in folders]
    # B's trial: failed by the heartbeat, queued again with its values, rerun in its folder.
    killed_number = int(held.name)
    killed = next(trial for trial in trials if trial.number == killed_number)
    assert killed.state == optuna.trial.TrialState.FAIL
    rerun = next(trial for trial in done if trial.user_attrs["folder"] == f"trials/{held.name}")
    assert rerun.system_attrs["failed_trial"] == killed_number
    assert rerun.params == killed.params
    log = (held / "output.log").read_text()
    assert log.count("$ ") == 2 and "Resuming from the checkpoint at step" in log
    evaluated = [json.loads(line)["step"] for line in (held / "metrics.jsonl").read_text()
                 .splitlines() if json.loads(line).get("split") == "dev"]
    assert evaluated == [2, 4, 6, 8]
    assert (workdir / "sweep.csv").exists() and (workdir / "best_trial.json").exists()
    print(output)
