"""`albert-jax pretrain` end to end through the real CLI, on a small real-text dataset.

Exact resume after SIGKILL, a clean stop on SIGTERM, the NaN guard, the workdir config check,
and a finished run that reports it is done. The runs have the settings of test_reliability.py's
tiny pretraining run (24 steps, a checkpoint every 4), and its uninterrupted run, made once per
test run, is the one the resumed run is compared with and the finished run.
"""
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from etils import epath

import test_reliability
from albert_jax import config as config_lib
from albert_jax.train import loop
from cli_fixtures import cli, start_cli
from configs import pretrain as pretrain_config
from test_reliability import TRAIN_KEYS, pretrain_flags

# That file's module fixtures (data, environment, the straight run), made again for this module;
# bound by assignment, which the tests' arguments of the same names do not redefine.
data_flags = test_reliability.data_flags
environment = test_reliability.environment
straight = test_reliability.straight


def pretrain(flags: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    return cli(*flags, timeout=timeout)


def logged(workdir: Path) -> dict[int, dict]:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {record["step"]: record for record in records
            if "loss" in record and "split" not in record}  # eval records carry a "split"


def start_and_wait(flags: list[str], workdir: Path, until_step: int,
                   until_checkpoint: int | None = None) -> subprocess.Popen:
    process = start_cli(*flags, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    checkpoint = workdir / "checkpoints" / str(until_checkpoint)
    while (max(logged(workdir), default=0) < until_step
           or (until_checkpoint is not None and not checkpoint.is_dir())):
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.time() < deadline, "the run did not reach the step in time"
        time.sleep(0.2)
    return process


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_losses_of_an_uninterrupted_run(straight, data_flags,
                                                                      tmp_path):
    expected = logged(straight)
    assert sorted(expected) == list(range(3, 25, 3))

    workdir = tmp_path / "killed"
    # A long run (the constant schedule does not depend on total_steps), killed past step 9
    # once the async checkpoint of step 8 is complete: it resumes inside a log interval (of 3).
    process = start_and_wait(pretrain_flags(data_flags, workdir, total_steps=1000), workdir, 9,
                             until_checkpoint=8)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    resumed = pretrain(pretrain_flags(data_flags, workdir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming from the checkpoint at step" in resumed.stdout
    resumed_from = int(resumed.stdout.split("Resuming from the checkpoint at step")[1].split()[0])
    assert 8 <= resumed_from < 24
    got = logged(workdir)
    assert sorted(got) == list(range(3, 25, 3))  # records of the lost steps were replaced
    for step in range(3, 25, 3):
        for key in TRAIN_KEYS:
            assert got[step][key] == expected[step][key], (step, key)  # bit-exact on CPU


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_cleanly(data_flags, tmp_path):
    workdir = tmp_path / "preempted"
    process = start_and_wait(pretrain_flags(data_flags, workdir, total_steps=1000,
                                            checkpoint_every_steps=500), workdir, 3)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    assert "Preempted: checkpoint saved at step" in output
    step = int(output.split("Preempted: checkpoint saved at step")[1].split(";")[0])
    assert step >= 3
    assert (workdir / "checkpoints" / str(step)).is_dir()


def test_nan_guard_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(data_flags, tmp_path):
    workdir = tmp_path / "diverged"
    # Warmup makes step 1 harmless (lr 0); then an absurd rate: LAMB moves each weight by
    # lr * ||w||, so the weights overflow within a step or two.
    result = pretrain(pretrain_flags(data_flags, workdir, total_steps=10, checkpoint_every_steps=1,
                                     **{"optim.lr": 1e38, "optim.warmup_steps": 3}))
    assert result.returncode != 0
    assert "non-finite" in result.stderr and "last good checkpoint is kept" in result.stderr
    assert "Traceback" not in result.stderr
    diverged_at = int(result.stderr.split("non-finite")[0].rsplit("step", 1)[1].strip(" :"))
    saved = sorted(int(path.name) for path in (workdir / "checkpoints").iterdir()
                   if path.name.isdigit())
    assert saved and all(step < diverged_at for step in saved), (saved, diverged_at)


def test_finished_run_reports_done_and_incompatible_config_is_refused(straight, data_flags,
                                                                       tmp_path):
    workdir = tmp_path / "done"
    shutil.copytree(straight, workdir)  # a finished run: its last step has its checkpoint
    assert json.loads((workdir / "config.json").read_text())["total_steps"] == 24
    assert (workdir / "tensorboard").is_dir() and any((workdir / "tensorboard").iterdir())
    again = pretrain(pretrain_flags(data_flags, workdir))
    assert again.returncode == 0
    assert "Training is done" in again.stdout
    changed = pretrain(pretrain_flags(data_flags, workdir, batch_size=16))
    assert changed.returncode != 0
    assert "incompatible config" in changed.stderr and "batch_size" in changed.stderr


def test_resume_may_change_how_a_run_runs_but_not_its_data_workers(tmp_path):
    saved = pretrain_config.get_config("runlocal")
    (tmp_path / "config.json").write_text(config_lib.to_json(saved))
    resumed = pretrain_config.get_config("runlocal")
    resumed.total_steps, resumed.data.prefetch = saved.total_steps * 2, 7
    loop.check_workdir_config(resumed, epath.Path(tmp_path))  # how it runs: allowed
    # grain's iterator state has one entry per worker: another count cannot restore it.
    resumed.data.num_workers = saved.data.num_workers + 2
    with pytest.raises(ValueError, match=r"data\.num_workers: 0 in the workdir, 2 now"):
        loop.check_workdir_config(resumed, epath.Path(tmp_path))
