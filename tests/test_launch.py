"""Launchers: the exact commands of launch.tpu / launch.gpu / launch.local, and running them.

Every dry run is a golden file (tests/golden/launch_*.txt), compared exactly; regenerate them
after a deliberate change with `ALBERT_JAX_REGENERATE_GOLDEN=1 pytest tests/test_launch.py` and
review the diff. Quoting is checked against a real shell: the remote command line, parsed by
bash, must give back the albert-jax arguments exactly as written, hostile ones included (spaces,
quotes, `;`, `$(...)`, backticks). TPU lifecycles run against a fake `gcloud` on PATH that logs
its arguments and answers `describe` from a script.
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN_DIR = Path(__file__).parent / "golden"
REGENERATE_GOLDEN = os.environ.get("ALBERT_JAX_REGENERATE_GOLDEN") == "1"

from launch import command_line, gpu, local, processes, tpu, tpu_commands  # noqa: E402

SETUP = "cd ~/albert_jax && source .venv/bin/activate"
ARGS = ["pretrain", "--config=configs/pretrain.py:size=base", "--workdir=gs://bucket/run 1",
        "--config.data.corpus=/data/my corpus/*.txt", "--config.data.tokenizer=it's.model"]
QUOTED = ("albert-jax pretrain --config=configs/pretrain.py:size=base "
          "'--workdir=gs://bucket/run 1' '--config.data.corpus=/data/my corpus/*.txt' "
          "'--config.data.tokenizer=it'\"'\"'s.model'")
# Arguments a careless launcher would let the remote shell split, run or expand.
HOSTILE = ["pretrain", "--config=configs/pretrain.py:size=base",
           "--workdir=gs://bucket/run 1; echo $(whoami) `id`",
           "--config.data.corpus=/data/my corpus/*.txt",
           "--config.data.tokenizer=it's \"the\" model"]
TPU = ["--tpu=my-v4-32", "--zone=us-central2-b", "--project=my-project"]
REPO_URL = "https://github.com/example/albert_jax.git"
UP = ["up", *TPU, "--accelerator_type=v4-32", "--spot", f"--repo={REPO_URL}"]
FAST = ["--poll_seconds=0", "--settle_seconds=0"]  # up against the fake gcloud: no waiting


def arguments_seen_by_bash(command: str) -> list[str]:
    """What `albert-jax` receives when bash runs `command` (albert-jax stubbed by printf)."""
    stub = "albert-jax() { printf '%s\\0' \"$@\"; }; "
    result = subprocess.run(["bash", "-c", stub + command], capture_output=True, text=True,
                            check=True)
    return result.stdout.split("\0")[:-1]


def with_dry_run(argv: list[str]) -> list[str]:
    """`argv` with --dry_run among the launcher's flags (after the verb, before `--`)."""
    return [argv[0], "--dry_run", *argv[1:]]


@pytest.fixture(autouse=True)
def no_real_cluster_commands(tmp_path_factory, monkeypatch):
    """gcloud and sbatch that fail loudly, first on PATH: no test reaches real ones."""
    bin_dir = tmp_path_factory.mktemp("refusing_bin")
    for name in ("gcloud", "sbatch"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho 'a test ran {name}' >&2\nexit 97\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def assert_golden(name: str, text: str) -> None:
    golden = GOLDEN_DIR / name
    if REGENERATE_GOLDEN:
        golden.write_text(text)
    assert text == golden.read_text(), f"{name} changed; diff it against the golden file"


def printed_commands(text: str) -> list[list[str]]:
    """The argv of every `$ ` line a launcher printed (each must be a valid shell line)."""
    return [shlex.split(line[2:]) for line in text.splitlines() if line.startswith("$ ")]


def remote_albert_jax_args(ssh_argv: list[str]) -> list[str]:
    """The albert-jax arguments in a `gcloud ... ssh --command=...` argv, as shlex parses them."""
    words = shlex.split(ssh_argv[-1].removeprefix("--command="))
    return words[words.index("albert-jax") + 1:words.index("2>&1")]


# The shared command-line helpers.

def test_remote_command_quotes_every_argument_for_the_remote_shell():
    command = command_line.remote_command(SETUP, command_line.with_multihost(ARGS))
    assert command == f"{SETUP} && {QUOTED} --multihost"
    assert arguments_seen_by_bash(command_line.remote_command("", ARGS)) == ARGS
    assert arguments_seen_by_bash(command_line.remote_command("", HOSTILE)) == HOSTILE


def test_multihost_is_added_once():
    assert command_line.with_multihost(["pretrain"]) == ["pretrain", "--multihost"]
    assert command_line.with_multihost(["pretrain", "--multihost"]) == ["pretrain", "--multihost"]
    assert command_line.with_multihost(["pretrain", "--multihost=mpi4py"]) == [
        "pretrain", "--multihost=mpi4py"]


# launch.tpu: the dry runs of every verb.

GOLDEN_DRY_RUNS = {
    "launch_tpu_create.txt": ["create", *TPU, "--accelerator_type=v4-32", "--spot"],
    "launch_tpu_create_queued.txt": ["create", "--tpu=my-v5e", "--zone=us-west4-a",
                                     "--accelerator_type=v5litepod-16", "--queued", "--spot"],
    "launch_tpu_create_preemptible.txt": ["create", *TPU, "--accelerator_type=v3-8",
                                          "--runtime_version=tpu-vm-base", "--preemptible"],
    "launch_tpu_setup.txt": ["setup", *TPU, f"--repo={REPO_URL}", "--branch=my-branch"],
    "launch_tpu_setup_gcsfuse.txt": ["setup", *TPU, f"--repo={REPO_URL}",
                                     "--gcsfuse=my-bucket:/mnt/my bucket"],
    "launch_tpu_run.txt": ["run", *TPU, "--", *HOSTILE],
    "launch_tpu_logs.txt": ["logs", *TPU],
    "launch_tpu_delete.txt": ["delete", *TPU],
    "launch_tpu_delete_queued.txt": ["delete", *TPU, "--queued"],
    "launch_tpu_up.txt": [*UP, "--", *HOSTILE],
    "launch_tpu_create_slices.txt": ["create", "--tpu=my-v5e", "--zone=us-west4-a",
                                     "--num_slices=2", "--accelerator_type=v5litepod-256",
                                     "--spot"],
    "launch_tpu_run_slices.txt": ["run", "--tpu=my-v5e", "--zone=us-west4-a", "--num_slices=2",
                                  "--", *HOSTILE],
    "launch_tpu_logs_slices.txt": ["logs", "--tpu=my-v5e", "--zone=us-west4-a",
                                   "--num_slices=2"],
    "launch_tpu_up_slices.txt": ["up", "--tpu=my-v5e", "--zone=us-west4-a", "--num_slices=2",
                                 "--accelerator_type=v5litepod-256", "--spot",
                                 f"--repo={REPO_URL}", "--", "pretrain",
                                 "--config.mesh.num_slices=2", "--workdir=gs://bucket/run3"],
    "launch_tpu_up_queued_keep.txt": ["up", "--tpu=my-v5e", "--zone=us-west4-a", "--queued",
                                      "--accelerator_type=v5litepod-16", "--spot",
                                      f"--repo={REPO_URL}", "--max_retries=5", "--keep", "--",
                                      "pretrain", "--workdir=gs://bucket/run2"],
}


@pytest.mark.parametrize("name", sorted(GOLDEN_DRY_RUNS))
def test_tpu_dry_run_matches_its_golden_file(capsys, name):
    assert tpu.main(with_dry_run(GOLDEN_DRY_RUNS[name])) == 0
    printed = capsys.readouterr().out
    assert_golden(name, printed)
    commands = printed_commands(printed)
    assert commands and all(argv[:3] == ["gcloud", "compute", "tpus"] for argv in commands)
    assert all(line.startswith(("$ ", "# ")) for line in printed.splitlines())


def test_tpu_without_a_verb_is_run(capsys):
    tpu.main([*TPU, "--dry_run", "--", *HOSTILE])
    assert capsys.readouterr().out == (GOLDEN_DIR / "launch_tpu_run.txt").read_text()


def test_tpu_run_keeps_hostile_arguments_inside_their_argument(capsys):
    tpu.main(["run", *TPU, "--dry_run", "--", *HOSTILE])
    [argv] = printed_commands(capsys.readouterr().out)
    assert argv[:-1] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-v4-32",
                         "--zone=us-central2-b", "--project=my-project", "--worker=all"]
    assert remote_albert_jax_args(argv) == HOSTILE + ["--multihost"]


def test_tpu_run_command_in_bash_gives_the_arguments_and_status_and_logs(tmp_path):
    """The run line executed by bash: exact argv, albert-jax's status (not tee's), and a log
    at a hostile path, `~/` expanded."""
    log_name = "it's a log; $(touch pwned) `x`.txt"
    command = tpu_commands.run_command("", HOSTILE, f"~/{log_name}")
    stub = "albert-jax() { printf '%s\\0' \"$@\"; return 3; }; "
    result = subprocess.run(["bash", "-c", stub + command], capture_output=True, text=True,
                            env={**os.environ, "HOME": str(tmp_path)}, cwd=tmp_path)
    assert result.returncode == 3
    assert result.stdout.split("\0")[:-1] == HOSTILE
    assert sorted(path.name for path in tmp_path.iterdir()) == [log_name]
    assert (tmp_path / log_name).read_text() == result.stdout


def test_tpu_setup_clones_the_repo_and_branch_as_single_words(capsys):
    repo, branch = "https://example.com/a b;$(x).git", "feature/it's"
    tpu.main(["setup", *TPU, f"--repo={repo}", f"--branch={branch}", "--dry_run"])
    [argv] = printed_commands(capsys.readouterr().out)
    words = shlex.split(argv[-1].removeprefix("--command="))
    assert words.count(repo) == 2 and words.count(branch) == 1
    assert words[words.index("fetch") + 1:words.index("fetch") + 3] == [repo, branch]
    assert tpu_commands.setup_command(None) == (
        "cd ~/albert_jax && python3 -m pip install --user --upgrade uv && "
        "~/.local/bin/uv venv --allow-existing --python=3.12 .venv && "
        "~/.local/bin/uv pip install --python=.venv/bin/python -e '.[tf,tpu,sweep]'")


def test_tpu_setup_gcsfuse_steps_in_bash_mount_the_bucket_once(tmp_path):
    """The gcsfuse steps run by bash, with sudo, mountpoint and gcsfuse stubs that log their
    arguments: gcsfuse already installed, the mount point made, owned and mounted once."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, status in (("sudo", 0), ("gcsfuse", 0), ("mountpoint", 1)):
        (bin_dir / name).write_text(f"#!/bin/sh\nprintf '%s|' {name} \"$@\" >> '{log}'\n"
                                    f"echo >> '{log}'\nexit {status}\n")
        (bin_dir / name).chmod(0o755)
    steps = tpu_commands.gcsfuse_steps("my-bucket", "/mnt/my bucket")
    result = subprocess.run(["bash", "-c", " && ".join(steps)], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    ids = f"{os.getuid()}:{os.getgid()}"
    assert log.read_text().splitlines() == [
        "sudo|mkdir|-p|/mnt/my bucket|", f"sudo|chown|{ids}|/mnt/my bucket|",
        "mountpoint|-q|/mnt/my bucket|", "gcsfuse|--implicit-dirs|my-bucket|/mnt/my bucket|"]


def test_tpu_setup_gcsfuse_takes_a_gs_prefix(capsys):
    tpu.main(["setup", *TPU, "--gcsfuse=gs://my-bucket:/mnt/data", "--dry_run"])
    [argv] = printed_commands(capsys.readouterr().out)
    assert argv[-1].endswith("(mountpoint -q /mnt/data || gcsfuse --implicit-dirs my-bucket "
                             "/mnt/data)")


def test_tpu_without_project_or_workdir_setup_and_with_the_users_multihost(capsys):
    tpu.main(["run", "--tpu=t", "--zone=z", "--workdir_setup=", "--log_file=/tmp/a b.log",
              "--dry_run", "--", "pretrain", "--multihost=gcetpu"])
    assert printed_commands(capsys.readouterr().out) == [[
        "gcloud", "compute", "tpus", "tpu-vm", "ssh", "t", "--zone=z", "--worker=all",
        "--command=set -o pipefail && albert-jax pretrain --multihost=gcetpu 2>&1 | "
        "tee -a '/tmp/a b.log'"]]


def test_remote_path_leaves_only_a_leading_tilde_to_the_shell():
    assert tpu_commands.remote_path("~/a b") == "~/'a b'"
    assert tpu_commands.remote_path("/x/~/a") == "'/x/~/a'"
    assert tpu_commands.remote_path("~user/a") == "'~user/a'"


def test_default_runtime_versions():
    assert tpu_commands.default_runtime_version("v4-32") == "tpu-ubuntu2204-base"
    assert tpu_commands.default_runtime_version("v5litepod-256") == "v2-alpha-tpuv5-lite"
    assert tpu_commands.default_runtime_version("v5p-8") == "v2-alpha-tpuv5"
    assert tpu_commands.default_runtime_version("v6e-8") == "v2-alpha-tpuv6e"
    assert tpu_commands.default_runtime_version("v9-8") is None


@pytest.mark.parametrize("argv, message", [
    (["run", "--zone=z", "--", "pretrain"], "the following arguments are required: --tpu"),
    (["--tpu=t", "--", "pretrain"], "the following arguments are required: --zone"),
    (["run", "--tpu=t", "--zone=z"], "give the albert-jax command after `--`"),
    (["up", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--repo=r"],
     "give the albert-jax command after `--`"),
    (["create", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--", "pretrain"],
     "create runs no albert-jax command: drop what follows `--`"),
    (["logs", "--tpu=t", "--zone=z", "--", "pretrain"], "logs runs no albert-jax command"),
    (["create", "--tpu=t", "--zone=z"], "the following arguments are required: "
                                        "--accelerator_type"),
    (["create", "--tpu=t", "--zone=z", "--accelerator_type=v9-8"],
     "--accelerator_type=v9-8: no default runtime for this generation; give --runtime_version"),
    (["create", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--spot", "--preemptible"],
     "argument --preemptible: not allowed with argument --spot"),
    (["create", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--queued", "--preemptible"],
     "--preemptible does not apply to a queued resource: use --spot with --queued"),
    (["setup", "--tpu=t", "--zone=z", "--branch=b"], "--branch=b needs --repo=GIT_URL"),
    (["delete", "--tpu=t", "--zone=z", "--spot"], "unrecognized arguments: --spot"),
    (["setup", "--tpu=t", "--zone=z", "--gcsfuse=my-bucket"],
     "--gcsfuse=my-bucket: give BUCKET:/MOUNT/PATH, e.g. my-bucket:/mnt/my-bucket"),
    (["setup", "--tpu=t", "--zone=z", "--gcsfuse=my-bucket:mnt/data"],
     "--gcsfuse=my-bucket:mnt/data: give BUCKET:/MOUNT/PATH"),
    (["up", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--", "pretrain"],
     "up installs albert-jax on a new TPU VM: give --repo=GIT_URL"),
    (["up", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--repo=r", "--", "pretrain",
      "--workdir", "runs/x"],
     "--workdir=runs/x is on the TPU VM's disk, which a recreated TPU does not have: give a "
     "gs:// workdir"),
    (["up", "--tpu=t", "--zone=z", "--accelerator_type=v4-8", "--repo=r", "--max_retries=-1",
      "--", "pretrain"],
     "--max_retries=-1, --poll_seconds=30 and --settle_seconds=60 must not be negative"),
    ([], "the following arguments are required: {create,setup,run,logs,delete,up}"),
])
def test_tpu_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        tpu.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# launch.tpu against a fake gcloud.

FAKE_GCLOUD = '''#!{python}
"""A stand-in for gcloud: logs its argv to calls.jsonl and answers from answers.json.

answers.json maps a step ("tpu-vm describe", "queued-resources create", "tpu-vm ssh run", ...)
to the answers of its next calls: a state (printed), an exit status, or "hang" (sleeps).
A step may name its TPU VM ("tpu-vm ssh run my-v5e-1"): then that VM's calls answer from it.
A step without an entry succeeds; one whose answers are used up fails loudly. An answer
{{"after_hang": status}} waits until another call hangs, then exits with `status`. Several
fakes may run at once (the slices of a multislice run): answers.json is read and written under
a lock.
"""
import fcntl, json, os, pathlib, sys, time
directory = pathlib.Path(os.environ["FAKE_GCLOUD_DIR"])
argv = sys.argv[1:]
with open(directory / "calls.jsonl", "a") as log:
    log.write(json.dumps(["gcloud", *argv]) + "\\n")
step = " ".join(argv[2:4])
if step == "tpu-vm ssh":
    step += " run" if "albert-jax" in argv[-1] else " other"
with open(directory / "answers.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    answers = json.loads((directory / "answers.json").read_text())
    if f"{{step}} {{argv[4]}}" in answers:
        step = f"{{step}} {{argv[4]}}"
    if step not in answers:
        sys.exit(0)
    if not answers[step]:
        sys.exit(f"fake gcloud: no answer left for {{step}}")
    answer = answers[step].pop(0)
    (directory / "answers.json").write_text(json.dumps(answers))
if isinstance(answer, dict):
    while not (directory / "hanging").exists():
        time.sleep(0.01)
    sys.exit(answer["after_hang"])
if answer == "hang":
    (directory / "hanging").touch()
    time.sleep(60)
elif isinstance(answer, str):
    print(answer)
else:
    sys.exit(answer)
'''


@pytest.fixture
def fake_gcloud(tmp_path, monkeypatch):
    """Puts the fake gcloud first on PATH; returns (set its answers, read its calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "gcloud"
    script.write_text(FAKE_GCLOUD.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GCLOUD_DIR", str(tmp_path))

    def answer(**answers: list) -> None:
        steps = {step.replace("_", " ").replace("tpu vm", "tpu-vm")
                 .replace("queued resources", "queued-resources"): values
                 for step, values in answers.items()}
        (tmp_path / "answers.json").write_text(json.dumps(steps))

    def calls() -> list[list[str]]:
        path = tmp_path / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() \
            else []

    answer()
    return answer, calls


def step_names(calls: list[list[str]]) -> list[str]:
    """`tpu-vm create`, `tpu-vm ssh setup`, `tpu-vm ssh run`, `queued-resources delete`..."""
    names = []
    for argv in calls:
        name = " ".join(argv[3:5])
        if name == "tpu-vm ssh":
            name += " run" if "albert-jax" in argv[-1] else " setup"
        names.append(name)
    return names


def dry_run_commands(capsys, argv: list[str]) -> list[list[str]]:
    assert tpu.main(with_dry_run(argv)) == 0
    return printed_commands(capsys.readouterr().out)


def test_up_recreates_a_preempted_tpu_once_and_deletes_it_at_the_end(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    argv = [*UP, *FAST, "--", *HOSTILE]
    create, describe, setup, run, check, delete = dry_run_commands(capsys, argv)
    assert check == describe
    answer(tpu_vm_describe=["READY", "PREEMPTED", "READY", "READY"], tpu_vm_ssh_run=[1, 0])
    assert tpu.main(argv) == 0
    assert calls() == [create, describe, setup, run, describe, delete,
                       create, describe, setup, run, describe, delete]
    out = capsys.readouterr().out
    assert "# The TPU was lost: recreating it (retry 1 of 3)." in out
    assert "# state: PREEMPTED" in out


def test_up_waits_through_creating_and_recreates_a_tpu_preempted_before_it_is_ready(
        fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["CREATING", "CREATING", "PREEMPTED", "READY", "READY"])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 0
    assert step_names(calls()) == [
        "tpu-vm create", "tpu-vm describe", "tpu-vm describe", "tpu-vm describe",
        "tpu-vm delete", "tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup",
        "tpu-vm ssh run", "tpu-vm describe", "tpu-vm delete"]
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("# state:")] == [
        "# state: CREATING", "# state: PREEMPTED", "# state: READY"]


def test_up_recreates_a_tpu_preempted_during_a_run_that_exited_zero(fake_gcloud, capsys):
    """On SIGTERM the trainer saves a checkpoint and exits 0: the state tells it apart."""
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "PREEMPTED", "READY", "READY"])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 0
    assert step_names(calls()) == [
        "tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup", "tpu-vm ssh run",
        "tpu-vm describe", "tpu-vm delete", "tpu-vm create", "tpu-vm describe",
        "tpu-vm ssh setup", "tpu-vm ssh run", "tpu-vm describe", "tpu-vm delete"]


class ScriptedGcloud(tpu.Gcloud):
    """A Gcloud whose describe commands answer from a list, in-process."""

    def __init__(self, states: list[str]):
        super().__init__(dry_run=False)
        self.states, self.asked = states, 0

    def state(self, argv):
        self.asked += 1
        return self.states.pop(0) if self.states else "READY"


def test_stays_ready_watches_the_state_for_the_settle_time(capsys):
    node = tpu_commands.Tpu("t", "z")
    late_preemption = ScriptedGcloud(["READY", "READY", "PREEMPTED"])
    assert not tpu.stays_ready(late_preemption, node, settle_seconds=60, poll_seconds=0)
    assert late_preemption.asked == 3
    assert capsys.readouterr().out.endswith("# state: PREEMPTED\n")
    ready = ScriptedGcloud([])
    started = time.monotonic()
    assert tpu.stays_ready(ready, node, settle_seconds=0.05, poll_seconds=0.01)
    assert time.monotonic() - started >= 0.05 and ready.asked >= 2


def test_up_does_not_retry_a_failure_while_the_tpu_is_ready(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "READY"], tpu_vm_ssh_run=[7])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 7
    assert step_names(calls()) == ["tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup",
                                   "tpu-vm ssh run", "tpu-vm describe", "tpu-vm delete"]
    assert ("launch.tpu up: failed with status 7 while my-v4-32 is ready: not a preemption, "
            "so not retried") in capsys.readouterr().err


def test_up_gives_up_after_max_retries_and_still_deletes(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "PREEMPTED", "READY", "TERMINATED"],
           tpu_vm_ssh_run=[1], tpu_vm_ssh_other=[0, 255])
    assert tpu.main([*UP, *FAST, "--max_retries=1", "--", "pretrain"]) == 255
    assert step_names(calls()) == [
        "tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup", "tpu-vm ssh run",
        "tpu-vm describe", "tpu-vm delete", "tpu-vm create", "tpu-vm describe",
        "tpu-vm ssh setup", "tpu-vm describe", "tpu-vm delete"]
    assert "my-v4-32 was lost 2 times; giving up" in capsys.readouterr().err


def test_up_still_deletes_a_lost_tpu_whose_delete_failed_before_the_recreate(fake_gcloud):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "PREEMPTED"], tpu_vm_ssh_run=[1], tpu_vm_delete=[1, 0],
           tpu_vm_create=[0, 1])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 1
    assert step_names(calls()) == [
        "tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup", "tpu-vm ssh run",
        "tpu-vm describe", "tpu-vm delete", "tpu-vm create", "tpu-vm delete"]


def test_up_keep_leaves_the_tpu(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "READY"])
    assert tpu.main([*UP, *FAST, "--keep", "--", "pretrain"]) == 0
    assert step_names(calls()) == ["tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup",
                                   "tpu-vm ssh run", "tpu-vm describe"]
    out = capsys.readouterr().out
    assert "# Kept (--keep); delete it with:\n$ gcloud compute tpus tpu-vm delete" in out


def test_up_deletes_nothing_when_the_create_fails(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_create=[1])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 1
    assert step_names(calls()) == ["tpu-vm create"]  # the name may be someone else's TPU
    assert "launch.tpu up: creating my-v4-32 failed (status 1)" in capsys.readouterr().err


def test_up_through_a_queued_resource(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    argv = ["up", *TPU, "--queued", "--accelerator_type=v5litepod-16", "--spot",
            f"--repo={REPO_URL}", *FAST, "--", "pretrain"]
    create, describe, setup, run, check, describe_node, delete = dry_run_commands(capsys, argv)
    assert check == describe and describe_node[4] == "describe"
    answer(queued_resources_describe=["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE",
                                      "ACTIVE", "ACTIVE", "ACTIVE"],
           tpu_vm_describe=["PREEMPTED", "READY"], tpu_vm_ssh_run=[1, 0])
    assert tpu.main(argv) == 0
    # The queued resource may still be ACTIVE while its TPU is already preempted.
    assert calls() == [create, describe, describe, describe, setup, run, describe, describe_node,
                       delete, create, describe, setup, run, describe, describe_node, delete]


SLICES_UP = ["up", "--tpu=my-v5e", "--zone=us-west4-a", "--num_slices=2",
             "--accelerator_type=v5litepod-256", "--spot", f"--repo={REPO_URL}", *FAST, "--",
             "pretrain", "--config.mesh.num_slices=2", "--workdir=gs://bucket/run3"]


def megascale_env(ssh_argv: list[str]) -> dict[str, str]:
    """The MEGASCALE_* variables a run line exports, as bash would see them."""
    words = shlex.split(ssh_argv[-1].removeprefix("--command="))
    return dict(word.split("=", 1) for word in words if word.startswith("MEGASCALE_"))


def test_up_on_two_slices_runs_one_command_everywhere_with_each_slice_id(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    (create, wait, setup_0, setup_1, address, run_0, run_1, check, check_0, check_1,
     delete) = dry_run_commands(capsys, SLICES_UP)
    assert "--node-count=2" in create and "--node-prefix=my-v5e" in create
    assert [setup_0[5], setup_1[5], run_0[5], run_1[5]] == ["my-v5e-0", "my-v5e-1"] * 2
    assert address[4:6] == ["describe", "my-v5e-0"] and check == wait
    assert remote_albert_jax_args(run_0) == remote_albert_jax_args(run_1) == [
        "pretrain", "--config.mesh.num_slices=2", "--workdir=gs://bucket/run3", "--multihost"]
    answer(**{"queued-resources describe": ["ACTIVE", "ACTIVE"],
              "tpu-vm describe my-v5e-0": ["10.130.0.7", "READY"],
              "tpu-vm describe my-v5e-1": ["READY"]})
    assert tpu.main(SLICES_UP) == 0
    made = calls()
    # The slices' setups, and then their runs, run side by side: in either order.
    assert made[0] == create and made[1] == wait and made[4] == address
    assert sorted(made[2:4]) == [setup_0, setup_1]
    assert made[7:] == [check, check_0, check_1, delete]
    runs = sorted(made[5:7], key=lambda argv: argv[5])
    assert [megascale_env(run) for run in runs] == [
        {"MEGASCALE_COORDINATOR_ADDRESS": "10.130.0.7", "MEGASCALE_PORT": "8080",
         "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": str(slice_id)}
        for slice_id in (0, 1)]
    assert remote_albert_jax_args(runs[0]) == remote_albert_jax_args(runs[1])


def test_a_lost_slice_ends_the_job_and_up_resumes_on_new_slices(fake_gcloud, capsys):
    """Slice 1 is preempted mid-run (its ssh fails); slice 0's run, which would wait for it in
    its next collective, is stopped; the queued resource is no longer ACTIVE, so up deletes
    it, creates the slices again and reruns (which resumes from the checkpoint)."""
    answer, calls = fake_gcloud
    answer(**{"queued-resources describe": ["ACTIVE", "SUSPENDING", "ACTIVE", "ACTIVE"],
              "tpu-vm describe my-v5e-0": ["10.130.0.7", "10.130.0.9", "READY"],
              "tpu-vm describe my-v5e-1": ["READY"],
              "tpu-vm ssh run my-v5e-0": ["hang", 0],
              "tpu-vm ssh run my-v5e-1": [{"after_hang": 255}, 0]})
    assert tpu.main(SLICES_UP) == 0
    names = [" ".join(argv[3:6]) for argv in calls()]
    attempt = ["queued-resources create my-v5e", "queued-resources describe my-v5e",
               "tpu-vm ssh my-v5e-0", "tpu-vm ssh my-v5e-1", "tpu-vm describe my-v5e-0",
               "tpu-vm ssh my-v5e-0", "tpu-vm ssh my-v5e-1"]
    assert sorted(names[:7]) == sorted(attempt)
    assert names[7:9] == ["queued-resources describe my-v5e", "queued-resources delete my-v5e"]
    assert sorted(names[9:16]) == sorted(attempt)
    assert names[16:] == ["queued-resources describe my-v5e", "tpu-vm describe my-v5e-0",
                          "tpu-vm describe my-v5e-1", "queued-resources delete my-v5e"]
    out, err = capsys.readouterr()
    assert "[launch] process 1 exited with status 255; stopping the others" in err
    assert "# The TPU was lost: recreating it (retry 1 of 3)." in out
    # The rerun's coordinator is the new slice 0's address.
    reruns = [argv for argv in calls()[9:] if "albert-jax" in argv[-1]]
    assert {megascale_env(run)["MEGASCALE_COORDINATOR_ADDRESS"] for run in reruns} == {
        "10.130.0.9"}


def test_num_slices_errors(capsys):
    with pytest.raises(SystemExit):
        tpu.main(["create", "--tpu=t", "--zone=z", "--accelerator_type=v5litepod-16",
                  "--num_slices=0"])
    assert "--num_slices=0 must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tpu.main(["create", "--tpu=t", "--zone=z", "--accelerator_type=v5litepod-16",
                  "--num_slices=2", "--preemptible"])
    assert "--preemptible does not apply to a queued resource" in capsys.readouterr().err


def test_delete_failing_at_the_end_is_reported(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY", "READY"], tpu_vm_delete=[1])
    assert tpu.main([*UP, *FAST, "--", "pretrain"]) == 0
    assert "launch.tpu up: deleting my-v4-32 failed: delete it yourself" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_up_deletes_the_tpu_when_stopped_during_the_run(fake_gcloud, tmp_path, signum, status):
    answer, calls = fake_gcloud
    answer(tpu_vm_describe=["READY"], tpu_vm_ssh_run=["hang"])
    launcher = subprocess.Popen([sys.executable, "-m", "launch.tpu", *UP, "--", "pretrain"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "hanging").exists():
        assert time.monotonic() < deadline and launcher.poll() is None, launcher.stdout.read()
        time.sleep(0.05)
    launcher.send_signal(signum)
    out, _ = launcher.communicate(timeout=30)
    assert launcher.returncode == status, out
    assert step_names(calls()) == ["tpu-vm create", "tpu-vm describe", "tpu-vm ssh setup",
                                   "tpu-vm ssh run", "tpu-vm delete"]
    assert "Traceback" not in out


def test_run_passes_on_the_exit_status(fake_gcloud, capsys):
    answer, calls = fake_gcloud
    answer(tpu_vm_ssh_run=[5])
    assert tpu.main([*TPU, "--", "pretrain"]) == 5
    assert calls() == printed_commands(capsys.readouterr().out)


def test_tpu_without_gcloud_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="gcloud not found: install the Google Cloud CLI"):
        tpu.main(["delete", *TPU])


# launch.gpu

SLURM = ["slurm", "--nodes=4", "--gpus_per_node=8", "--cpus_per_task=12", "--partition=a100",
         "--account=my-lab", "--time=24:00:00", "--", *HOSTILE]


def test_slurm_dry_run_prints_the_script_of_its_golden_file(capsys, tmp_path):
    script_path = tmp_path / "job.sbatch"
    assert gpu.main([SLURM[0], f"--script={script_path}", "--dry_run", *SLURM[1:]]) == 0
    script = script_path.read_text()
    assert_golden("launch_gpu_slurm.txt", script)
    assert capsys.readouterr().out == script + f"# written to {script_path}\n"
    srun_line = script.splitlines()[-1]
    assert srun_line.startswith("srun --kill-on-bad-exit=1 albert-jax ")
    assert arguments_seen_by_bash(srun_line.removeprefix("srun --kill-on-bad-exit=1 ")) == (
        HOSTILE + ["--multihost"])


def test_slurm_submits_the_script_to_sbatch(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_sbatch = bin_dir / "sbatch"
    fake_sbatch.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv\n"
                           f"cat > {tmp_path}/script\nexit 4\n")
    fake_sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert gpu.main(SLURM) == 4
    assert (tmp_path / "argv").read_text() == "\n"
    assert (tmp_path / "script").read_text() == (GOLDEN_DIR / "launch_gpu_slurm.txt").read_text()
    assert capsys.readouterr().out == (tmp_path / "script").read_text()


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
    (["slurm", "--nodes=1", "--gpus_per_node=8", "--cpus_per_task=0", "--", "pretrain"],
     "--cpus_per_task=0 must be at least 1"),
    (["slurm", "--nodes=1", "--gpus_per_node=8", "--job_name=a\nrm -rf ~", "--", "pretrain"],
     "--job_name='a\\nrm -rf ~': give a non-empty value without spaces"),
    (["slurm", "--nodes=1", "--gpus_per_node=8", "--partition=", "--", "pretrain"],
     "--partition='': give a non-empty value without spaces"),
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


# launch.local

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


# Running processes side by side.

def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_all_prefixes_output_and_returns_zero(capsys):
    status = processes.run_all([python("print('a'); print('b')"),
                                python("import sys; print('c', file=sys.stderr)")])
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["[0] a", "[0] b", "[1] c"]
    assert lines.index("[0] a") < lines.index("[0] b")


def test_run_all_stops_the_others_when_one_fails(capsys):
    started = time.monotonic()
    status = processes.run_all([
        python("import time; print('waiting', flush=True); time.sleep(120)"),
        python("import sys, time; time.sleep(1); print('broken'); sys.exit(3)")])
    assert status == 3
    assert time.monotonic() - started < 60  # the sleeper was killed, not waited for
    captured = capsys.readouterr()
    assert "[1] broken" in captured.out.splitlines()
    assert "[launch] process 1 exited with status 3; stopping the others" in captured.err
    assert processes.exit_status(-signal.SIGKILL) == 137


def test_launcher_passes_sigterm_to_every_process():
    child = ("import signal, sys, time; signal.signal(signal.SIGTERM, "
             "lambda *_: (print('saving', flush=True), sys.exit(0))); "
             "print('ready', flush=True); time.sleep(120)")
    launcher = subprocess.Popen(
        python("import sys; from launch import processes; "
               f"sys.exit(processes.run_all([{python(child)!r}] * 2))"),
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
