"""Multi-host pretraining on this machine: two processes x 4 fake CPU devices (launch.local).

What a 2-host run must compute: each step's global batch is host 0's batch followed by host 1's
(`make_array_from_process_local_data` puts each host's rows on its own devices, in process
order), and the pipeline makes those the global batches of a one-host run (each host takes its
rows of one global stream; tests/test_pipeline.py pins it). So the reference is a plain run in
one process with 8 devices and the same mesh: its losses, final train state and data position
must be the 2-host run's.

The mesh is data=2 x fsdp=4 over the 8 devices of both processes: gradients and metrics are
reduced across the process boundary (gloo over TCP), and both processes write shards of the
Orbax checkpoint. (fsdp=8 works too, but its many small cross-process collectives make a step
~5x slower on CPU.)

Checkpoints cross process counts and meshes: a run saved by 2 processes on data=2 x fsdp=4 resumes
in 1 process on data=8, and one saved by 1 process on data=8 resumes in 2 processes on data=2 x
fsdp=4, each through the real resume path. The saved data position is the position in the global
batch stream (the same file on every process), so both continue exactly: their losses and final
state are those of one uninterrupted run of 2 x STEPS steps on data=8.
"""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")  # the reference

import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from albert_jax import config as config_lib  # noqa: E402
from albert_jax import distributed, pretraining  # noqa: E402
from albert_jax.model import AlbertForPreTraining  # noqa: E402
from albert_jax.train import checkpoint, loop, optim, sharding  # noqa: E402
from albert_jax.train import state as state_lib
from cli_fixtures import REPO, cli, config_flags, run_config, run_python_processes  # noqa: E402

STEPS = 4
# The run, typed; written as --config.KEY=VALUE for the CLI and set directly for the reference.
RUN = {"model": "tiny", "batch_size": 8, "log_every_steps": 1, "total_steps": STEPS,
       "checkpoint_every_steps": STEPS, "eval_steps": 0, "eval_batch_size": 8,
       "mesh.data": 2, "mesh.fsdp": 4,
       "optim.schedule": "constant", "optim.warmup_steps": 0, "optim.lr": 5e-3}
DATA_8 = {"mesh.data": 8, "mesh.fsdp": 1}  # the other mesh: one process's 8 devices on data
# Every metric a train record holds that depends on the params and the batch.
COMPARED = ("loss", "masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
            "sentence_order_accuracy", "grad_norm", "param_norm")


def train_records(workdir: Path) -> list[dict]:
    """The train records of metrics.jsonl, in order (eval records carry a "split")."""
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if "loss" in record and "split" not in record]


def restored_state(workdir: Path, config, step: int = STEPS):
    """The checkpoint of `step`, restored in this process onto 8 devices with `config.mesh`."""
    mesh = sharding.make_mesh(config.mesh)
    model = AlbertForPreTraining(config_lib.model_config(config))
    optimizer, _ = optim.make_optimizer(config.optim, config.total_steps)
    abstract_state, _ = state_lib.abstract_train_state(
        model, optimizer, mesh, pretraining.init_inputs(config.seq_len, config.data.max_predictions))
    checkpointer = checkpoint.Checkpointer(workdir / "checkpoints", read_only=True)
    try:
        return checkpointer.restore(step, abstract_state)[0]
    finally:
        checkpointer.close()


def train_in_this_process(config, workdir: Path) -> None:
    loop.train_and_evaluate(config, str(workdir), pretraining.PretrainingTask(
        config, config_lib.model_config(config)))


def assert_same_records(got: list[dict], expected: list[dict]) -> None:
    """Train records of the same steps, each metric equal to 1e-5."""
    assert [record["step"] for record in got] == [record["step"] for record in expected]
    for got_step, expected_step in zip(got, expected):
        for key in COMPARED:
            assert np.isfinite(got_step[key])
            np.testing.assert_allclose(got_step[key], expected_step[key], rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {got_step['step']} {key}")


def assert_same_state(state, expected_state) -> None:
    """Step, params and optimizer state equal to 1e-5."""
    jax.tree.map(lambda leaf, expected: np.testing.assert_allclose(
        np.asarray(leaf), np.asarray(expected), rtol=1e-5, atol=1e-6), state, expected_state)


def data_position(workdir: Path, step: int, file_name: str) -> dict:
    """The data iterator state one process saved with checkpoint `step`."""
    return json.loads((workdir / "checkpoints" / str(step) / "data" / file_name).read_text())


def launch_two_processes(settings: dict, workdir: Path, log: Path) -> subprocess.Popen:
    """`launch.local` 2 processes x 4 devices running `pretrain`; output to the file `log` (not
    a pipe: nobody reads it until the end)."""
    with log.open("w") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "launch.local", "--num_processes=2", "--devices_per_process=4",
             "--", "pretrain", *config_flags(settings), f"--workdir={workdir}"],
            cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: the cleanup ends its children too


def finish(launched: subprocess.Popen, log: Path) -> str:
    """Waits for a launch (killing its process group if the wait fails); its output."""
    try:
        launched.wait(timeout=600)
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
    output = log.read_text()
    assert launched.returncode == 0, output[-5000:]
    return output


@pytest.fixture(scope="module")
def two_hosts(demo_pretraining_data, tmp_path_factory) -> tuple[Path, str, Path]:
    """(workdir, output) of STEPS steps on 2 processes x 4 devices (data=2 x fsdp=4), and the
    workdir of the same run in this process on 8 devices, computed while the processes run."""
    assert jax.device_count() == 8, "the reference needs 8 devices (XLA_FLAGS set too late?)"
    root = tmp_path_factory.mktemp("two_hosts")
    launched = launch_two_processes({**demo_pretraining_data, **RUN}, root / "two_hosts",
                                    root / "two_hosts.log")
    try:
        train_in_this_process(run_config({**demo_pretraining_data, **RUN}), root / "reference")
    finally:
        output = finish(launched, root / "two_hosts.log")
    return root / "two_hosts", output, root / "reference"


@pytest.fixture(scope="module")
def uninterrupted(demo_pretraining_data, tmp_path_factory) -> Path:
    """One run of 2 x STEPS steps in this process on data=8, checkpoints at STEPS and 2 x STEPS:
    what a run resumed at STEPS on any process count and mesh must compute."""
    workdir = tmp_path_factory.mktemp("uninterrupted") / "run"
    train_in_this_process(
        run_config({**demo_pretraining_data, **RUN, **DATA_8, "total_steps": 2 * STEPS}), workdir)
    return workdir


@pytest.mark.slow
def test_two_processes_train_as_one_eight_device_job(demo_pretraining_data, two_hosts):
    workdir, output, reference = two_hosts
    config = run_config({**demo_pretraining_data, **RUN})

    for process in range(2):
        assert (f"[{process}] multihost: process {process} of 2, 4 local / 8 global cpu devices "
                "(cluster: explicit settings)") in output
    # Only process 0 reports: one progress line per step, one metrics record per step.
    progress = [line for line in output.splitlines() if f"step       1/{STEPS}" in line]
    assert len(progress) == 1 and progress[0].startswith("[0] "), progress
    assert len(list((workdir / "tensorboard").iterdir())) == 1  # one event file
    assert (json.loads((workdir / "config.json").read_text())
            == json.loads((reference / "config.json").read_text()))

    got = train_records(workdir)
    assert [record["step"] for record in got] == list(range(1, STEPS + 1))  # each step once
    assert_same_records(got, train_records(reference))
    assert got[-1]["loss"] < got[0]["loss"]  # it trained

    # The checkpoint both processes wrote restores (here onto one process) to the reference's
    # state, and each process saved its own data position: the one the reference's stream reached.
    state = restored_state(workdir, config)
    assert int(state.step) == STEPS
    assert_same_state(state, restored_state(reference, config))
    written_by = sorted(path.name for path in (workdir / "checkpoints" / str(STEPS) / "state")
                        .glob("ocdbt.process_*"))
    assert written_by == ["ocdbt.process_0", "ocdbt.process_1"]  # Orbax's per-process shards
    data_dir = workdir / "checkpoints" / str(STEPS) / "data"
    assert sorted(path.name for path in data_dir.iterdir() if path.suffix == ".json") == [
        "process_0-of-2.json", "process_1-of-2.json"]
    for process in range(2):
        assert data_position(workdir, STEPS, f"process_{process}-of-2.json") == data_position(
            reference, STEPS, "process_0-of-1.json")


@pytest.mark.slow
def test_two_processes_as_two_slices_train_as_the_one_slice_mesh(demo_pretraining_data,
                                                                 two_hosts, tmp_path):
    """mesh.num_slices=2 with each process standing for a slice (its 4 CPU devices): data=2
    spans the slices, fsdp=4 stays inside each. The hybrid layout puts each slice in its own
    data row, which is the one-slice mesh's layout of the same shape here, so the run must
    compute exactly what the 2-process one-slice run computed."""
    workdir = tmp_path / "two_slices"
    launched = launch_two_processes({**demo_pretraining_data, **RUN, "mesh.num_slices": 2},
                                    workdir, tmp_path / "two_slices.log")
    output = finish(launched, tmp_path / "two_slices.log")
    assert "[0] multihost: process 0 of 2, 4 local / 8 global cpu devices" in output
    one_slice_workdir, _, reference = two_hosts
    got, one_slice = train_records(workdir), train_records(one_slice_workdir)
    assert [[record[key] for key in COMPARED] for record in got] == [
        [record[key] for key in COMPARED] for record in one_slice]  # bit for bit
    assert_same_records(got, train_records(reference))
    config = run_config({**demo_pretraining_data, **RUN})
    jax.tree.map(np.testing.assert_array_equal, restored_state(workdir, config),
                 restored_state(one_slice_workdir, config))


@pytest.mark.slow
def test_two_process_checkpoint_resumes_in_one_process_on_another_mesh(
        demo_pretraining_data, two_hosts, uninterrupted, tmp_path, capsys):
    """2 processes on data=2 x fsdp=4 saved step STEPS; this process resumes on data=8."""
    workdir = tmp_path / "run"
    shutil.copytree(two_hosts[0], workdir)
    config = run_config({**demo_pretraining_data, **RUN, **DATA_8, "total_steps": 2 * STEPS})
    # Right after the restore onto the other mesh: the uninterrupted run's state at STEPS.
    assert_same_state(restored_state(workdir, config), restored_state(uninterrupted, config))
    capsys.readouterr()

    train_in_this_process(config, workdir)
    printed = capsys.readouterr().out
    assert f"Resuming from the checkpoint at step {STEPS} in {workdir}." in printed
    assert ("Data position: saved with process count 2, restored with 1: every process saved the "
            "same position in the global batch stream") in printed
    assert_same_records(train_records(workdir), train_records(uninterrupted))
    assert_same_state(restored_state(workdir, config, 2 * STEPS),
                      restored_state(uninterrupted, config, 2 * STEPS))
    assert data_position(workdir, 2 * STEPS, "process_0-of-1.json") == data_position(
        uninterrupted, 2 * STEPS, "process_0-of-1.json")


@pytest.mark.slow
def test_one_process_checkpoint_resumes_in_two_processes_on_another_mesh(
        demo_pretraining_data, uninterrupted, tmp_path):
    """This process saves step STEPS on data=8; 2 processes resume on data=2 x fsdp=4."""
    workdir = tmp_path / "run"
    train_in_this_process(run_config({**demo_pretraining_data, **RUN, **DATA_8}), workdir)
    log = tmp_path / "two_hosts.log"
    output = finish(launch_two_processes(
        {**demo_pretraining_data, **RUN, "total_steps": 2 * STEPS}, workdir, log), log)

    for process in range(2):
        assert f"[{process}] Resuming from the checkpoint at step {STEPS} in {workdir}." in output
    # One line, from process 0, says how the data position was read.
    data_lines = [line for line in output.splitlines() if "Data position:" in line]
    assert data_lines == ["[0] Data position: saved with process count 1, restored with 2: every "
                          "process saved the same position in the global batch stream, so the "
                          "run goes on with the batches an uninterrupted run would see."]
    assert_same_records(train_records(workdir), train_records(uninterrupted))
    config = run_config({**demo_pretraining_data, **RUN, **DATA_8, "total_steps": 2 * STEPS})
    assert_same_state(restored_state(workdir, config, 2 * STEPS),
                      restored_state(uninterrupted, config, 2 * STEPS))
    for process in range(2):
        assert data_position(workdir, 2 * STEPS, f"process_{process}-of-2.json") == (
            data_position(uninterrupted, 2 * STEPS, "process_0-of-1.json"))


@pytest.mark.slow
def test_a_run_resumed_inside_a_log_interval_logs_what_an_uninterrupted_run_does(
        demo_pretraining_data, tmp_path):
    """On the data=8 mesh: 6 steps, a train record every 3, checkpoints at 4 and 6. Resumed from
    step 4 (as after a kill past it), the record of step 6 averages steps 4-6, as the
    uninterrupted run's does: step 4 from the interval the checkpoint saved."""
    config = run_config({**demo_pretraining_data, **RUN, **DATA_8, "total_steps": 6,
                         "log_every_steps": 3})
    straight, workdir = tmp_path / "straight", tmp_path / "resumed"
    train_in_this_process(config, straight)
    shutil.copytree(straight, workdir)
    shutil.rmtree(workdir / "checkpoints" / "6")
    train_in_this_process(config, workdir)
    got, expected = train_records(workdir), train_records(straight)
    assert [record["step"] for record in got] == [3, 6]
    assert [[record[key] for key in COMPARED] for record in got] == [
        [record[key] for key in COMPARED] for record in expected]  # bit for bit


def test_auto_detected_slurm_environment(tmp_path):
    """Under srun, `--multihost` alone: jax reads the ranks from SLURM's variables."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = ("from albert_jax import distributed; distributed.initialize(True); import jax; "
              "from jax.experimental import multihost_utils; "
              "print('sum', int(multihost_utils.process_allgather(jax.process_index() + 1).sum()))")
    environments = [{**os.environ, "JAX_PLATFORMS": "cpu", "SLURM_JOB_ID": "4242",
                     "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2",
                     "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank),
                     "JAX_COORDINATOR_PORT": str(port), "XLA_FLAGS": ""} for rank in range(2)]
    finished = run_python_processes([script, script], environments, cwd=tmp_path)
    for rank, (returncode, output) in enumerate(finished):
        assert returncode == 0, output[-3000:]
        assert (f"multihost: process {rank} of 2, 1 local / 2 global cpu devices "
                "(cluster: SLURM)") in output
        assert "sum 3" in output  # 1 + 2: a collective over both processes


@pytest.fixture
def no_cluster(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_", "ALBERT_JAX_", "JAX_COORDINATOR",
                            "KUBERNETES_SERVICE_HOST")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("arguments, message", [
    (dict(process_id=1), "--process_id given without --multihost"),
    (dict(coordinator_address="h1:1234", num_processes=2),
     "--coordinator_address, --num_processes given without --multihost"),
])
def test_settings_without_multihost_are_refused(no_cluster, arguments, message):
    with pytest.raises(ValueError, match=message):
        distributed.initialize(False, **arguments)


@pytest.mark.parametrize("arguments, message", [
    (dict(num_processes=2, process_id=0),
     r"no cluster environment detected .* and --coordinator_address not given: pass "
     r"--coordinator_address=HOST:PORT"),
    (dict(coordinator_address="h1:1234"), "--num_processes, --process_id not given"),
    (dict(coordinator_address="h1", num_processes=2, process_id=0),
     r"--coordinator_address='h1' is not HOST:PORT"),
    (dict(coordinator_address="h1:99999", num_processes=2, process_id=0), "is not HOST:PORT"),
    (dict(coordinator_address="h1:1234", num_processes=2, process_id=2),
     r"--process_id=2 must be below --num_processes=2 \(process ids are 0 .. 1\)"),
    (dict(coordinator_address="h1:1234", num_processes=0, process_id=0),
     "--num_processes=0 must be at least 1"),
])
def test_half_given_or_malformed_settings_are_refused(no_cluster, arguments, message):
    with pytest.raises(ValueError, match=message):
        distributed.initialize(True, **arguments)
    assert not jax.distributed.is_initialized()


def test_settings_from_the_environment_and_named_clusters(no_cluster, monkeypatch):
    monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "two")
    with pytest.raises(ValueError, match="ALBERT_JAX_NUM_PROCESSES='two' is not a valid "
                                         "num_processes"):
        distributed.initialize(True, coordinator_address="h1:1234", process_id=0)
    monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "2")
    monkeypatch.setenv(distributed.ENV_PROCESS_ID, "3")
    with pytest.raises(ValueError, match="ALBERT_JAX_PROCESS_ID=3 must be below "
                                         "ALBERT_JAX_NUM_PROCESSES=2"):
        distributed.initialize(True, coordinator_address="h1:1234")
    with pytest.raises(ValueError, match="--process_id=2 must be below ALBERT_JAX_NUM_PROCESSES=2"):
        distributed.initialize(True, coordinator_address="h1:1234", process_id=2)
    monkeypatch.delenv(distributed.ENV_NUM_PROCESSES)
    monkeypatch.delenv(distributed.ENV_PROCESS_ID)
    with pytest.raises(ValueError, match="--multihost=slurm: no SLURM environment here"):
        distributed.initialize("slurm")
    with pytest.raises(ValueError, match=r"--multihost='pbs': use true, false or one of"):
        distributed.initialize("pbs")


def test_cli_names_the_bad_multihost_setting(tmp_path):
    result = cli("pretrain", "--config=configs/pretrain.py:runlocal", f"--workdir={tmp_path}",
                 "--num_processes=2", timeout=300)
    assert result.returncode != 0
    assert ("albert-jax pretrain: error: --num_processes given without --multihost"
            in result.stderr)
    assert "Traceback" not in result.stderr
    result = cli("pretrain", "--multihost=pbs", timeout=300)
    assert result.returncode != 0
    assert "--multihost=pbs: use true, false or one of ['gcetpu', 'gketpu', 'mpi4py'" in (
        result.stderr)


def test_data_positions_that_differ_between_processes_do_not_resume_on_another_count(tmp_path):
    """An iterator whose saved state differs per process (not one of this project's: theirs is
    the global position) cannot continue on another process count: one clear error."""
    def iterator():
        return iter(grain.MapDataset.range(64).batch(8).to_iter_dataset())

    saved_iterator = iterator()
    next(saved_iterator)
    checkpointer = checkpoint.Checkpointer(tmp_path, async_save=False)
    state = {"step": np.int32(1), "params": {"kernel": np.ones((2, 2), np.float32)}}
    checkpointer.save(1, state, saved_iterator, "{}", force=True)
    # What 2 processes with different positions would have written, in place of 1 process's file.
    data_dir = tmp_path / "1" / "data"
    (data_dir / "process_0-of-1.json").rename(data_dir / "process_0-of-2.json")
    next(saved_iterator)
    (data_dir / "process_1-of-2.json").write_text(json.dumps(saved_iterator.get_state()))
    with pytest.raises(ValueError, match=(
            r"the data iterator states in .*/1/data differ between the 2 processes that saved "
            r"them \(process_0-of-2.json, process_1-of-2.json\), so a run with process count 1 "
            r"cannot continue their data order: resume this checkpoint with process count 2")):
        checkpointer.restore(1, jax.eval_shape(lambda: state), iterator())
    checkpointer.close()
