"""`albert-jax sweep` on a tiny classification task written by the test (a word at the start of
each text says its label, so a good learning rate learns it in a few steps): two workers on a
journal file sharing a 2 x 2 grid, one of them killed mid-trial and the sweep run again; the
median pruner stopping a learning rate that learns nothing; a diverging trial recorded failed;
the pictures; one line for each bad input, with nothing started."""
import csv
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import optuna
import pytest
from etils import epath

from albert_jax.cli import check_command_line
from albert_jax.errors import ConfigError
from albert_jax.finetune.sweep import pictures
from albert_jax.finetune.sweep import plan as plan_lib
from albert_jax.finetune.sweep import study as study_lib
from cli_fixtures import cli, start_cli
from sweep_fixtures import (
    TOTAL_STEPS,
    classification_task_flags,
    run_records,
    running_trials,
)

# The learning rates of every sweep test here and in test_sweep_postgres.py: a trial's train
# step is compiled for its learning rate (and step count), so shared ones hit the compilation
# cache.
GOOD_LR, BAD_LR = 3e-3, 1e-6
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def task_flags(tmp_path_factory) -> list[str]:
    """The config flags of a tiny classification task on CSV files (sweep_fixtures.py)."""
    return classification_task_flags(tmp_path_factory.mktemp("sweep_data"))


def _study(workdir: Path) -> optuna.Study:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(workdir / study_lib.JOURNAL_FILE)))
    name = json.loads((workdir / study_lib.RECORD_FILE).read_text())["study_name"]
    return optuna.load_study(study_name=name, storage=storage)


@pytest.mark.slow
def test_two_workers_a_killed_one_and_a_rerun_run_every_grid_point_once(task_flags, tmp_path):
    workdir = tmp_path / "sweep"
    sweep = ["sweep", *task_flags, f"--workdir={workdir}", "--config.sweep.seeds=2",
             f"--config.sweep.space={{'optim.lr': [{GOOD_LR}, {BAD_LR}]}}"]
    with (tmp_path / "sweep.log").open("w") as log:
        command = start_cli(*sweep, "--workers=2", stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 300
            running = None
            while running is None and time.monotonic() < deadline:
                running = next(iter(running_trials(workdir).items()), None)
                time.sleep(0.05)
            assert running is not None, (tmp_path / "sweep.log").read_text()[-3000:]
            killed, worker = running
            assert worker != command.pid  # a worker process of the command
            os.kill(worker, signal.SIGKILL)  # its finetune process dies with it
            steps_when_killed = max(record["step"] for record in run_records(killed))
            # The other worker runs the rest, the killed one's trial too; the command says
            # that a worker stopped.
            assert command.wait(timeout=900) == 1
        finally:
            command.kill()
            command.wait()
    assert "1 of 2 workers stopped" in (tmp_path / "sweep.log").read_text()
    assert (workdir / "sweep.md").exists()  # written before the command said so
    assert steps_when_killed < TOTAL_STEPS
    rerun = cli(*sweep)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "trial " not in rerun.stdout  # nothing left to run

    # Every configuration x seed ran once, to the end; the killed trial, queued again, resumed
    # in its own folder.
    trials = _study(workdir).get_trials()
    complete = [trial for trial in trials if trial.state == optuna.trial.TrialState.COMPLETE]
    points = sorted((trial.params["optim.lr"], trial.params["seed"]) for trial in complete)
    assert points == sorted((lr, seed) for lr in (GOOD_LR, BAD_LR) for seed in (12345, 12346))
    folders = {trial.user_attrs["folder"] for trial in complete}
    assert len(folders) == 4 and f"trials/{killed.name}" in folders
    assert [trial.state for trial in trials].count(optuna.trial.TrialState.FAIL) == 1  # the killed
    for folder in folders:
        records = run_records(workdir / folder)
        train_steps = [record["step"] for record in records if "split" not in record]
        assert train_steps == list(range(8, TOTAL_STEPS + 1, 8)), folder
        resumed = (workdir / folder / "output.log").read_text().count("Resuming from the checkpoint")
        assert resumed == (1 if folder == f"trials/{killed.name}" else 0), folder

    # The killed trial's records equal those of the same run never killed.
    killed_trial = next(trial for trial in complete
                        if trial.user_attrs["folder"] == f"trials/{killed.name}")
    reference = tmp_path / "reference"
    result = cli("finetune", *task_flags, f"--config.optim.lr={killed_trial.params['optim.lr']}",
                 f"--config.seed={killed_trial.params['seed']}", f"--workdir={reference}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert run_records(killed) == run_records(reference)

    # The table's statistics are the trials' own best dev accuracies.
    with (workdir / "sweep.csv").open() as file:
        rows = {float(row["optim.lr"]): row for row in csv.DictReader(file)}
    for lr in (GOOD_LR, BAD_LR):
        values = [json.loads((workdir / trial.user_attrs["folder"] / "best.json").read_text())
                  ["accuracy"] for trial in complete if trial.params["optim.lr"] == lr]
        assert float(rows[lr]["median"]) == pytest.approx(statistics.median(values), abs=1e-12)
        assert float(rows[lr]["max"]) == max(values) and rows[lr]["runs"] == "2"
    best = json.loads((workdir / "best_trial.json").read_text())
    best_median = max(float(row["median"]) for row in rows.values())
    assert best["value"] == pytest.approx(best_median)
    for name in ("sweep_grid.png", "sweep_seeds.png", "sweep_curves.png"):
        assert (workdir / name).read_bytes()[:8] == PNG_SIGNATURE
        assert (workdir / name).stat().st_size > 5000

    # evaluate --workdir=W: the best configuration's best run.
    result = cli("evaluate", f"--workdir={workdir}")
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((workdir / "predictions/dev/metrics.json").read_text())
    best_run = json.loads((workdir / best["folder"] / "best.json").read_text())
    assert (scores["step"], scores["accuracy"]) == (best_run["step"],
                                                    pytest.approx(best_run["accuracy"]))


@pytest.mark.slow
def test_the_median_pruner_stops_a_bad_learning_rate_and_a_diverged_trial_fails(task_flags,
                                                                               tmp_path):
    workdir = tmp_path / "sweep"
    # The grid sampler's order (shuffled with config.seed) runs the good learning rate first.
    result = cli("sweep", *task_flags, f"--workdir={workdir}", "--config.sweep.pruner=median",
                 f"--config.sweep.space={{'optim.lr': [{GOOD_LR}, {BAD_LR}, 1e30]}}")
    assert result.returncode == 0, result.stderr[-3000:]
    trials = {trial.params["optim.lr"]: trial for trial in _study(workdir).get_trials()}
    assert trials[GOOD_LR].number < trials[BAD_LR].number, "the test needs the good one first"
    states = optuna.trial.TrialState
    assert trials[GOOD_LR].state == states.COMPLETE
    assert trials[BAD_LR].state == states.PRUNED
    pruned_steps = [record["step"] for record in run_records(
        workdir / trials[BAD_LR].user_attrs["folder"])]
    assert max(pruned_steps) < TOTAL_STEPS  # stopped early
    assert trials[1e30].state == states.FAIL
    assert "non-finite" in trials[1e30].user_attrs["failure"]
    table = (workdir / "sweep.md").read_text()
    assert "non-finite" in table
    with (workdir / "sweep.csv").open() as file:
        rows = {float(row["optim.lr"]): row for row in csv.DictReader(file)}
    assert (rows[BAD_LR]["pruned"], rows[1e30]["failed"]) == ("1", "1")


@pytest.mark.parametrize("flag, message", [
    ("--config.sweep.space={'optim.lrr': [1e-5]}", "'optim.lrr', which is not a key"),
    ("--config.sweep.space={'optim.lr': 'loguniform:1e-5'}", "give a list of values or a range"),
    ("--config.sweep.space={'optim.lr': 'uniform:3:1'}", "needs LOW < HIGH"),
    ("--config.sweep.space={'batch_size': 'int:a:8'}", "LOW and HIGH must be integers"),
    ("--config.sweep.storage=sqlite:////nonexistent/folder/sweep.db", "cannot be opened"),
])
def test_bad_input_is_one_line_and_starts_nothing(task_flags, tmp_path, flag, message):
    workdir = tmp_path / "sweep"
    arguments = ["sweep", *task_flags, f"--workdir={workdir}", flag]
    if "sweep.space" not in flag:
        arguments.append("--config.sweep.space={'optim.lr': [1e-5]}")
    result = cli(*arguments)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert not workdir.exists()


def _plan(task_flags: list[str], *flags: str) -> plan_lib.SweepPlan:
    """The plan of `albert-jax sweep` with the task's flags and `flags`, as the command reads it."""
    return plan_lib.read_plan(check_command_line(["albert-jax", "sweep", *task_flags, *flags]))


def test_the_plan_grid_ranges_and_trial_flags(task_flags):
    grid = _plan(task_flags, "--config.sweep.space={'optim.lr': [1e-5, 2e-5], 'batch_size': [16]}",
                 "--config.sweep.seeds=3", "--config.seed=7")
    assert (grid.sampler, grid.trials, grid.seeds, grid.metric) == ("grid", 2, (7, 8, 9),
                                                                    "accuracy")
    assert grid.grid() == {"optim.lr": [1e-5, 2e-5], "batch_size": [16], "seed": [7, 8, 9]}
    assert plan_lib.trial_flags(grid, {"optim.lr": 2e-5, "batch_size": 16, "seed": 8}) == [
        "--config.optim.lr=2e-05", "--config.batch_size=16", "--config.seed=8"]
    tpe = _plan(task_flags, '--config.sweep.space={"optim.lr": "loguniform:1e-6:1e-4"}',
                "--config.sweep.trials=5", "--config.sweep.seeds=2", "--config.seed=7")
    assert (tpe.sampler, tpe.trials, tpe.dimensions[0].kind) == ("tpe", 5, "loguniform")
    assert plan_lib.trial_flags(tpe, {"optim.lr": 3e-5}) == [
        "--config.optim.lr=3e-05", "--config.seed=7", "--config.seeds=2"]
    # The same command with another log interval or storage joins the same study; another
    # grid or step count makes another.
    same = [_plan(task_flags, "--config.sweep.space={'optim.lr': [1e-5, 2e-5]}", *flags).study_name
            for flags in ([], ["--config.log_every_steps=3"],
                          ["--config.sweep.storage=sqlite:////tmp/x.db"])]
    other = [_plan(task_flags, "--config.sweep.space={'optim.lr': [1e-5, 3e-5]}").study_name,
             _plan(task_flags, "--config.sweep.space={'optim.lr': [1e-5, 2e-5]}",
                   "--config.total_steps=7").study_name]
    assert len(set(same)) == 1 and not set(other) & set(same) and other[0] != other[1]
    for flags, message in (
            (["--config.sweep.space={'optim.lr': 'uniform:0:1'}"], "needs sweep.trials"),
            (["--config.sweep.space={'optim.lr': 'uniform:0:1'}", "--config.sweep.sampler=grid"],
             "is a range"),
            (["--config.sweep.space={'seed': [1, 2]}"], "the sweep sets the seeds"),
            (["--config.sweep.space={'optim.lr': [1e-5]}", "--config.sweep.metric=f1"],
             "not a dev metric"),
            (["--config.sweep.space={'optim.lr': [1e-5]}", "--config.sweep.objective=max"],
             "median, mean")):
        with pytest.raises(ConfigError, match=message):
            _plan(task_flags, *flags)


def test_workers_get_equal_shares_of_the_gpus_and_no_more_workers_than_gpus(monkeypatch):
    assert study_lib.gpu_shares(4, [str(gpu) for gpu in range(8)]) == ["0,1", "2,3", "4,5", "6,7"]
    assert study_lib.gpu_shares(2, ["3", "5", "6"]) == ["3", "5"]  # the odd one left unused
    assert study_lib.gpu_shares(3, []) == [None, None, None]  # CPU or TPU: the environment as is
    with pytest.raises(ConfigError, match=r"--workers=3 is more than the 2 GPU\(s\).*at most "
                                          r"--workers=2"):
        study_lib.gpu_shares(3, ["0", "1"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 7")
    assert study_lib.visible_gpus() == ["2", "7"]


def test_without_optuna_one_line_says_how_to_install_it():
    with (mock.patch.dict(sys.modules, {"optuna": None}),
          pytest.raises(ImportError, match=r"pip install 'albert-jax\[sweep\]'")):
        study_lib.optuna_module()


def test_two_list_dimensions_make_a_heat_map(task_flags, tmp_path):
    plan = _plan(task_flags, "--config.sweep.space={'optim.lr': [1e-5, 2e-5], 'batch_size': [8, 16]}")
    rows = [{"params": {"optim.lr": lr, "batch_size": batch}, "folders": [],
             "runs": [{"seed": 12345, "folder": "trials/0", "value": value, "step": 8}],
             "objective": value}
            for (lr, batch), value in zip([(1e-5, 8), (1e-5, 16), (2e-5, 8)], [0.5, 0.75, 0.25])]
    written = pictures.write_pictures(plan, rows, epath.Path(tmp_path))
    assert [Path(path).name for path in written] == [
        "sweep_grid.png", "sweep_seeds.png", "sweep_curves.png"]
    from matplotlib import image
    heat = image.imread(tmp_path / "sweep_grid.png")[..., :3]
    # a heat map with a colour bar: many colours, not a blank figure
    assert heat.shape[0] > 100 and len({tuple(pixel) for pixel in heat.reshape(-1, 3)}) > 50
