"""Sweeps whose workers share a PostgreSQL server (tests/postgres_server.py, started here on
127.0.0.1), as workers on several machines do."""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap
import time

import optuna
import pytest

from albert_jax.finetune.sweep import study as study_lib
from cli_fixtures import REPO, start_cli
from sweep_fixtures import (
    TOTAL_STEPS,
    classification_task_flags,
    run_records,
    running_trials,
)


@pytest.mark.slow
def test_workers_open_a_new_database_at_once_and_share_one_study(postgres_url, tmp_path):
    """The server as the sweep's storage (study.open_storage: Optuna's RDBStorage): three
    processes open the empty database at the same moment (each creates Optuna's tables, which
    PostgreSQL refuses to all but one) and add trials to one study."""
    plan = study_lib.SweepPlan(
        dimensions=(), seeds=(0,), sampler="random", trials=6, pruner="none", metric="accuracy",
        split="dev", objective="median", storage=postgres_url, heartbeat_seconds=1,
        study_name="shared", eval_every_steps=1, total_steps=1)
    worker = textwrap.dedent(f"""
        import os, pathlib, time, optuna
        from albert_jax.finetune.sweep import study as study_lib
        ready = pathlib.Path({str(tmp_path)!r})
        (ready / f"ready-{{os.getpid()}}").touch()
        while len(list(ready.glob("ready-*"))) < 3:  # the three open the database together
            time.sleep(0.01)
        storage = study_lib.open_storage(study_lib.SweepPlan(**{dataclasses.asdict(plan)!r}),
                                         {str(tmp_path)!r})
        study = optuna.create_study(study_name="shared", storage=storage, load_if_exists=True)
        def objective(trial):
            trial.set_user_attr("pid", os.getpid())
            return trial.suggest_float("x", -1.0, 1.0) ** 2
        study.optimize(objective, n_trials=2)
    """)
    workers = [subprocess.Popen([sys.executable, "-c", worker], cwd=REPO, stderr=subprocess.PIPE,
                                text=True) for _ in range(3)]
    errors = [process.communicate(timeout=120)[1] for process in workers]
    assert [process.returncode for process in workers] == [0, 0, 0], errors

    trials = optuna.load_study(study_name="shared", storage=postgres_url).get_trials()
    assert sorted(trial.number for trial in trials) == list(range(6))
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)
    assert {trial.user_attrs["pid"] for trial in trials} == {process.pid for process in workers}
    assert all(trial.value == trial.params["x"] ** 2 for trial in trials)


@pytest.fixture(scope="module")
def task_flags(tmp_path_factory) -> list[str]:
    """The config flags of a tiny classification task on CSV files (sweep_fixtures.py)."""
    return classification_task_flags(tmp_path_factory.mktemp("sweep_data"))


@pytest.mark.slow
def test_two_machines_share_a_sweep_and_a_killed_ones_trial_is_rerun(task_flags, postgres_url,
                                                                     tmp_path):
    """Two `albert-jax sweep` commands on one database and workdir, as two machines would run
    them: A with two worker processes, B with one, SIGKILLed mid-trial. A runs the rest of the
    2 x 2 grid, finds B's trial stale by Optuna's heartbeat (1 s beats, stale after 3) and runs
    it again in its folder, where it resumes from its checkpoint."""
    workdir = tmp_path / "sweep"
    sweep = ["sweep", *task_flags, f"--workdir={workdir}", "--config.sweep.seeds=2",
             "--config.sweep.space={'optim.lr': [3e-3, 1e-6]}",  # test_sweep.py's: compiled once
             f"--config.sweep.storage={postgres_url}", "--config.sweep.heartbeat_seconds=1"]
    logs = {name: open(tmp_path / f"machine_{name}.log", "w") for name in "ab"}  # noqa: SIM115
    machine_a = start_cli(*sweep, "--workers=2", stdout=logs["a"], stderr=logs["a"])
    machine_b = start_cli(*sweep, stdout=logs["b"], stderr=logs["b"])  # its worker: itself
    try:
        deadline = time.monotonic() + 300
        killed = None
        while killed is None and time.monotonic() < deadline and machine_b.poll() is None:
            killed = next((folder for folder, worker in running_trials(workdir).items()
                           if worker == machine_b.pid), None)
            time.sleep(0.05)
        assert killed is not None, (tmp_path / "machine_b.log").read_text()[-3000:]
        machine_b.send_signal(signal.SIGKILL)  # its finetune process dies with it
        machine_b.wait()
        assert machine_a.wait(timeout=600) == 0, (tmp_path / "machine_a.log").read_text()[-3000:]
    finally:
        for machine in (machine_a, machine_b):
            machine.kill()
            machine.wait()
        for log in logs.values():
            log.close()

    name = json.loads((workdir / study_lib.RECORD_FILE).read_text())["study_name"]
    trials = optuna.load_study(study_name=name, storage=postgres_url).get_trials()
    states = optuna.trial.TrialState
    complete = [trial for trial in trials if trial.state == states.COMPLETE]
    # Every configuration x seed ran to the end once, each in a folder of its own.
    assert sorted((trial.params["optim.lr"], trial.params["seed"]) for trial in complete) == [
        (1e-6, 12345), (1e-6, 12346), (3e-3, 12345), (3e-3, 12346)]
    folders = sorted(trial.user_attrs["folder"] for trial in complete)
    assert folders == sorted(f"trials/{path.name}" for path in (workdir / "trials").iterdir())
    # B's trial: failed by the heartbeat, queued again with its values, rerun in its folder.
    failed = [trial for trial in trials if trial.state == states.FAIL]
    assert [trial.number for trial in failed] == [int(killed.name)]
    rerun = next(trial for trial in complete if trial.user_attrs["folder"] == f"trials/{killed.name}")
    assert rerun.system_attrs["failed_trial"] == failed[0].number
    assert rerun.params == failed[0].params
    assert (killed / "output.log").read_text().count("Resuming from the checkpoint") == 1
    train_steps = [record["step"] for record in run_records(killed) if "split" not in record]
    assert train_steps == list(range(8, TOTAL_STEPS + 1, 8))  # each step once: resumed, not redone
    # The database URL (a password, where it has one) is in no trial's command line or config.
    for folder in (workdir / "trials").iterdir():
        assert postgres_url not in (folder / "output.log").read_text()
        assert postgres_url not in (folder / "config.json").read_text()
