"""Watching a run (docs/watching.md): report_to=mlflow on a SQLite store matches metrics.jsonl,
and a run killed with SIGKILL and resumed still has one MLflow run with one value per step, and
TensorBoard (read by its own reader) every point of metrics.jsonl once; W&B offline keeps its
run id across a resume, and its files go to WANDB_DIR when set; a tracker that raises or is not
installed never stops training; config.profile traces the chosen steps."""
import gzip
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune.demo import demo_sentences
from albert_jax.train import workdir as workdir_names
from cli_fixtures import (
    REPO,
    cli,
    config_flags,
    one_device_environment,
    start_cli,
    tensorboard_points,
)

# Measured, so they differ between a run and its resumed re-run of the same steps.
TIMING = ("steps_per_second", "examples_per_second", "tokens_per_second", "mfu", "eta_seconds")
WARNING = "stopped reporting"
STEPS = 10


@pytest.fixture(scope="module")
def task_files(tmp_path_factory) -> dict[str, str]:
    """A tiny SentencePiece model and a three-class CSV task: the flags of a tiny fine-tune."""
    root = tmp_path_factory.mktemp("task")
    spm = tokenizer_lib.train(demo_sentences(), str(root / "spm.model"), vocab_size=200)
    sentences = demo_sentences()
    for name, count, offset in (("train", 48, 0), ("dev", 13, 100)):
        rows = [f'"{sentences[(index * 7 + offset) % len(sentences)]}",{"abc"[index % 3]}'
                for index in range(count)]
        (root / f"{name}.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    return {"tokenizer": spm, "data.train_file": str(root / "train.csv"),
            "data.dev_file": str(root / "dev.csv")}


def _finetune_arguments(task_files: dict[str, str], workdir: Path, steps: int,
                        *flags: str) -> list[str]:
    return ["finetune", "--config=configs/custom.py:kind=classification,runlocal",
            f"--workdir={workdir}", *(f"--config.{key}={value}" for key, value in task_files.items()),
            "--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
            f"--config.total_steps={steps}", "--config.eval_every_steps=2",
            # Every checkpoint inside a log interval (3, 6, 9 against 4, 8): a resumed run goes
            # on with the interval the checkpoint saved.
            "--config.checkpoint_every_steps=3", "--config.log_every_steps=4", *flags]


def _records(workdir: Path) -> list[dict]:
    return [json.loads(line)
            for line in (workdir / workdir_names.METRICS_LOG_FILE).read_text().splitlines()]


def _values(workdir: Path) -> list[tuple]:
    """Every (step, name, value) of metrics.jsonl but the measured timings."""
    return [(record["step"], f"{record['split']}/{key}" if "split" in record else key, value)
            for record in _records(workdir) for key, value in record.items()
            if key not in ("step", "split", *TIMING)]


@pytest.fixture(scope="module")
def baseline(task_files, tmp_path_factory) -> Path:
    """The run with the default report_to (tensorboard)."""
    workdir = tmp_path_factory.mktemp("baseline") / "run"
    result = cli(*_finetune_arguments(task_files, workdir, STEPS))
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


@pytest.mark.slow
def test_mlflow_and_tensorboard_have_every_step_once_after_a_sigkill_and_resume(
        task_files, baseline, tmp_path):
    workdir = tmp_path / "run"
    from mlflow.tracking import MlflowClient  # here: every xdist worker collects this file

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(store)
    client.search_experiments()  # the store's tables exist before the run (a kill while MLflow
    # creates them leaves a store MLflow cannot open again)
    arguments = _finetune_arguments(task_files, workdir, STEPS,
                                    "--config.report_to=tensorboard,mlflow",
                                    f"--config.mlflow.tracking_uri={store}",
                                    "--config.mlflow.experiment=watching")
    process = start_cli(*arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = workdir / workdir_names.METRICS_LOG_FILE
    deadline = time.time() + 300
    # Killed once the checkpoint of step 3 is complete and a record past it is written: the run
    # resumes inside a log interval (from step 3, or 6 or 9 if the kill comes late).
    while time.time() < deadline and process.poll() is None:
        if ((workdir / workdir_names.CHECKPOINTS_SUBDIR / "3").is_dir() and metrics.exists()
                and any(record["step"] >= 4 for record in _records(workdir))):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    result = cli(*arguments)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resuming from the checkpoint" in result.stdout

    (experiment,) = [e for e in client.search_experiments() if e.name == "watching"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == (workdir / workdir_names.MLFLOW_RUN_FILE).read_text()
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["optim.lr"] == "0.0001"
    histories = {}
    for record in _records(workdir):
        for key in record.keys() - {"step", "split"}:
            name = f"{record['split']}/{key}" if "split" in record else key
            histories.setdefault(name, [(m.step, m.value)
                                        for m in client.get_metric_history(run.info.run_id, name)])
    for name, history in histories.items():
        steps = [step for step, _ in history]
        assert len(steps) == len(set(steps)), name  # one value per step
    # Every step and metric of metrics.jsonl, the same value (resumed steps recompute the same
    # losses; their timings are the killed run's in MLflow).
    for step, name, value in _values(workdir):
        assert dict(histories[name])[step] == value, (name, step)
    assert {(record["step"], record.get("split")) for record in _records(workdir)} == {
        (step, name.split("/")[0] if "/" in name else None)
        for name, history in histories.items() for step, _ in history}
    assert _values(workdir) == _values(baseline)  # reporting changes nothing trained
    best = json.loads((workdir / workdir_names.BEST_FILE).read_text())
    assert run.data.metrics["best/accuracy"] == best["accuracy"]

    # TensorBoard: two event files (the killed run's, the resumed run's); every point of
    # metrics.jsonl, timings too, once with its value (as float32), and no other: the points of
    # the checkpoint's step stay, those the killed run logged after it go.
    assert len(list((workdir / workdir_names.TENSORBOARD_SUBDIR).iterdir())) == 2
    shown = tensorboard_points(workdir)
    expected = [(record["step"], f"{record['split']}/{key}" if "split" in record else key,
                 float(np.float32(value)))
                for record in _records(workdir) for key, value in record.items()
                if key not in ("step", "split") and math.isfinite(value)]
    assert sorted(shown) == sorted(expected)


@pytest.mark.slow
def test_wandb_offline_continues_the_same_run_and_an_explicit_wandb_dir_wins(task_files, tmp_path):
    workdir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    offline = {**one_device_environment(), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}

    def train(steps: int, environment: dict[str, str]) -> None:
        result = cli(*_finetune_arguments(task_files, workdir, steps, "--config.report_to=wandb",
                                          "--config.wandb.tags=(demo,)"), environment=environment)
        assert result.returncode == 0, result.stderr[-3000:]
        assert WARNING not in result.stderr

    # A finished run with WANDB_DIR set: W&B's files go there, the id stays with the run.
    train(2, {**offline, "WANDB_DIR": str(elsewhere)})
    run_id = (workdir / workdir_names.WANDB_RUN_FILE).read_text()
    (run,) = (elsewhere / "wandb").glob("offline-run-*")
    assert run.name.endswith(f"-{run_id}") and (run / f"run-{run_id}.wandb").stat().st_size > 0
    assert not (workdir / workdir_names.WANDB_SUBDIR).exists()
    # The same workdir trained further without WANDB_DIR: the same run, its files in the workdir.
    train(4, offline)
    runs = [run, *(workdir / workdir_names.WANDB_SUBDIR).glob("offline-run-*")]
    assert len(runs) == 2 and all(run.name.endswith(f"-{run_id}") for run in runs)
    assert all((run / f"run-{run_id}.wandb").stat().st_size > 0 for run in runs)
    assert not (workdir / workdir_names.TENSORBOARD_SUBDIR).exists()  # not asked for


FAILING_WANDB = '''
class _Failing:
    step = 0
    def __getattr__(self, name):
        raise RuntimeError("tracker down")
def init(**kwargs):
    return _Failing()
'''


@pytest.mark.slow
def test_a_tracker_that_raises_changes_nothing_but_one_warning(task_files, baseline, tmp_path):
    (tmp_path / "stand_in" / "wandb").mkdir(parents=True)
    (tmp_path / "stand_in" / "wandb" / "__init__.py").write_text(FAILING_WANDB)
    environment = {**one_device_environment(), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path / "stand_in"), os.environ.get("PYTHONPATH", "")])}
    workdir = tmp_path / "run"
    result = cli(*_finetune_arguments(task_files, workdir, STEPS,
                                     "--config.report_to=wandb,tensorboard"),
                 environment=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    (warning,) = [line for line in result.stderr.splitlines() if WARNING in line]
    assert "report_to wandb" in warning and "tracker down" in warning
    assert _values(workdir) == _values(baseline)
    assert len(list((workdir / workdir_names.TENSORBOARD_SUBDIR).iterdir())) == 1


def test_a_missing_tracker_package_is_one_line_before_anything_is_written(task_files, tmp_path):
    workdir = tmp_path / "run"
    script = ("import sys; sys.modules['mlflow'] = None; sys.argv[0] = 'albert-jax'; "
              "from albert_jax import cli; cli.main()")
    result = subprocess.run(
        [sys.executable, "-c", script,
         *_finetune_arguments(task_files, workdir, 2, "--config.report_to=tensorboard,mlflow")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "albert-jax finetune: error: config report_to='tensorboard,mlflow': mlflow is not "
        "installed; pip install 'albert-jax[mlflow]'")
    assert not workdir.exists()


def test_an_unknown_tracker_is_one_line(task_files, tmp_path):
    result = cli(*_finetune_arguments(task_files, tmp_path / "run", 2,
                                      "--config.report_to=tensorbord"))
    assert result.returncode != 0
    assert "unknown 'tensorbord'; choose from tensorboard, mlflow, wandb, none" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_profile_of_steps_3_to_5_of_a_pretraining_run(tmp_path, demo_pretraining_data):
    settings = demo_pretraining_data
    workdir = tmp_path / "workdir"

    def pretrain(steps: int) -> subprocess.CompletedProcess:
        result = cli("pretrain", *config_flags(settings), "--config.model=tiny",
                     f"--config.total_steps={steps}", "--config.model_overrides.vocab_size=400",
                     "--config.batch_size=8", "--config.eval_batch_size=8",
                     "--config.profile.start_step=3", "--config.profile.num_steps=3",
                     f"--workdir={workdir}")
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    result = pretrain(6)
    (run,) = (workdir / workdir_names.PROFILE_SUBDIR).iterdir()
    assert f"Profiled steps 3-5 into {run}" in result.stdout
    assert list(run.glob("*.xplane.pb"))
    with gzip.open(run / "perfetto_trace.json.gz") as file:
        trace = json.load(file)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    steps = [event["args"]["step_num"] for event in events if event.get("name") == "train"]
    assert steps == ["3", "4", "5"]
    # Trained further: the window is behind the resumed run, nothing is traced again.
    assert "Profiled" not in pretrain(8).stdout
    assert len(list((workdir / workdir_names.PROFILE_SUBDIR).iterdir())) == 1
