"""The real `albert-jax` command line for tests: run it, and tiny pretraining data built with it.

  result = cli("finetune", "--config=...", f"--workdir={tmp_path}")    # a CompletedProcess
  flags = config_flags(build_demo_pretraining_data(tmp_path, environment))  # --config=...

The data and the pretraining run most files share are the session fixtures of conftest.py
(`demo_pretraining_data`, `pretrained_tiny`), made once per test run by `made_once`.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from albert_jax.data import corpus

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "albert_jax.cli"]


def cli(*arguments: str, timeout: int = 600,
        environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`albert-jax ARGUMENTS` in a subprocess from the repository root, output captured; on
    one CPU device unless `environment` says otherwise (`one_device_environment`)."""
    return subprocess.run(CLI + list(arguments), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=environment or one_device_environment())


def start_cli(*arguments: str, environment: dict[str, str] | None = None,
              **popen_options: Any) -> subprocess.Popen:
    """`albert-jax ARGUMENTS` started from the repository root and left running (to be killed,
    or raced against another); as `cli`, on one CPU device unless `environment` says otherwise."""
    return subprocess.Popen(CLI + list(arguments), cwd=REPO,
                            env=environment or one_device_environment(), **popen_options)


def one_device_environment() -> dict[str, str]:
    """This process's environment with one CPU device instead of the tests' eight fake ones: the
    environment of the tests' command-line runs, as on a user's CPU machine. Eight cost time
    there: a 12-step pretraining run with three checkpoints takes 5.9 s on eight and 4.4 s on
    one, a tagging run of 1,200 steps 61 s and 26 s. Steps and checkpoints on a mesh have their
    own tests (test_train_sharding, test_checkpoint, test_multihost's processes, `plan
    --devices`)."""
    return dict(os.environ, XLA_FLAGS=os.environ["XLA_FLAGS"].replace(
        "--xla_force_host_platform_device_count=8", "--xla_force_host_platform_device_count=1"))


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
