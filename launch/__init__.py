"""Launchers: the same `albert-jax` command on every host of a multi-host job.

  python -m launch.tpu   --tpu=NAME --zone=ZONE -- pretrain --config=... --workdir=gs://...
  python -m launch.gpu   slurm --nodes=4 --gpus_per_node=8 -- pretrain --config=... --workdir=...
  python -m launch.gpu   hosts --hosts=h1,h2 --coordinator_port=8476 -- pretrain ...
  python -m launch.local --num_processes=2 --devices_per_process=4 -- pretrain ...

Everything before `--` configures the launcher; everything after it is the albert-jax command
line, passed on unchanged with `--multihost` added. `--dry_run` prints the commands instead of
running them. This module holds what the launchers share: splitting the command line, quoting
the remote command, and running processes side by side with their output prefixed.
"""
from __future__ import annotations

import queue
import shlex
import signal
import subprocess
import sys
import threading
from typing import Mapping, Sequence

# What a fresh host runs before albert-jax: the checkout and virtualenv that `launch.tpu --setup`
# creates (and the README asks for on GPU hosts).
DEFAULT_WORKDIR_SETUP = "cd ~/albert_jax && source .venv/bin/activate"


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher arguments, albert-jax arguments): the two sides of the first `--`."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    split = argv.index("--")
    return argv[:split], argv[split + 1:]


def with_multihost(albert_jax_args: Sequence[str]) -> list[str]:
    """The albert-jax arguments plus `--multihost`, unless they already set it (e.g. =mpi4py)."""
    args = list(albert_jax_args)
    if any(arg == "--multihost" or arg.startswith("--multihost=") for arg in args):
        return args
    return args + ["--multihost"]


def remote_command(workdir_setup: str, albert_jax_args: Sequence[str]) -> str:
    """One shell command line: `workdir_setup` (shell code, as written) && albert-jax ARGS.

    Each argument is quoted for the remote shell, so values with spaces, `=`, `*` or quotes
    arrive as written (`--config.data.corpus=/data/my corpus/*.txt` stays one argument).
    """
    command = shlex.join(["albert-jax", *albert_jax_args])
    return f"{workdir_setup} && {command}" if workdir_setup else command


def show(argv: Sequence[str], env: Mapping[str, str] | None = None, prefix: str = "") -> None:
    """Prints a command as a shell line a user can copy (environment assignments first)."""
    assignments = [f"{key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    print(prefix + " ".join(assignments + [shlex.join(argv)]), flush=True)


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_all(commands: Sequence[Sequence[str]],
            envs: Sequence[Mapping[str, str] | None] | None = None) -> int:
    """Runs the commands side by side; returns 0, or the exit status of the first that failed.

    Every line a process prints (stdout and stderr) is echoed as `[i] line`. When one process
    fails, the others are killed: in a multi-host job they would wait forever for the missing
    process in their next collective. SIGTERM to the launcher is passed on to every process (the
    trainer then saves a checkpoint and stops); anything else that ends the launcher, Ctrl-C
    included, kills the processes it started.
    """
    envs = list(envs) if envs is not None else [None] * len(commands)
    processes: list[subprocess.Popen] = []
    finished: queue.Queue[tuple[int, int]] = queue.Queue()
    print_lock = threading.Lock()

    def echo(index: int, process: subprocess.Popen) -> None:
        for line in process.stdout:
            with print_lock:
                sys.stdout.write(f"[{index}] {line.rstrip(chr(13) + chr(10))}\n")
                sys.stdout.flush()
        finished.put((index, process.wait()))

    def pass_sigterm(signum: int, frame: object) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    previous_handler = signal.signal(signal.SIGTERM, pass_sigterm)
    threads = []
    status = 0
    try:
        for index, (command, env) in enumerate(zip(commands, envs)):
            process = subprocess.Popen(list(command), env=None if env is None else dict(env),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace")
            processes.append(process)
            threads.append(threading.Thread(target=echo, args=(index, process), daemon=True))
            threads[-1].start()
        for _ in processes:
            index, returncode = finished.get()
            if returncode and not status:
                status = exit_status(returncode)
                with print_lock:
                    print(f"[launch] process {index} exited with status {status}; stopping the "
                          "others", file=sys.stderr, flush=True)
                _kill(processes)
    finally:
        _kill(processes)
        signal.signal(signal.SIGTERM, previous_handler)
        for thread in threads:
            thread.join(timeout=10)
    return status


def _kill(processes: Sequence[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
