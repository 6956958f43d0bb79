"""Launchers: the exact commands of launch.tpu / launch.gpu / launch.local, and running them.

Quoting is checked against a real shell: the remote command line, parsed by bash, must give
back the albert-jax arguments exactly as written (spaces, `=`, `*`, quotes).
"""
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

import launch  # noqa: E402
from launch import gpu, local, tpu  # noqa: E402

SETUP = "cd ~/albert_jax && source .venv/bin/activate"
ARGS = ["pretrain", "--config=configs/pretrain.py:size=base", "--workdir=gs://bucket/run 1",
        "--config.data.corpus=/data/my corpus/*.txt", "--config.data.tokenizer=it's.model"]
QUOTED = ("albert-jax pretrain --config=configs/pretrain.py:size=base "
          "'--workdir=gs://bucket/run 1' '--config.data.corpus=/data/my corpus/*.txt' "
          "'--config.data.tokenizer=it'\"'\"'s.model'")


def arguments_seen_by_bash(command: str) -> list[str]:
    """What `albert-jax` receives when bash runs `command` (albert-jax stubbed by printf)."""
    stub = "albert-jax() { printf '%s\\0' \"$@\"; }; "
    result = subprocess.run(["bash", "-c", stub + command], capture_output=True, text=True,
                            check=True)
    return result.stdout.split("\0")[:-1]


def test_remote_command_quotes_every_argument_for_the_remote_shell():
    command = launch.remote_command(SETUP, launch.with_multihost(ARGS))
    assert command == f"{SETUP} && {QUOTED} --multihost"
    assert arguments_seen_by_bash(launch.remote_command("", ARGS)) == ARGS


def test_multihost_is_added_once():
    assert launch.with_multihost(["pretrain"]) == ["pretrain", "--multihost"]
    assert launch.with_multihost(["pretrain", "--multihost"]) == ["pretrain", "--multihost"]
    assert launch.with_multihost(["pretrain", "--multihost=mpi4py"]) == [
        "pretrain", "--multihost=mpi4py"]


def test_tpu_dry_run_prints_the_gcloud_command_for_every_worker(capsys):
    assert tpu.main(["--tpu=my-v4-32", "--zone=us-central2-b", "--project=my-project",
                     "--dry_run", "--", *ARGS]) == 0
    expected = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-v4-32",
                "--zone=us-central2-b", "--project=my-project", "--worker=all",
                f"--command={SETUP} && {QUOTED} --multihost"]
    printed = capsys.readouterr().out
    assert printed.startswith("$ ")
    assert shlex.split(printed[2:]) == expected  # a user can paste the printed line
    assert tpu.gcloud_ssh(tpu="my-v4-32", zone="us-central2-b", project="my-project",
                          command=f"{SETUP} && {QUOTED} --multihost") == expected


def test_tpu_without_project_or_setup_and_with_the_users_multihost(capsys):
    tpu.main(["--tpu=t", "--zone=z", "--workdir_setup=", "--dry_run", "--", "pretrain",
              "--multihost=gcetpu"])
    assert shlex.split(capsys.readouterr().out[2:]) == [
        "gcloud", "compute", "tpus", "tpu-vm", "ssh", "t", "--zone=z", "--worker=all",
        "--command=albert-jax pretrain --multihost=gcetpu"]


def test_tpu_setup_installs_on_every_worker(capsys):
    tpu.main(["--tpu=t", "--zone=z", "--setup", "--repo=https://example.com/albert jax.git",
              "--dry_run"])
    command = shlex.split(capsys.readouterr().out[2:])[-1]
    assert command == (
        "--command=(test -d ~/albert_jax || git clone 'https://example.com/albert jax.git' "
        "~/albert_jax) && cd ~/albert_jax && python3 -m venv .venv && "
        ".venv/bin/pip install --upgrade pip && .venv/bin/pip install -e '.[tf]' 'jax[tpu]'")
    assert tpu.setup_command(None) == (
        "cd ~/albert_jax && python3 -m venv .venv && .venv/bin/pip install --upgrade pip && "
        ".venv/bin/pip install -e '.[tf]' 'jax[tpu]'")


@pytest.mark.parametrize("argv, message", [
    (["--zone=z", "--", "pretrain"], "the following arguments are required: --tpu"),
    (["--tpu=t", "--", "pretrain"], "the following arguments are required: --zone"),
    (["--tpu=t", "--zone=z"], "give the albert-jax command after `--`"),
    (["--tpu=t", "--zone=z", "--setup", "--", "pretrain"], "--setup installs and runs nothing"),
    (["--tpu=t", "--zone=z", "--repo=u", "--", "pretrain"], "--repo is used only with --setup"),
])
def test_tpu_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        tpu.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_slurm_script_runs_one_process_per_gpu(capsys, tmp_path):
    script_path = tmp_path / "job.sbatch"
    assert gpu.main(["slurm", "--nodes=4", "--gpus_per_node=8", "--partition=a100",
                     "--time=24:00:00", f"--script={script_path}", "--dry_run", "--",
                     *ARGS]) == 0
    expected = (
        "#!/bin/bash\n"
        "#SBATCH --job-name=albert-jax\n"
        "#SBATCH --nodes=4\n"
        "#SBATCH --ntasks-per-node=8\n"
        "#SBATCH --gpus-per-node=8\n"
        "#SBATCH --partition=a100\n"
        "#SBATCH --time=24:00:00\n"
        "#SBATCH --output=%x-%j.out\n"
        "# One process per GPU: jax reads its rank and GPU from SLURM's variables.\n"
        "set -e\n"
        f"{SETUP}\n"
        f"srun --kill-on-bad-exit=1 {QUOTED} --multihost\n")
    assert script_path.read_text() == expected
    assert capsys.readouterr().out == expected + f"# written to {script_path}\n"
    srun_line = expected.splitlines()[-1]
    assert arguments_seen_by_bash(srun_line.removeprefix("srun --kill-on-bad-exit=1 ")) == (
        ARGS + ["--multihost"])


def test_slurm_script_without_optional_settings():
    script = gpu.sbatch_script(["pretrain"], nodes=1, gpus_per_node=2, job_name="j",
                               workdir_setup="")
    assert script.splitlines() == [
        "#!/bin/bash", "#SBATCH --job-name=j", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=2",
        "#SBATCH --gpus-per-node=2", "#SBATCH --output=%x-%j.out",
        "# One process per GPU: jax reads its rank and GPU from SLURM's variables.",
        "set -e", "srun --kill-on-bad-exit=1 albert-jax pretrain --multihost"]


def test_host_list_gives_each_host_its_process_id(capsys):
    assert gpu.main(["hosts", "--hosts=me@gpu1,gpu2", "--coordinator_port=1234", "--dry_run",
                     "--", *ARGS]) == 0
    expected = [
        ["ssh", "-tt", host, f"{SETUP} && {QUOTED} --multihost --coordinator_address=gpu1:1234 "
                             f"--num_processes=2 --process_id={process_id}"]
        for process_id, host in enumerate(["me@gpu1", "gpu2"])]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" $ ", 1)[0] for line in lines] == ["[0]", "[1]"]
    assert [shlex.split(line.split(" $ ", 1)[1]) for line in lines] == expected
    assert gpu.ssh_commands(ARGS, hosts=["me@gpu1", "gpu2"], coordinator_port=1234,
                            workdir_setup=SETUP) == expected
    assert arguments_seen_by_bash(expected[1][3].removeprefix(SETUP + " && ")) == ARGS + [
        "--multihost", "--coordinator_address=gpu1:1234", "--num_processes=2", "--process_id=1"]


@pytest.mark.parametrize("argv, message", [
    (["slurm", "--gpus_per_node=8", "--", "pretrain"], "the following arguments are required: "
                                                       "--nodes"),
    (["slurm", "--nodes=0", "--gpus_per_node=8", "--", "pretrain"],
     "--nodes=0 and --gpus_per_node=8 must be at least 1"),
    (["slurm", "--nodes=2", "--gpus_per_node=8"], "give the albert-jax command after `--`"),
    (["hosts", "--", "pretrain"], "the following arguments are required: --hosts"),
    (["hosts", "--hosts=a,,b", "--", "pretrain"], "--hosts=a,,b: give distinct, non-empty"),
    (["hosts", "--hosts=a,a", "--", "pretrain"], "--hosts=a,a: give distinct, non-empty"),
    (["hosts", "--hosts=a,b", "--coordinator_port=70000", "--", "pretrain"],
     "--coordinator_port=70000 is not a port"),
    (["--", "pretrain"], "the following arguments are required: {slurm,hosts}"),
])
def test_gpu_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        gpu.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_local_dry_run_sets_each_process_environment(capsys, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false "
                                    "--xla_force_host_platform_device_count=8")
    assert local.main(["--num_processes=2", "--devices_per_process=4",
                       "--coordinator_port=12345", "--dry_run", "--", "pretrain",
                       "--workdir=runs/a b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for process_id, line in enumerate(lines):
        assert line.startswith(f"[{process_id}] $ ")
        words = shlex.split(line.split(" $ ", 1)[1])
        assert words == [
            "JAX_PLATFORMS=cpu",
            "XLA_FLAGS=--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4",
            "ALBERT_JAX_COORDINATOR_ADDRESS=127.0.0.1:12345", "ALBERT_JAX_NUM_PROCESSES=2",
            f"ALBERT_JAX_PROCESS_ID={process_id}", "PYTHONUNBUFFERED=1",
            sys.executable, "-m", "albert_jax.cli", "pretrain", "--workdir=runs/a b",
            "--multihost"]
    assert len(lines) == 2


def test_local_free_port_is_bindable():
    import socket
    port = local.free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))


@pytest.mark.parametrize("argv, message", [
    (["--num_processes=2"], "give the albert-jax command after `--`"),
    (["--num_processes=0", "--", "pretrain"], "--num_processes=0 and --devices_per_process=1 "
                                              "must be at least 1"),
])
def test_local_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        local.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_all_prefixes_output_and_returns_zero(capsys):
    status = launch.run_all([python("print('a'); print('b')"),
                             python("import sys; print('c', file=sys.stderr)")])
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["[0] a", "[0] b", "[1] c"]
    assert lines.index("[0] a") < lines.index("[0] b")


def test_run_all_stops_the_others_when_one_fails(capsys):
    started = time.monotonic()
    status = launch.run_all([python("import time; print('waiting', flush=True); time.sleep(120)"),
                             python("import sys, time; time.sleep(1); print('broken'); "
                                    "sys.exit(3)")])
    assert status == 3
    assert time.monotonic() - started < 60  # the sleeper was killed, not waited for
    captured = capsys.readouterr()
    assert "[1] broken" in captured.out.splitlines()
    assert "[launch] process 1 exited with status 3; stopping the others" in captured.err
    assert launch.exit_status(-signal.SIGKILL) == 137


def test_launcher_passes_sigterm_to_every_process():
    child = ("import signal, sys, time; signal.signal(signal.SIGTERM, "
             "lambda *_: (print('saving', flush=True), sys.exit(0))); "
             "print('ready', flush=True); time.sleep(120)")
    launcher = subprocess.Popen(
        python(f"import launch, sys; sys.exit(launch.run_all([{python(child)!r}] * 2))"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    while sum(line.endswith("ready") for line in lines) < 2:
        line = launcher.stdout.readline()
        assert line, "".join(lines)
        lines.append(line.rstrip("\n"))
    launcher.send_signal(signal.SIGTERM)
    rest, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0, rest
    assert sorted(rest.split()) == sorted(["[0]", "saving", "[1]", "saving"])
