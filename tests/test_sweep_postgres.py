"""Sweeps whose workers share a PostgreSQL server (tests/postgres_server.py, started here on
127.0.0.1), as workers on several machines do."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import optuna


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
