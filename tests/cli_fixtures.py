"""The real `albert-jax` command line for tests: run it, and tiny pretraining data built with it.

  result = cli("finetune", "--config=...", f"--workdir={tmp_path}")    # a CompletedProcess
  flags = config_flags(build_demo_pretraining_data(tmp_path, environment))  # --config=...

The data and the pretraining run most files share are the session fixtures of conftest.py
(`demo_pretraining_data`, `pretrained_tiny`), made once per test run by `made_once`.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any, Callable
from unittest import mock

from albert_jax.data import corpus

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "albert_jax.cli"]


def cli(*arguments: str, timeout: int = 600,
        environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`albert-jax ARGUMENTS` in a process of its own from the repository root, output captured;
    on one CPU device unless `environment` says otherwise (`one_device_environment`).

    The process is forked from a server that has imported the command line once (`_forked`),
    so a run does not pay the 2-3 s of importing jax, flax, orbax and grain again; an
    environment that differs from the server's where a library reads it at import gets a fresh
    `python -m albert_jax.cli`."""
    environment = environment or one_device_environment()
    if _forkable(environment):
        return _forked(list(arguments), environment, timeout)
    return subprocess.run(CLI + list(arguments), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=environment)


def start_cli(*arguments: str, environment: dict[str, str] | None = None,
              **popen_options: Any) -> subprocess.Popen | ForkedRun:
    """`albert-jax ARGUMENTS` started from the repository root and left running (to be killed,
    or raced against another); as `cli`, on one CPU device unless `environment` says otherwise.

    Forked from the server as `cli`'s runs are (a `ForkedRun`, killed as a process of its own
    is) when `popen_options` only say where the output goes (`stdout`, `stderr`, `text`);
    otherwise a `subprocess.Popen` of a fresh interpreter."""
    environment = environment or one_device_environment()
    if _forkable(environment) and set(popen_options) <= {"stdout", "stderr", "text"}:
        return ForkedRun(list(arguments), environment, **popen_options)
    return subprocess.Popen(CLI + list(arguments), cwd=REPO, env=environment, **popen_options)


def one_device_environment() -> dict[str, str]:
    """This process's environment with one CPU device instead of the tests' eight fake ones: the
    environment of the tests' command-line runs, as on a user's CPU machine. Eight cost time
    there: a 12-step pretraining run with three checkpoints takes 5.9 s on eight and 4.4 s on
    one, a tagging run of 1,200 steps 61 s and 26 s. Steps and checkpoints on a mesh have their
    own tests (test_train_sharding, test_checkpoint, test_multihost's processes, `plan
    --devices`)."""
    return dict(os.environ, XLA_FLAGS=os.environ["XLA_FLAGS"].replace(
        "--xla_force_host_platform_device_count=8", "--xla_force_host_platform_device_count=1"))


# ---------------------------------------------------------------------------------------------
# The command line forked from a server that imported it once. The tests start over a hundred
# command-line runs, and each fresh interpreter spent 2-3 s of CPU importing the same libraries
# before its own work. multiprocessing's fork server imports `albert_jax.cli` once (jax's
# backends stay uninitialised, so a fork is as fresh as a new process) and forks each run from
# it. Variables that jax, XLA, TensorFlow or the interpreter read at import are the server's;
# a run that sets them otherwise (another cache directory, another XLA_FLAGS) is not forked.

_READ_AT_IMPORT = ("JAX_", "XLA_", "TF_", "PYTHON", "TPU_", "LD_", "OMP_", "OPENBLAS_")
_server_environment: dict[str, str] | None = None


def _import_time_variables(environment: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in environment.items() if key.startswith(_READ_AT_IMPORT)}


def _forkable(environment: dict[str, str]) -> bool:
    server = _server_environment or one_device_environment()
    return _import_time_variables(environment) == _import_time_variables(server)


def _start_server() -> multiprocessing.context.BaseContext:
    """The fork server, started once per test process with the one-device environment."""
    global _server_environment
    context = multiprocessing.get_context("forkserver")
    if _server_environment is None:
        context.set_forkserver_preload(["albert_jax.cli", __name__])
        _server_environment = one_device_environment()
        with mock.patch.dict(os.environ, _server_environment, clear=True):
            multiprocessing.forkserver.ensure_running()
    return context


def _forked(arguments: list[str], environment: dict[str, str],
            timeout: int) -> subprocess.CompletedProcess:
    """As `subprocess.run(CLI + arguments, capture_output=True, text=True, timeout=timeout)`,
    the process forked from the server; its output goes through two temporary files."""
    context = _start_server()
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    stdout_path = folder / f"albert_jax_cli_{os.getpid()}_{threading.get_ident()}.out"
    stderr_path = stdout_path.with_suffix(".err")
    process = context.Process(target=_run_command_line,
                              args=(arguments, environment, str(stdout_path), str(stderr_path)))
    process.start()
    try:
        process.join(timeout)
        if process.exitcode is None:
            raise subprocess.TimeoutExpired(CLI + arguments, timeout)
        return subprocess.CompletedProcess(
            CLI + arguments, process.exitcode,
            stdout_path.read_text(errors="replace"), stderr_path.read_text(errors="replace"))
    finally:
        if process.exitcode is None:  # timed out, or the test was interrupted
            process.kill()
            process.join()
        stdout_path.unlink(missing_ok=True)
        stderr_path.unlink(missing_ok=True)


def _run_command_line(arguments: list[str], environment: dict[str, str],
                      stdout: str | Connection, stderr: str | Connection) -> None:
    """In the forked process: what `python -m albert_jax.cli ARGUMENTS` does, its output to the
    file of that path or the pipe of that connection, then what the interpreter does at its exit
    (non-daemon threads joined, atexit functions run, output flushed), and the exit with its
    status."""
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(REPO)
    for descriptor, target in ((1, stdout), (2, stderr)):
        if isinstance(target, str):
            with open(target, "wb") as file:
                os.dup2(file.fileno(), descriptor)
        else:
            os.dup2(target.fileno(), descriptor)
    for target in (stdout, stderr):
        if isinstance(target, Connection) and not target.closed:
            target.close()  # only 1 and 2 stay open onto the pipe, as in a Popen's child
    from albert_jax import cli as command_line
    sys.argv = [command_line.__file__, *arguments]
    status = 0
    try:
        command_line.main()
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
        status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BaseException:  # what the interpreter does with an uncaught exception
        import traceback
        traceback.print_exc()
        status = 1
    threading._shutdown()  # the interpreter's exit: thread pools told to stop, then joined
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class ForkedRun:
    """A command-line run forked from the server and left running (`start_cli`): what tests use
    of `subprocess.Popen` (pid, args, returncode, stdout, stderr, poll, wait, send_signal, kill,
    terminate, communicate). `stdout` and `stderr` take None (this process's), PIPE, DEVNULL
    an open file and, for stderr, STDOUT, as Popen's do; a pipe is read as text when `text`."""

    def __init__(self, arguments: list[str], environment: dict[str, str],
                 stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None,
                 text: bool = False):
        self.args = CLI + arguments
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        ends: dict[str, Connection] = {}  # the child's end of each output
        for name, option, own in (("stdout", stdout, 1), ("stderr", stderr, 2)):
            if option == subprocess.STDOUT and name == "stderr":
                ends[name] = ends["stdout"]
            elif option == subprocess.PIPE:
                read_end, write_end = os.pipe()
                setattr(self, name, os.fdopen(read_end, "r" if text else "rb"))
                ends[name] = Connection(write_end, readable=False)
            elif option == subprocess.DEVNULL:
                ends[name] = Connection(os.open(os.devnull, os.O_WRONLY), readable=False)
            elif option is None:
                ends[name] = Connection(os.dup(own), readable=False)
            elif hasattr(option, "fileno"):  # an open file, as Popen takes one
                ends[name] = Connection(os.dup(option.fileno()), readable=False)
            else:
                raise ValueError(f"{name}={option!r}: a forked run takes None, PIPE, DEVNULL, a file"
                                 + (" or STDOUT" if name == "stderr" else ""))
        self._process = _start_server().Process(
            target=_run_command_line,
            args=(arguments, environment, ends["stdout"], ends["stderr"]))
        try:
            self._process.start()
        finally:
            for end in {id(end): end for end in ends.values()}.values():
                end.close()  # the child holds its own copies: a pipe ends when the child does
        self.pid = self._process.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode  # -N for a signal N, as Popen's
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signal_number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """The rest of stdout and stderr (None where not a pipe), once the run has ended."""
        outputs: dict[str, Any] = {}

        def read_all(name: str, stream: Any) -> None:
            outputs[name] = stream.read()

        readers = [threading.Thread(target=read_all, args=(name, stream), daemon=True)
                   for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
                   if stream is not None]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return outputs.get("stdout"), outputs.get("stderr")


def run_python_processes(scripts: list[str], environments: list[dict[str, str]],
                         cwd: Path = REPO, timeout: int = 300) -> list[tuple[int, str]]:
    """Runs `python -c SCRIPT` for every script at once (the processes of one multi-process
    job), each with its environment; (return code, stdout + stderr) of each, in order."""
    processes = [subprocess.Popen([sys.executable, "-c", script], env=environment, cwd=cwd,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for script, environment in zip(scripts, environments)]
    try:
        outputs = [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [(process.returncode, output) for process, output in zip(processes, outputs)]


# The data settings of the tiny pretraining runs (on top of configs/pretrain.py:runlocal).
DEMO_DATA = {"data.vocab_size": 400, "seq_len": 64, "data.dupe_factor": 2,
             "data.eval_fraction": 0.05}


def config_flags(settings: dict[str, Any]) -> list[str]:
    """configs/pretrain.py:runlocal with `--config.<key>=<value>` for every setting."""
    return (["--config=configs/pretrain.py:runlocal"]
            + [f"--config.{key}={value}" for key, value in settings.items()])


def run_config(settings: dict[str, Any]):
    """The config `albert-jax` builds from `config_flags(settings)`, made in this process."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pretrain_config", REPO / "configs/pretrain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("runlocal")
    for key, value in settings.items():
        *parents, name = key.split(".")
        section = config
        for parent in parents:
            section = section[parent]
        section[name] = value
    return config


def build_demo_pretraining_data(root: Path, environment: dict[str, str] | None = None,
                                num_documents: int = 400,
                                changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tokenizer and a dataset built in `root` by `albert-jax tokenizer train` and `albert-jax
    data build` from the first `num_documents` demo documents, with DEMO_DATA updated by
    `changes`; returns the settings that name them (`config_flags` makes the flags)."""
    text = "\n\n".join("\n".join(document) for _, document in
                       zip(range(num_documents), corpus.demo_documents()))
    (root / "corpus.txt").write_text(text + "\n")
    settings = {"data.corpus": str(root / "corpus.txt"), "data.tokenizer": str(root / "spm.model"),
                "data.dir": str(root / "data"), **DEMO_DATA, **(changes or {})}
    for command in (["tokenizer", "train"], ["data", "build"]):
        result = cli(*command, *config_flags(settings), environment=environment)
        assert result.returncode == 0, result.stderr[-3000:]
    return settings


def tensorboard_points(workdir: Path) -> list[tuple[int, str, float]]:
    """Every (step, tag, value) TensorBoard shows of the workdir's event files, read with its
    own reader (which applies the SessionLog START of each resumed run)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    reader = EventAccumulator(str(workdir / "tensorboard"),
                              size_guidance={"scalars": 0})  # 0: keep every point
    reader.Reload()
    return [(event.step, tag, event.value) for tag in reader.Tags()["scalars"]
            for event in reader.Scalars(tag)]


def made_once(name: str, tmp_path_factory, make: Callable[[Path], Any]) -> Any:
    """`make(folder)` once per test run, whichever pytest-xdist worker asks first; the others
    wait for it and get the same result (what `make` returns must be JSON: paths as str).

    The folder lies in the temporary root the workers share. Tests read what it holds and never
    write into it."""
    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent  # .../pytest-N/popen-gwK -> .../pytest-N
    folder, result = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not result.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed before left it
            folder.mkdir()
            result.write_text(json.dumps(make(folder)))
        return json.loads(result.read_text())


def demo_pretraining_settings(root: Path) -> dict[str, Any]:
    """The shared data (conftest.py `demo_pretraining_data`): 300 demo documents, each made
    into examples once (data.dupe_factor=1)."""
    return build_demo_pretraining_data(root, num_documents=300, changes={"data.dupe_factor": 1})


def pretrain_tiny(root: Path, settings: dict[str, Any]) -> Path:
    """A pretraining workdir of the tiny model (6 steps, batch 8) on the data of `settings`
    (vocab 400), its tokenizer copied in: root/workdir."""
    result = cli("pretrain", *config_flags(settings), "--config.model=tiny",
                 "--config.total_steps=6", "--config.model_overrides.vocab_size=400",
                 "--config.batch_size=8", "--config.eval_batch_size=8",
                 f"--workdir={root / 'workdir'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (root / "workdir" / "spiece.model").exists()  # the tokenizer travels with the run
    return root / "workdir"
