"""Faults injected on purpose: damaged checkpoints, two runs on one workdir, unwritable workdirs,
a full disk, and a storm of SIGKILLs.

In process (a Checkpointer of a small state): every file of a checkpoint corrupted, truncated and
deleted in turn is named; the newest intact step is used and the damaged one moved aside, not
deleted; none intact stops and moves nothing; a failed write keeps the checkpoints there; stale
locks are taken over and live ones refused. Through the real CLI (subprocesses, tiny pretraining
run): fallback on resume, `albert-jax checkpoint verify`, two concurrent starts, unwritable
workdirs, a full disk mid-run, and five SIGKILLs ending bit-identical to a straight run. The
subprocesses share the run's JAX compilation cache (conftest.py), so a restart compiles nothing.
"""
import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from albert_jax import file_lock
from albert_jax.model import get_config
from albert_jax.train import checkpoint, integrity, loop, optim, workdir_lock
from albert_jax.train import state as state_lib
from albert_jax.train import workdir as workdir_names
from cli_fixtures import (
    CLI,
    REPO,
    cli,
    config_flags,
    made_once,
    one_device_environment,
    start_cli,
    tensorboard_points,
)

# A train record every 3 steps: checkpoints 4, 8, 16 and 20 fall inside a log interval, which a
# resumed run must go on with.
SETTINGS = {"model": "tiny", "batch_size": 8, "total_steps": 24, "log_every_steps": 3,
            "checkpoint_every_steps": 4, "keep_checkpoints": 3, "eval_every_steps": 1000,
            "eval_steps": 0, "eval_batch_size": 8, "optim.schedule": "constant",
            "optim.warmup_steps": 2, "optim.lr": 5e-3}
TRAIN_KEYS = ("loss", "masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
              "sentence_order_accuracy", "learning_rate")
HOST = socket.gethostname()


# --- Damage, and what a directory holds ---

def corrupt(path: Path) -> None:
    """Same size, four bytes in the middle inverted."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4] = bytes(byte ^ 0xFF for byte in data[middle:middle + 4])
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def delete(path: Path) -> None:
    path.unlink()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def state_data_file(step_directory: Path) -> Path:
    """One of the files holding the parameter arrays (tensorstore chunks under .../d/)."""
    return next(path for path in sorted((step_directory / "state").rglob("*"))
                if path.is_file() and path.parent.name == "d")


# --- In process: a Checkpointer of a small state ---

def small_state(value: int) -> state_lib.TrainState:
    params = {"dense": {"kernel": jnp.full((2, 2), value, jnp.float32)}}
    return state_lib.TrainState(step=jnp.int32(value), params=params,
                                opt_state=optim.lamb(0.1).init(params))


@pytest.fixture
def two_checkpoints(tmp_path) -> Path:
    """A checkpoints directory with steps 1 and 2 (state, data iterator, config)."""
    directory = tmp_path / "checkpoints"
    iterator = iter(grain.MapDataset.range(100).batch(4).to_iter_dataset())
    checkpointer = checkpoint.Checkpointer(directory)
    for step in (1, 2):
        next(iterator)
        assert checkpointer.save(step, small_state(step), iterator, "{}", force=True)
    checkpointer.close()
    return directory


def test_every_file_corrupted_truncated_or_deleted_is_named(two_checkpoints, tmp_path):
    step_directory = two_checkpoints / "2"
    pristine = tmp_path / "pristine"
    shutil.copytree(step_directory, pristine)
    # Every file but Orbax's top commit marker, which nothing reads on a local disk.
    names = [name for name in snapshot(step_directory) if name != "commit_success.txt"]
    assert {"checksums.json", "_CHECKPOINT_METADATA", "state/_METADATA",
            "data/process_0-of-1.json", "config/metadata"} <= set(names)
    assert str(state_data_file(step_directory).relative_to(step_directory)) in names
    for name in names:
        for damage in (corrupt, truncate, delete):
            damage(step_directory / name)
            problem = integrity.problem(step_directory)
            assert problem is not None and problem.startswith(f"{name}: "), (
                name, damage.__name__, problem)
            shutil.rmtree(step_directory)
            shutil.copytree(pristine, step_directory)
    assert integrity.problem(step_directory) is None
    data_file = str(state_data_file(step_directory).relative_to(step_directory))
    corrupt(step_directory / data_file)
    assert integrity.problem(step_directory) == (
        f"{data_file}: checksum mismatch (the bytes changed after the save)")


def test_the_newest_intact_step_is_used_and_the_damaged_one_moved_aside(two_checkpoints, caplog):
    data_file = state_data_file(two_checkpoints / "2")
    corrupt(data_file)
    damaged_files = snapshot(two_checkpoints / "2")
    checkpointer = checkpoint.Checkpointer(two_checkpoints)
    assert checkpointer.newest_intact_step() == 1
    assert checkpointer.all_steps() == [1]
    (moved,) = (two_checkpoints / integrity.DAMAGED_SUBDIR).iterdir()
    assert moved.name.startswith("2-") and snapshot(moved) == damaged_files  # moved, not deleted
    (report,) = [record.getMessage() for record in caplog.records if "is damaged" in
                 record.getMessage()]
    assert str(data_file.relative_to(two_checkpoints / "2")) in report and str(moved) in report
    restored, _ = checkpointer.restore(1, jax.eval_shape(lambda: small_state(1)))
    assert int(restored.step) == 1
    assert checkpointer.save(2, small_state(2), None, "{}", force=True)  # step 2 is free again
    checkpointer.close()
    assert checkpoint.Checkpointer(two_checkpoints, read_only=True).check(2) is None


def test_no_intact_checkpoint_stops_and_moves_nothing(two_checkpoints):
    data_state = two_checkpoints / "1" / "data" / "process_0-of-1.json"
    size = data_state.stat().st_size
    truncate(data_state)
    delete(two_checkpoints / "2" / "checksums.json")
    before = snapshot(two_checkpoints)
    checkpointer = checkpoint.Checkpointer(two_checkpoints)
    with pytest.raises(checkpoint.CheckpointDamaged) as error:
        checkpointer.newest_intact_step()
    checkpointer.close()
    message = str(error.value)
    assert "\n" not in message and "no intact checkpoint" in message
    assert "step 2: checksums.json: missing" in message
    assert f"step 1: data/process_0-of-1.json: truncated ({size // 2} of {size} bytes)" in message
    assert "Nothing was moved" in message
    assert snapshot(two_checkpoints) == before
    # Where losing the checkpoints costs nothing (best/), they are moved aside instead.
    best = checkpoint.Checkpointer(two_checkpoints)
    assert best.newest_intact_step(stop_if_all_damaged=False) is None
    assert best.all_steps() == [] and len(list((two_checkpoints / "damaged").iterdir())) == 2
    best.close()


def test_checkpoints_saved_before_checksums_stay_usable(two_checkpoints):
    step_directory = two_checkpoints / "2"
    # What an older albert_jax wrote: no checksums.json, no mark in Orbax's step metadata.
    metadata = json.loads((step_directory / "_CHECKPOINT_METADATA").read_text())
    del metadata["custom_metadata"][integrity.CUSTOM_METADATA_KEY]
    (step_directory / "_CHECKPOINT_METADATA").write_text(json.dumps(metadata))
    delete(step_directory / "checksums.json")
    assert integrity.problem(step_directory) is None
    assert not integrity.has_checksums(step_directory)
    assert integrity.has_checksums(two_checkpoints / "1")
    checkpointer = checkpoint.Checkpointer(two_checkpoints)
    assert checkpointer.newest_intact_step() == 2
    checkpointer.close()


def test_load_refuses_a_damaged_step_by_name_and_moves_nothing(tmp_path):
    model_config = get_config("tiny", vocab_size=64)
    params = small_state(1).params  # `load` reads any tree; no model needs building
    weights = tmp_path / "weights"
    checkpoint.save_weights(str(weights), model_config, params)
    assert checkpoint.load(str(weights), step=0)[0].to_dict() == model_config.to_dict()
    data_file = state_data_file(weights / "checkpoints" / "0")
    corrupt(data_file)
    before = snapshot(weights)
    with pytest.raises(checkpoint.CheckpointDamaged,
                       match=f"the checkpoint of step 0 in .* is damaged: .*"
                             f"{data_file.name}: checksum mismatch"):
        checkpoint.load(str(weights), step=0)  # how `albert-jax evaluate` reads best/
    with pytest.raises(checkpoint.CheckpointDamaged, match="no intact checkpoint"):
        checkpoint.load(str(weights))  # the newest intact: none
    assert snapshot(weights) == before  # loading only reads


def full_disk(step_directory):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(step_directory))


def test_a_failed_write_stops_and_keeps_the_checkpoints_there(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    checkpointer = checkpoint.Checkpointer(directory, max_to_keep=2)
    for step in (1, 2):
        checkpointer.save(step, small_state(step), None, "{}", force=True)
    checkpointer.wait_until_finished()
    monkeypatch.setattr(integrity, "write", full_disk)
    assert checkpointer.save(3, small_state(3), None, "{}", force=True)  # async: fails later
    with pytest.raises(checkpoint.CheckpointWriteFailed) as error:
        for _ in range(600):  # what the loop calls after every step
            checkpointer.raise_if_save_failed()
            time.sleep(0.05)
    checkpointer.close()
    message = str(error.value)
    assert "\n" not in message
    assert f"could not write the checkpoint of step 3 in {directory}: [Errno 28] No space" in message
    assert "untouched (newest: step 2)" in message
    # A synchronous save (the best/ checkpoint) fails at once.
    best = checkpoint.Checkpointer(tmp_path / "best", max_to_keep=1, async_save=False)
    with pytest.raises(checkpoint.CheckpointWriteFailed, match="step 5 .*No space left"):
        best.save(5, small_state(5), None, "{}", force=True)
    best.close()
    monkeypatch.undo()
    reopened = checkpoint.Checkpointer(directory, max_to_keep=2)
    assert reopened.all_steps() == [1, 2]  # max_to_keep removed nothing for the failed save
    assert reopened.check(1) is None and reopened.check(2) is None
    assert reopened.save(3, small_state(3), None, "{}", force=True)  # space again: it goes on
    reopened.close()
    assert sorted(path.name for path in directory.iterdir()) == ["2", "3"]  # leftover cleared


# --- The workdir lock, in process; a live holder is another process ---

def hold_lock_in_a_child(workdir: Path | str) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom albert_jax.train import workdir_lock\n"
         "workdir_lock.acquire(sys.argv[1])\nprint('held', flush=True)\ntime.sleep(600)",
         str(workdir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "held\n"
    return child


def test_live_locks_are_refused_and_stale_ones_taken_over(tmp_path, caplog):
    lock_path = tmp_path / workdir_names.LOCK_FILE
    child = hold_lock_in_a_child(tmp_path)
    try:
        with pytest.raises(workdir_lock.WorkdirLocked) as error:
            workdir_lock.acquire(tmp_path)
        assert f"lock {lock_path} is held by pid {child.pid} on host {HOST}" in str(error.value)
        record = json.loads(lock_path.read_text())
        # The same pid, started at another time: the pid was reused by a new process.
        lock_path.write_text(json.dumps({**record, "process_start": "1"}))
        workdir_lock.acquire(tmp_path).release()
        assert not lock_path.exists()
        assert f"pid {child.pid} is another process now" in caplog.text
        # Another host's lock: refused while it is refreshed, taken over once it is not.
        lock_path.write_text(json.dumps({**record, "host": "elsewhere"}))
        with pytest.raises(workdir_lock.WorkdirLocked, match=f"pid {child.pid} on host elsewhere"):
            workdir_lock.acquire(tmp_path)
        old = time.time() - file_lock.STALE_AFTER_SECONDS - 60
        os.utime(lock_path, (old, old))
        workdir_lock.acquire(tmp_path).release()
        assert "last refreshed" in caplog.text
        # The holder killed: its lock is taken over at once.
        lock_path.write_text(json.dumps(record))
    finally:
        child.kill()
        child.wait()
    lock = workdir_lock.acquire(tmp_path)
    assert f"pid {child.pid} on host {HOST}: its process {child.pid} is not running" in caplog.text
    assert json.loads(lock_path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock_path.exists()


LOCK_READER = """
import json, sys, time
path, partial, whole = sys.argv[1], 0, 0
print("reading", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        text = open(path).read()
    except FileNotFoundError:
        continue
    try:
        json.loads(text)
        whole += 1
    except ValueError:
        partial += 1
print(whole, partial)
"""


def test_a_starting_run_never_sees_a_lock_half_written(tmp_path):
    # A run starting beside another reads the other's lock to name its holder; a lock created
    # empty and written after is read as a hand-made file of no pid (before the fix: about one
    # read in 25 here).
    lock_path = tmp_path / workdir_names.LOCK_FILE
    reader = subprocess.Popen([sys.executable, "-c", LOCK_READER, str(lock_path), "3"],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline() == "reading\n"
    deadline = time.time() + 2.5
    while time.time() < deadline:
        file_lock.acquire(lock_path, in_use="in use", advice="wait").release()
    whole, partial = map(int, reader.communicate()[0].split())
    assert whole > 100 and partial == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # no draft left beside it


def test_a_lock_is_taken_where_the_filesystem_has_no_hard_links(tmp_path, monkeypatch):
    def no_hard_links(source, destination):
        raise PermissionError(errno.EPERM, "Operation not permitted", str(destination))

    monkeypatch.setattr(os, "link", no_hard_links)
    lock = workdir_lock.acquire(tmp_path)
    assert json.loads((tmp_path / workdir_names.LOCK_FILE).read_text())["pid"] == os.getpid()
    child_refused = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom albert_jax.train import workdir_lock\n"
         "try:\n    workdir_lock.acquire(sys.argv[1])\nexcept workdir_lock.WorkdirLocked as e:"
         "\n    print(e)", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert f"is held by pid {os.getpid()} on host {HOST}" in child_refused.stdout
    lock.release()
    assert sorted(path.name for path in tmp_path.iterdir()) == []


# --- Through the CLI: a tiny pretraining run ---

@pytest.fixture(scope="module")
def environment() -> dict[str, str]:
    """The subprocesses' environment: one CPU device, the run's JAX compilation cache
    (conftest.py)."""
    return one_device_environment()


@pytest.fixture(scope="module")
def data_flags(demo_pretraining_data) -> list[str]:
    return config_flags(demo_pretraining_data)


def pretrain_flags(data_flags: list[str], workdir: Path, **overrides) -> list[str]:
    settings = {**SETTINGS, **overrides}
    return (["pretrain"] + data_flags + [f"--workdir={workdir}"]
            + [f"--config.{key}={value}" for key, value in settings.items()])


def run(arguments: list[str], environment: dict[str, str],
        program: list[str] = CLI) -> subprocess.CompletedProcess:
    """`program ARGUMENTS` to its end, output captured: the command line by `cli`."""
    if program == CLI:
        return cli(*arguments, environment=environment)
    return subprocess.run(program + arguments, cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=600)


def error_line(result: subprocess.CompletedProcess, command: str = "pretrain") -> str:
    """The CLI's one-line error (the line after it only says how to see the traceback)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines()
               if line.startswith(f"albert-jax {command}: error: ")]
    return line


def logged(workdir: Path) -> list[dict]:
    """The train records of metrics.jsonl, in file order (eval records carry a split)."""
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [{key: record[key] for key in ("step", *TRAIN_KEYS)} for record in records
            if "split" not in record]


def trained_points(workdir: Path) -> list[tuple[int, str, float]]:
    """TensorBoard's points of the train records but the measured timings, sorted."""
    return sorted(point for point in tensorboard_points(workdir)
                  if point[1] in TRAIN_KEYS)


def final_params(workdir: Path):
    return checkpoint.load(str(workdir))[1]


def assert_params_identical(workdir: Path, expected: Path) -> None:
    actual, wanted = final_params(workdir), final_params(expected)
    assert jax.tree.structure(actual) == jax.tree.structure(wanted)
    for left, right in zip(jax.tree.leaves(actual), jax.tree.leaves(wanted)):
        np.testing.assert_array_equal(np.asarray(left), np.asarray(right))


def verify(workdir: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    return run(["checkpoint", "verify", f"--workdir={workdir}"], environment)


@pytest.fixture(scope="module")
def straight(data_flags, environment, tmp_path_factory) -> Path:
    """The uninterrupted run (24 steps, checkpoints every 4, the newest 3 kept, a train record
    every 3), made once per test run (test_workdir_bucket.py compares with it too): copy it
    before changing it."""
    def make(root: Path) -> str:
        result = run(pretrain_flags(data_flags, root / "run"), environment)
        assert result.returncode == 0, result.stderr[-3000:]
        return str(root / "run")

    workdir = Path(made_once("straight_pretraining_run", tmp_path_factory, make))
    assert [record["step"] for record in logged(workdir)] == list(range(3, 25, 3))
    return workdir


@pytest.mark.slow
def test_resume_falls_back_past_damaged_checkpoints_and_verify_names_them(
        straight, data_flags, environment, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(straight, workdir)
    checkpoints = workdir / "checkpoints"
    data_file = state_data_file(checkpoints / "24")
    corrupt(data_file)
    data_state = checkpoints / "20" / "data" / "process_0-of-1.json"
    size = data_state.stat().st_size
    truncate(data_state)
    checked = verify(workdir, environment)
    assert checked.returncode == 1, checked.stderr[-3000:]
    assert checked.stdout.splitlines() == [
        "16 intact",
        f"20 damaged: data/process_0-of-1.json: truncated ({size // 2} of {size} bytes)",
        f"24 damaged: {data_file.relative_to(checkpoints / '24')}: checksum mismatch (the bytes "
        "changed after the save)"]
    assert sorted(path.name for path in checkpoints.iterdir()) == ["16", "20", "24"]  # read only

    resumed = run(pretrain_flags(data_flags, workdir), environment)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming from the checkpoint at step 16" in resumed.stdout
    reports = [line for line in resumed.stderr.splitlines() if "is damaged" in line]
    assert len(reports) == 2 and "checksum mismatch" in reports[0] and "truncated" in reports[1]
    moved = {path.name.split("-")[0]: path for path in (checkpoints / "damaged").iterdir()}
    assert sorted(moved) == ["20", "24"]
    assert (moved["24"] / data_file.relative_to(checkpoints / "24")).exists()  # not deleted
    # Each record once, in order, bit-exact: the one of step 18 averages steps 16-18, step 16
    # from the interval checkpoint 16 saved; TensorBoard's reader shows the same points.
    assert logged(workdir) == logged(straight)
    assert trained_points(workdir) == trained_points(straight)
    assert_params_identical(workdir, straight)
    checked = verify(workdir, environment)
    assert checked.returncode == 0
    assert checked.stdout.splitlines() == ["16 intact", "20 intact", "24 intact"]


def test_a_checkpoint_without_its_log_interval_resumes_with_a_one_line_note(
        straight, data_flags, environment, tmp_path):
    """A checkpoint saved before checkpoints kept the open log interval (its record has no
    log_interval) resumes as before: a new interval, its first record averaging the steps after
    the checkpoint only, which one line says."""
    workdir = tmp_path / "run"
    shutil.copytree(straight, workdir)
    for step in (20, 24):
        shutil.rmtree(workdir / "checkpoints" / str(step))
    step_directory = workdir / "checkpoints" / "16"
    record_file = step_directory / "config" / "metadata"
    record = json.loads(record_file.read_text())
    assert record.pop(loop.LOG_INTERVAL)["steps"] == 1  # step 16 of the interval 16-18
    record_file.write_text(json.dumps(record))
    integrity.write(step_directory)  # its checksums, as the older albert-jax wrote them
    resumed = run(pretrain_flags(data_flags, workdir, total_steps=18), environment)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [line for line in resumed.stdout.splitlines() if "log interval" in line] == [
        "The checkpoint at step 16 holds no open log interval (saved by an older albert-jax): "
        "the train record of step 18 averages steps 17-18 only."]
    got, expected = logged(workdir), logged(straight)
    assert got[:-1] == expected[:5] and got[-1]["step"] == 18
    assert got[-1]["loss"] != expected[5]["loss"]  # two steps' average, not three


def test_no_intact_checkpoint_is_one_line_and_touches_nothing(
        straight, data_flags, environment, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(straight, workdir)
    delete(state_data_file(workdir / "checkpoints" / "16"))
    corrupt(workdir / "checkpoints" / "20" / "state" / "_METADATA")
    truncate(workdir / "checkpoints" / "24" / "config" / "metadata")
    before = snapshot(workdir)
    line = error_line(run(pretrain_flags(data_flags, workdir), environment))
    assert f"no intact checkpoint in {workdir / 'checkpoints'}" in line
    assert all(f"step {step}: " in line for step in (16, 20, 24)) and "Nothing was moved" in line
    assert snapshot(workdir) == before


def two_concurrent_starts(flags: list[str], environment: dict[str, str]) -> tuple[int, str]:
    """Two runs of `flags` started together, of which exactly one trains: (its pid, the other's
    error line)."""
    starts = [start_cli(*flags, environment=environment, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [subprocess.CompletedProcess(process.args, process.wait(timeout=600),
                                           *process.communicate()) for process in starts]
    assert sorted(result.returncode for result in results) == [0, 1], [
        result.stderr[-3000:] for result in results]
    winner = starts[[result.returncode for result in results].index(0)]
    return winner.pid, error_line(next(result for result in results if result.returncode == 1))


def test_two_concurrent_starts_one_trains_the_other_is_refused(
        data_flags, environment, tmp_path):
    workdir = tmp_path / "run"
    winner, line = two_concurrent_starts(pretrain_flags(data_flags, workdir, total_steps=8),
                                         environment)
    assert f"its lock {workdir / 'run.lock'} is held by pid {winner} on host {HOST}" in line
    assert [record["step"] for record in logged(workdir)] == [3, 6, 8]
    assert not (workdir / "run.lock").exists()  # released at the end


@pytest.mark.parametrize("where", ["under a file", "read-only"])
def test_an_unwritable_workdir_is_one_line_at_start(where, data_flags, environment, tmp_path):
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        workdir = tmp_path / "read_only"
        workdir.mkdir()
        workdir.chmod(0o555)
    else:
        (tmp_path / "file").write_text("")
        workdir = tmp_path / "file" / "run"
    result = run(pretrain_flags(data_flags, workdir), environment)
    line = error_line(result)
    assert f"cannot write in workdir {workdir}" in line and "writable --workdir" in line
    assert "parameter" not in result.stdout  # stopped before the model was built


FULL_DISK_SCRIPT = """
import errno, os, sys
from etils import epath
from albert_jax import cli
from albert_jax.train import integrity

write = integrity.write

def write_unless_the_disk_is_full(step_directory):  # full from the checkpoint of step 12 on
    if int(epath.Path(step_directory).name.split(".")[0]) >= 12:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(step_directory))
    write(step_directory)

integrity.write = write_unless_the_disk_is_full
cli.main(["albert-jax", *sys.argv[1:]])
"""


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_checkpoints(
        data_flags, environment, tmp_path):
    workdir = tmp_path / "run"
    result = run(pretrain_flags(data_flags, workdir), environment,
                 program=[sys.executable, "-c", FULL_DISK_SCRIPT])
    line = error_line(result)
    assert (f"could not write the checkpoint of step 12 in {workdir / 'checkpoints'}: "
            "[Errno 28] No space left on device") in line
    assert "untouched (newest: step 8)" in line and "rerun the same command" in line
    assert max(record["step"] for record in logged(workdir)) <= 16  # none past the next save
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints", read_only=True)
    assert checkpointer.all_steps() == [4, 8]
    assert checkpointer.check(4) is None and checkpointer.check(8) is None
    checkpointer.close()


def collect_lines(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


@pytest.mark.slow
def test_five_sigkills_then_a_resume_end_bit_identical_to_a_straight_run(
        straight, data_flags, environment, tmp_path):
    workdir = tmp_path / "run"
    flags = pretrain_flags(data_flags, workdir)
    rng = random.Random(11)
    # Each run is killed once it has trained a random step (at least one step past where it
    # resumed), after a random delay: between steps or inside an async checkpoint write. The
    # first before the first checkpoint (step 4): the next run starts afresh over its records.
    targets = [rng.randint(1, 2), *sorted(rng.sample(range(5, 18), 4))]
    takeovers = 0
    for kill, target in enumerate(targets):
        process = start_cli(*flags, environment=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
        output: list[str] = []
        reader = threading.Thread(target=collect_lines, args=(process.stdout, output), daemon=True)
        reader.start()
        deadline = time.time() + 300
        while not any(line.startswith("step ") and int(line.split()[1].split("/")[0]) >= target
                      for line in list(output)):
            assert process.poll() is None, "".join(output)[-3000:]
            assert time.time() < deadline, "the run did not reach the step in time"
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.1) if kill else 0)
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        reader.join()
        takeovers += "taking over the lock" in "".join(output)
        assert ("Resuming" in "".join(output)) == (kill > 1), "".join(output)[-3000:]
        assert (workdir / "run.lock").exists()  # a SIGKILL leaves the lock
    with (workdir / "metrics.jsonl").open("a") as stream:
        stream.write('{"step": 18, "loss": 6.1')  # a line a kill cut short
    final = run(flags, environment)
    assert final.returncode == 0, final.stderr[-3000:]
    assert takeovers == 4 and "taking over the lock" in final.stderr
    assert logged(workdir) == logged(straight)  # each record once, in order, bit-exact
    assert_params_identical(workdir, straight)


@pytest.mark.slow
def test_a_bad_value_leaves_the_workdir_as_it_was(straight, data_flags, environment, tmp_path):
    """A typo or an impossible value is one line, and neither a workdir holding a run
    nor a new one is touched (so the corrected command is not refused as incompatible)."""
    workdir = tmp_path / "run"
    shutil.copytree(straight, workdir)
    before = snapshot(workdir)
    for override, named in (("batch_size=-3", "batch_size=-3"), ("optim.lr=-1", "optim.lr=-1.0"),
                            ("num_microbatches=3", "num_microbatches=3"),
                            ("optim.lrr=0.1", "optim.lrr"), ("mesh.data=3", "mesh.data=3")):
        line = error_line(run(pretrain_flags(data_flags, workdir) + [f"--config.{override}"],
                              environment))
        assert named in line, line
        assert snapshot(workdir) == before, override
    fresh = tmp_path / "fresh"
    error_line(run(pretrain_flags(data_flags, fresh) + ["--config.batch_size=-3"], environment))
    assert not fresh.exists()
