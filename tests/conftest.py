"""Set before jax initialises: eight fake CPU devices for every test, and one persistent JAX
compilation cache for the whole run: the pytest process, its xdist workers (which inherit the
environment) and the CLI subprocesses the tests start.

The cache is why the suite fits its time: the tests compile the same tiny programs again and
again (every GLUE task's step, the same pretraining run behind several files' fixtures, each
restart of a killed run), and a cached program loads in milliseconds. It lives in a fresh
directory that the process which made it removes when it exits, so no test sees a program that
another run compiled.
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.cli_fixtures import demo_pretraining_settings, made_once, pretrain_tiny
from tests.file_order import file_seconds, longest_first
from tests.finetune_fixtures import finetune_mnli
from tests.postgres_server import PostgresServer
from tests.storage_emulator import StorageEmulator

# LLVM's optimisations of the CPU code cost much of a tiny program's compile and save little of
# its run: without them test_step.py takes 0.76x the time (72 s against 95 s) and a training run
# (test_finetune_learning.py's pair task) about the same; the suite took 18 min on the idle
# 2-core box (CI took 24 before; benchmarks/RESULTS.md). XLA's own passes stay. XLA's older CPU
# fusion emitters compile the tiny train step in 0.38x the time of the new ones (0.66 s against
# 1.75 s on one device, 1.1 s against 2.2 s on a 2x2x2 mesh) and run it as fast, to the same loss;
# their flag is a migration switch that a later XLA may drop, and XLA aborts on a flag it does
# not know, so the first process asks this XLA first (0.7 s).
OLD_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flag: str) -> bool:
    """Whether a process with XLA_FLAGS=`flag` runs a program (an unknown flag aborts it)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; jax.numpy.zeros(1).block_until_ready()"],
        env=dict(os.environ, XLA_FLAGS=flag), capture_output=True)
    return probe.returncode == 0


if "XLA_FLAGS" not in os.environ:  # the first process of this run: the others inherit them
    os.environ["XLA_FLAGS"] = (
        "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
        "--xla_llvm_disable_expensive_passes=true"
        + (f" {OLD_FUSION_EMITTERS}" if _xla_accepts(OLD_FUSION_EMITTERS) else ""))

if "ALBERT_JAX_TESTS_JAX_CACHE" not in os.environ:  # the first process of this run
    os.environ["ALBERT_JAX_TESTS_JAX_CACHE"] = tempfile.mkdtemp(prefix="albert_jax_tests_jax_cache_")
    atexit.register(shutil.rmtree, os.environ["ALBERT_JAX_TESTS_JAX_CACHE"], ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["ALBERT_JAX_TESTS_JAX_CACHE"]
# Cache every program, however fast it compiled: the tests' programs are small.
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


# ---------------------------------------------------------------------------------------------
# A Cloud Storage server on the loopback, for every test that names a gs:// path: one per
# pytest process, its address in os.environ so the CLI subprocesses of a test reach it too.

@pytest.fixture(scope="session")
def storage_emulator(tmp_path_factory):
    with StorageEmulator(str(tmp_path_factory.mktemp("storage_emulator"))) as emulator:
        saved = {key: os.environ.get(key) for key in emulator.environment}
        os.environ.update(emulator.environment)
        yield emulator
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def bucket(storage_emulator) -> str:
    """A fresh folder of the emulator's bucket for one test: `gs://<bucket>/<unique name>`."""
    return f"gs://{storage_emulator.bucket}/{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------------
# A PostgreSQL server on the loopback, for the sweeps that workers on several machines share:
# one per pytest process that asks for it, a fresh database per test.

@pytest.fixture(scope="session")
def postgres_server():
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A new empty database for one test: `postgresql://postgres@127.0.0.1:PORT/<name>`."""
    return postgres_server.create_database()


# ---------------------------------------------------------------------------------------------
# What most end-to-end files start from, made once per test run by the real CLI and shared by
# the xdist workers (cli_fixtures.made_once). Read them; never write into them.

@pytest.fixture(scope="session")
def demo_pretraining_data(tmp_path_factory) -> dict:
    """The settings (`cli_fixtures.config_flags` makes the flags) of a tokenizer (vocab 400)
    and a dataset (seq 64) built from 300 demo documents."""
    return made_once("demo_pretraining_data", tmp_path_factory, demo_pretraining_settings)


@pytest.fixture(scope="session")
def pretrained_tiny(tmp_path_factory, demo_pretraining_data) -> Path:
    """A pretraining workdir of the tiny model, 6 steps on `demo_pretraining_data`."""
    return Path(made_once("pretrained_tiny", tmp_path_factory,
                          lambda root: str(pretrain_tiny(root, demo_pretraining_data))))


@pytest.fixture(scope="session")
def finetuned_mnli(tmp_path_factory, pretrained_tiny) -> dict[str, Path]:
    """MNLI fine-tuned from `pretrained_tiny` (4 steps; `finetune_fixtures.finetune_mnli`):
    {"workdir": the run, "data_path": its MNLI folder}."""
    made = made_once("finetuned_mnli", tmp_path_factory,
                     lambda root: finetune_mnli(root, pretrained_tiny))
    return {name: Path(path) for name, path in made.items()}


# ---------------------------------------------------------------------------------------------
# The longest files first (tests/file_order.py): xdist hands out files in collection order once
# its own reordering, by the number of tests in a file, is off.

def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is loaded
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    names = list(dict.fromkeys(item.path.name for item in items))
    rank = {name: position for position, name in enumerate(longest_first(names, file_seconds()))}
    items.sort(key=lambda item: rank[item.path.name])  # stable: a file's own order is kept
