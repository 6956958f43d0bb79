"""Running the processes of a job side by side, output prefixed, stopping all when one fails."""
from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from typing import Mapping, Sequence


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
        assert process.stdout is not None  # started with stdout=PIPE
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
