"""A workdir in a Cloud Storage bucket (`--workdir=gs://...`), against the storage emulator
(conftest.py) with the real clients: every file of a run is in the bucket, appends compose onto
metrics.jsonl and the event files, the lock is a create-if-absent, and a run SIGKILLed during a
checkpoint upload, or cut off from the bucket for 20 seconds, ends bit-identical to an
uninterrupted local run.

In process: `files.append`, the metrics writer and the lock on gs:// against the same calls on a
local directory. Through the real CLI (slow): the tiny pretraining run of test_reliability.py.
"""
import json
import select
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest
from etils import epath
from google.cloud import storage
from tensorboardX import SummaryWriter, record_writer
from tensorboardX.proto import event_pb2

import test_reliability
from albert_jax import file_lock, files
from albert_jax.train import checkpoint, integrity, workdir_lock
from albert_jax.train import workdir as workdir_names
from albert_jax.train.reporting import metrics as metrics_lib
from cli_fixtures import start_cli
from finetune_fixtures import write_glue_task
from test_reliability import (
    HOST,
    REPO,
    assert_params_identical,
    collect_lines,
    hold_lock_in_a_child,
    logged,
    pretrain_flags,
    run,
    small_state,
    two_concurrent_starts,
    verify,
)

# That file's module fixtures (data, the straight local run), made again for this module; bound
# by assignment, which the tests' arguments of the same names do not redefine.
data_flags = test_reliability.data_flags
environment = test_reliability.environment
straight = test_reliability.straight


def _listing(folder: str) -> tuple[str, list[storage.Blob]]:
    bucket, _, prefix = folder[len("gs://"):].partition("/")
    return prefix, list(storage.Client(project=None).list_blobs(bucket, prefix=prefix + "/"))


def object_names(folder: str) -> list[str]:
    """The objects under the gs:// `folder`, relative to it, listed with google-cloud-storage
    (no cache between the test and the server)."""
    prefix, blobs = _listing(folder)
    return [blob.name[len(prefix) + 1:] for blob in blobs]


def objects(folder: str) -> dict[str, bytes]:
    """Every object under the gs:// `folder`, by its name relative to it, and its bytes."""
    prefix, blobs = _listing(folder)
    return {blob.name[len(prefix) + 1:]: blob.download_as_bytes() for blob in blobs}


def read_events(data: bytes) -> list[event_pb2.Event]:
    """The events of an event file, each record's two checksums checked."""
    events, offset = [], 0
    while offset < len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("Q", header)
        assert struct.unpack("I", data[offset + 8:offset + 12])[0] == (
            record_writer.masked_crc32c(header))
        payload = data[offset + 12:offset + 12 + length]
        assert struct.unpack("I", data[offset + 12 + length:offset + 16 + length])[0] == (
            record_writer.masked_crc32c(payload))
        events.append(event_pb2.Event.FromString(payload))
        offset += 16 + length
    return events


def scalars(events: list[event_pb2.Event]) -> list[tuple[int, str, float]]:
    return [(event.step, value.tag, value.simple_value) for event in events
            for value in event.summary.value]


# --- In process ---

def test_append_composes_onto_the_end_as_a_local_append_does(bucket, tmp_path):
    chunks = ['{"step": 1}\n', b'{"step": 2}\n{"step": 3}\n', '{"step": 4, "loss": 0.5}\n']
    for root in (str(tmp_path), bucket):
        path = epath.Path(root) / "metrics.jsonl"
        for chunk in chunks:
            files.append(path, chunk)
        assert path.read_bytes() == b'{"step": 1}\n{"step": 2}\n{"step": 3}\n' \
                                    b'{"step": 4, "loss": 0.5}\n'
    assert list(objects(bucket)) == ["metrics.jsonl"]  # the parts are gone
    # What a writer killed between the upload of a part and its compose leaves: the next append
    # replaces that part, and its bytes are not added.
    leftover = files.gcs_object(files._part(f"{bucket}/metrics.jsonl"))
    leftover.upload_from_string(b'{"step": 5}\n')
    files.append(f"{bucket}/metrics.jsonl", '{"step": 6}\n')
    assert objects(bucket)["metrics.jsonl"].splitlines()[-2:] == [b'{"step": 4, "loss": 0.5}',
                                                                b'{"step": 6}']
    assert list(objects(bucket)) == ["metrics.jsonl"]


@pytest.mark.slow  # 5 s of outage and the server's restart
def test_an_append_waits_out_an_outage_of_the_bucket(bucket, storage_emulator, monkeypatch):
    # Retried every second at most (30 s by default): the retry comes soon after the restart,
    # not up to 30 s later.
    monkeypatch.setattr(files, "RETRY_MAX_DELAY_SECONDS", 1.0)
    path = f"{bucket}/metrics.jsonl"
    files.append(path, '{"step": 1}\n')
    storage_emulator.stop()
    restart = threading.Timer(5, storage_emulator.start)
    restart.start()
    try:
        started = time.monotonic()
        files.append(path, '{"step": 2}\n')  # retried until the server answers again
        waited = time.monotonic() - started
    finally:
        restart.join()
    assert waited > 4
    assert objects(bucket) == {"metrics.jsonl": b'{"step": 1}\n{"step": 2}\n'}


def test_write_atomically_replaces_an_object_in_one_upload(bucket):
    path = f"{bucket}/run/config.json"
    files.write_atomically(path, '{"a": 1}')
    files.write_atomically(path, b'{"a": 2}')
    assert objects(bucket) == {"run/config.json": b'{"a": 2}'}  # no temporary object left


def test_metrics_and_events_in_a_bucket_are_the_local_ones(bucket, tmp_path):
    records = [(1, {"loss": 6.5, "learning_rate": 0.0}, None),
               (2, {"loss": 6.25, "mfu": float("nan")}, None),
               (2, {"accuracy": 0.75}, "dev")]
    for root in (str(tmp_path), bucket):
        writer = metrics_lib.MetricsWriter(root, start_step=0, enabled=True)
        for step, values, split in records:
            writer.write(step, values, split=split)
    local = epath.Path(tmp_path) / workdir_names.METRICS_LOG_FILE
    assert objects(bucket)[workdir_names.METRICS_LOG_FILE] == local.read_bytes()
    assert [json.loads(line) for line in local.read_text().splitlines()][2] == {
        "step": 2, "split": "dev", "accuracy": 0.75}
    (local_events,) = (tmp_path / workdir_names.TENSORBOARD_SUBDIR).iterdir()
    (bucket_events,) = [data for name, data in objects(bucket).items()
                        if name.startswith(f"{workdir_names.TENSORBOARD_SUBDIR}/")]
    expected = [(1, "loss", 6.5), (1, "learning_rate", 0.0), (2, "loss", 6.25),
                (2, "dev/accuracy", 0.75)]  # a NaN is not drawn
    for data in (local_events.read_bytes(), bucket_events):
        events = read_events(data)
        assert events[0].file_version == "brain.Event:2"
        assert events[1].session_log.status == event_pb2.SessionLog.START  # drops later steps
        assert scalars(events) == expected
    # The reader reads what tensorboardX's own writer writes.
    reference = SummaryWriter(str(tmp_path / "reference"))
    for step, tag, value in expected:
        reference.add_scalar(tag, value, global_step=step)
    reference.close()
    (reference_file,) = (tmp_path / "reference").iterdir()
    assert scalars(read_events(reference_file.read_bytes())) == expected


def test_a_damaged_checkpoint_in_a_bucket_is_named_and_moved_aside(bucket, caplog):
    directory = f"{bucket}/checkpoints"
    checkpointer = checkpoint.Checkpointer(directory)
    for step in (1, 2):
        assert checkpointer.save(step, small_state(step), None, "{}", force=True)
    checkpointer.close()
    step_2 = {name: data for name, data in objects(directory).items() if name.startswith("2/")}
    data_file = next(name for name in sorted(step_2) if "/d/" in name)  # a tensorstore chunk
    damaged = bytearray(step_2[data_file])
    damaged[len(damaged) // 2] ^= 0xFF
    files.gcs_object(f"{directory}/{data_file}").upload_from_string(bytes(damaged))
    assert integrity.problem(f"{directory}/2") == (
        f"{data_file[2:]}: checksum mismatch (the bytes changed after the save)")
    checkpointer = checkpoint.Checkpointer(directory)
    assert checkpointer.newest_intact_step() == 1
    assert checkpointer.all_steps() == [1]
    checkpointer.close()
    moved = {name: data for name, data in objects(directory).items()
             if name.startswith(f"{integrity.DAMAGED_SUBDIR}/2-")}
    # Every object kept, the damaged one as it was; no object of step 2 left.
    assert sorted(name.split("/", 2)[2] for name in moved) == sorted(
        name[2:] for name in step_2)
    assert moved[next(name for name in moved if name.endswith(data_file[2:]))] == bytes(damaged)
    assert not [name for name in object_names(directory) if name.startswith("2/")]
    assert f"{data_file[2:]}: checksum mismatch" in caplog.text


def test_a_lock_in_a_bucket_is_refused_while_held_and_taken_over_once_stale(
        bucket, caplog, monkeypatch):
    lock_path = epath.Path(bucket) / workdir_names.LOCK_FILE
    child = hold_lock_in_a_child(bucket)
    try:
        with pytest.raises(workdir_lock.WorkdirLocked) as error:
            workdir_lock.acquire(bucket)
        assert f"lock {lock_path} is held by pid {child.pid} on host {HOST}" in str(error.value)
        record = json.loads(lock_path.read_text())
        # Another host's lock: refused while it is refreshed, taken over once it is not.
        lock_path.write_text(json.dumps({**record, "host": "elsewhere"}))
        with pytest.raises(workdir_lock.WorkdirLocked, match=f"pid {child.pid} on host elsewhere"):
            workdir_lock.acquire(bucket)
        monkeypatch.setattr(file_lock, "STALE_AFTER_SECONDS", 1)
        time.sleep(2)
        workdir_lock.acquire(bucket).release()
        assert "last refreshed" in caplog.text
        assert workdir_names.LOCK_FILE not in object_names(bucket)
        monkeypatch.undo()
        lock_path.write_text(json.dumps(record))  # the child's again
    finally:
        child.kill()
        child.wait()
    lock = workdir_lock.acquire(bucket)  # its holder killed: taken over at once
    assert f"pid {child.pid} on host {HOST}: its process {child.pid} is not running" in caplog.text
    assert json.loads(lock_path.read_text())["token"] == lock.record["token"]
    lock.release()
    assert workdir_names.LOCK_FILE not in object_names(bucket)


def test_a_lock_in_a_bucket_is_refreshed_and_released_only_while_it_is_ours(
        bucket, caplog, monkeypatch):
    monkeypatch.setattr(file_lock, "HEARTBEAT_SECONDS", 0.2)
    lock = workdir_lock.acquire(bucket)
    first = lock.generation
    time.sleep(1)
    assert lock.generation != first  # refreshed: rewritten, still this run's record
    assert json.loads(objects(bucket)[workdir_names.LOCK_FILE])["token"] == lock.record["token"]
    # Another run took it over (its lock judged stale): this run neither refreshes nor deletes it.
    other = json.dumps({"pid": 1, "host": "elsewhere", "token": "other"}).encode()
    files.gcs_object(f"{bucket}/{workdir_names.LOCK_FILE}").upload_from_string(other)
    time.sleep(1)
    lock.release()
    assert objects(bucket) == {workdir_names.LOCK_FILE: other}
    assert "no longer this run's" in caplog.text


RACE_SCRIPT = """
import sys
from albert_jax.train import workdir_lock
print("ready", flush=True)
sys.stdin.readline()  # the other child is ready too: go
try:
    lock = workdir_lock.acquire(sys.argv[1])
except workdir_lock.WorkdirLocked:
    print("refused", flush=True)
else:
    print("won", flush=True)
    sys.stdin.readline()  # held until the other child has answered
    lock.release()
"""


def read_line(child: subprocess.Popen, timeout: float = 120) -> str:
    """The child's next line of output; "" when it ends or says nothing for `timeout` s."""
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    return child.stdout.readline() if ready else ""


@pytest.mark.slow
def test_two_starts_at_the_same_moment_one_takes_the_lock_in_a_bucket(bucket):
    for attempt in range(2):
        workdir = f"{bucket}/race{attempt}"
        children = [subprocess.Popen([sys.executable, "-c", RACE_SCRIPT, workdir], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                    for _ in range(2)]
        try:
            # Both have imported the lock module before either is told to take the lock.
            assert [read_line(child) for child in children] == ["ready\n", "ready\n"]
            for child in children:
                child.stdin.write("go\n")
                child.stdin.flush()
            outcomes = sorted(read_line(child).strip() for child in children)
            assert outcomes == ["refused", "won"], outcomes
            for child in children:
                child.stdin.close()  # the winner lets go of the lock
                assert child.wait(timeout=120) == 0
        finally:
            for child in children:
                child.kill()
                child.wait()


# --- Through the CLI: the tiny pretraining run of test_reliability.py, in the bucket ---

def in_flight_checkpoint(workdir: str) -> int | None:
    """The step of a checkpoint being uploaded: objects under checkpoints/<step>/ and no commit
    marker yet (Orbax writes `commit_success.txt` last on object stores), newer than every
    committed step (an old step being deleted loses its marker too)."""
    names = object_names(f"{workdir}/checkpoints")
    steps = {int(name.split("/")[0]) for name in names if name.split("/")[0].isdigit()}
    committed = [step for step in steps if f"{step}/commit_success.txt" in names]
    pending = [step for step in steps if step > max(committed, default=0)
               and f"{step}/commit_success.txt" not in names]
    return min(pending) if pending else None


@pytest.mark.slow
def test_a_run_killed_during_a_checkpoint_upload_resumes_bit_identical_to_a_local_run(
        straight, data_flags, environment, bucket):
    flags = pretrain_flags(data_flags, bucket)
    process = start_cli(*flags, environment=environment, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=collect_lines, args=(process.stdout, output), daemon=True)
    reader.start()
    deadline = time.time() + 300
    # The bucket is listed from the first train record on (step 3; the first checkpoint is step
    # 4's), not while the run starts: each listing costs the test and the storage emulator CPU
    # the run would use.
    while not any(line.startswith("step       3/") for line in list(output)):
        assert process.poll() is None, "".join(output)[-3000:]
        assert time.time() < deadline, "the run did not reach step 3 in time"
        time.sleep(0.02)
    killed_at = None
    while killed_at is None:
        assert process.poll() is None, "".join(output)[-3000:]  # never caught an upload
        assert time.time() < deadline, "no checkpoint upload seen in time"
        killed_at = in_flight_checkpoint(bucket)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    reader.join()
    assert f"{killed_at}/commit_success.txt" not in object_names(f"{bucket}/checkpoints")
    assert workdir_names.LOCK_FILE in object_names(bucket)  # a SIGKILL leaves the lock

    resumed = run(flags, environment)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "taking over the lock" in resumed.stderr
    if killed_at > 4:
        assert f"Resuming from the checkpoint at step {killed_at - 4}" in resumed.stdout
    assert logged(epath.Path(bucket)) == logged(straight)  # each record once, in order, bit-exact
    assert_params_identical(epath.Path(bucket), straight)
    checked = verify(bucket, environment)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert checked.stdout.splitlines() == ["16 intact", "20 intact", "24 intact"]
    for step in (16, 20, 24):  # the checksums name every object of the step (the bucket listed)
        step_names = object_names(f"{bucket}/checkpoints/{step}")
        manifest = json.loads(objects(f"{bucket}/checkpoints/{step}")[integrity.MANIFEST_FILE])
        assert sorted(manifest["files"]) == sorted(set(step_names) - {
            integrity.MANIFEST_FILE, integrity.ORBAX_METADATA_FILE, "commit_success.txt"})
    names = objects(bucket)
    assert {workdir_names.CONFIG_FILE, workdir_names.METRICS_LOG_FILE,
            workdir_names.TOKENIZER_FILE} <= set(names)
    assert workdir_names.LOCK_FILE not in names
    event_files = [name for name in names if "tfevents" in name]
    assert len(event_files) == 2  # one per run
    resumed_events = scalars(read_events(names[max(event_files)]))
    resumed_from = killed_at - 4 if killed_at > 4 else 0  # the checkpoint before, if any
    assert [step for step, tag, _ in resumed_events if tag == "loss"] == [
        step for step in range(3, 25, 3) if step > resumed_from]


@pytest.mark.slow
def test_a_run_cut_off_from_the_bucket_for_20_seconds_carries_on(
        straight, data_flags, environment, bucket, storage_emulator):
    process = start_cli(*pretrain_flags(data_flags, bucket), environment=environment,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=collect_lines, args=(process.stdout, output), daemon=True)
    reader.start()
    deadline = time.time() + 300
    while not any(line.startswith("step       6/") for line in list(output)):
        assert process.poll() is None, "".join(output)[-3000:]
        assert time.time() < deadline, "the run did not reach step 6 in time"
        time.sleep(0.02)
    storage_emulator.stop()
    try:
        time.sleep(20)
    finally:
        storage_emulator.start()
    assert process.wait(timeout=600) == 0, "".join(output)[-3000:]
    reader.join()
    assert logged(epath.Path(bucket)) == logged(straight)
    assert_params_identical(epath.Path(bucket), straight)
    checked = verify(bucket, environment)
    assert checked.stdout.splitlines() == ["16 intact", "20 intact", "24 intact"]


@pytest.mark.slow
def test_two_concurrent_starts_on_a_bucket_workdir_one_trains_the_other_is_refused(
        data_flags, environment, bucket):
    winner, line = two_concurrent_starts(pretrain_flags(data_flags, bucket, total_steps=8),
                                         environment)
    assert (f"workdir {bucket} is in use: its lock {bucket}/run.lock is held by pid {winner} "
            f"on host {HOST}") in line
    assert [record["step"] for record in logged(epath.Path(bucket))] == [3, 6, 8]
    assert workdir_names.LOCK_FILE not in object_names(bucket)  # released at the end


@pytest.mark.slow
def test_a_fine_tuning_run_keeps_its_best_checkpoint_in_the_bucket(
        straight, environment, bucket, tmp_path):
    data_path = write_glue_task(str(tmp_path / "glue_data"), "mrpc", num_train=12, num_dev=6,
                                num_test=5, seed=1)
    result = run(["finetune", "--config=configs/glue.py:task=mrpc,runlocal",
                  f"--config.data.path={data_path}", f"--config.init_from={straight}",
                  "--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
                  "--config.total_steps=4", "--config.eval_every_steps=2",
                  "--config.checkpoint_every_steps=2", "--config.log_every_steps=2",
                  f"--workdir={bucket}"], environment)
    assert result.returncode == 0, result.stderr[-3000:]
    best = json.loads(objects(bucket)[workdir_names.BEST_FILE])
    records = [json.loads(line) for line in
               objects(bucket)[workdir_names.METRICS_LOG_FILE].decode().splitlines()]
    dev = {record["step"]: record[best["metric"]] for record in records
           if record.get("split") == "dev"}
    assert sorted(dev) == [2, 4] and best["value"] == max(dev.values())
    checked = verify(bucket, environment)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert checked.stdout.splitlines()[-1] == f"best/{best['step']} intact"
    assert workdir_names.LOCK_FILE not in object_names(bucket)
