"""The data build past one machine: one plan of units, run by the local process pool or by an
Apache Beam pipeline (Beam's FnApiRunner with real worker processes), the same bytes either
way, locally and in a bucket; a killed build resumed to the same bytes; a retried unit; the
lock; the Beam flag's one-line errors; the package Beam stages for Dataflow workers."""
import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
from etils import epath

from albert_jax.data import corpus as corpus_lib
from albert_jax.data.building import beam_build, build_unit, builder, dataset_settings
from albert_jax.errors import ConfigError
from cli_fixtures import REPO, cli, config_flags, run_config, start_cli

BEAM_LOCAL = "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=2"
NUM_FILES = 6


def write_demo_files(directory: Path | epath.Path, num_documents: int = 600) -> str:
    """The first `num_documents` demo documents (real English) over NUM_FILES gzipped files
    (never cut into byte ranges: with data.unit_bytes 1, one unit a file); their glob."""
    documents = ["\n".join(document) for _, document in
                 zip(range(num_documents), corpus_lib.demo_documents())]
    directory.mkdir(parents=True, exist_ok=True)
    per_file = len(documents) // NUM_FILES
    for index in range(NUM_FILES):
        (directory / f"part{index}.txt.gz").write_bytes(gzip.compress(
            ("\n\n".join(documents[index * per_file:(index + 1) * per_file]) + "\n").encode(),
            mtime=0))
    return f"{directory}/*.txt.gz"


def digests(folder: str, *, corpus_spec: tuple[str, str] | None = None) -> dict[str, str]:
    """sha256 of every file of a dataset folder (local or gs://), by name. `corpus_spec`: (as
    given, as the local build's) where the metadata names a corpus elsewhere."""
    found = {}
    for path in epath.Path(folder).iterdir():
        content = path.read_bytes()
        if corpus_spec and path.suffix == ".json":
            content = content.replace(corpus_spec[0].encode(), corpus_spec[1].encode())
        found[path.name] = hashlib.sha256(content).hexdigest()
    return found


@pytest.fixture(scope="module")
def corpus_settings(tmp_path_factory, demo_pretraining_data) -> dict:
    """A 6-file corpus (one unit per file) and the shared tokenizer."""
    root = tmp_path_factory.mktemp("beam_corpus")
    return {**demo_pretraining_data, "data.corpus": write_demo_files(root / "corpus"),
            "data.unit_bytes": 1, "data.dupe_factor": 1}


@pytest.fixture(scope="module")
def local_build(corpus_settings, tmp_path_factory) -> dict[str, str]:
    """The plain local build (2 processes: the pool) of `corpus_settings`: its files' digests."""
    settings = {**corpus_settings, "data.dir": str(tmp_path_factory.mktemp("local") / "data")}
    result = cli("data", "build", *config_flags(settings))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "6 units" in result.stdout and "with 2 processes" in result.stdout
    return digests(dataset_settings.dataset_dir(run_config(settings)))


def test_units_are_consecutive_files_of_about_unit_bytes():
    sources = [("a.txt", 10), ("b.txt", 5), ("c.txt", 20), ("demo", None), ("d.txt", 1),
               ("e.txt", 3)]
    units = builder.make_units(sources, unit_bytes=15)
    assert [unit.sources for unit in units] == [
        ("a.txt", "b.txt"), ("c.txt",), ("demo",), ("d.txt", "e.txt")]
    assert [unit.index for unit in units] == [0, 1, 2, 3]
    assert [unit.sources for unit in builder.make_units(sources, unit_bytes=1)] == [
        (name,) for name, _ in sources]


@pytest.mark.parametrize("options, message", [
    ("direct_num_workers=2", "names no runner"),
    ("runner=DirectRunner", "download Beam's Prism runner"),
    ("runner=FnApiRunner,direct_num_worker=2", "unknown Beam pipeline option(s) ['direct_num_worker']"),
    ("runner=FlinkRunner,flink_master=host:8081", "['flink_job_server_jar', 'job_endpoint']"),
    ("runner=DataflowRunner,project=p", "needs ['region', 'temp_location']"),
])
def test_beam_options_that_cannot_work_are_one_line(options, message):
    with pytest.raises(ConfigError) as error:
        beam_build.pipeline_options(options)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_cluster_runner_needs_the_corpus_and_data_in_a_bucket(corpus_settings, tmp_path):
    config = run_config({**corpus_settings, "data.dir": str(tmp_path / "data")})
    with pytest.raises(ConfigError, match=r"config.data.corpus: '.*part0.txt.gz' is on this "
                                          r"machine, which the DataflowRunner workers cannot"):
        builder.build_from_config(config, beam_pipeline_options=(
            "runner=DataflowRunner,project=p,region=r,temp_location=gs://b/tmp"))
    assert not (tmp_path / "data").exists()


def test_without_beam_the_flag_names_the_extra_and_writes_nothing(corpus_settings, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # as where the extra is missing
    config = run_config({**corpus_settings, "data.dir": str(tmp_path / "data")})
    with pytest.raises(ConfigError, match=r"pip install 'albert-jax\[beam\]'"):
        builder.build_from_config(config, beam_pipeline_options=BEAM_LOCAL)
    assert not (tmp_path / "data").exists()


def test_a_unit_run_again_writes_the_same_files(corpus_settings, tmp_path):
    config = run_config({**corpus_settings, "data.dir": str(tmp_path / "data")})
    made = builder.make_builder(config)
    units = builder.make_units(corpus_lib.sized_sources(config.data.corpus), 1)
    config.unlock()
    config.data.shard_bytes = 20_000  # several shards per split
    context = builder.build_context(made, config, units)
    unit = units[2]
    first = build_unit.build_unit(context, unit)
    written = digests(os.fspath(context.units_dir))
    # Retried by a runner (the first attempt's files still there): the same files, no more.
    assert build_unit.build_unit(context, unit) == first
    assert digests(os.fspath(context.units_dir)) == written
    shards = [shard["file"] for split in first["splits"].values() for shard in split["shards"]]
    assert len(shards) > 2 and sorted(written) == sorted(shards + ["unit-00002.json"])
    assert first["splits"]["train"]["counts"]["instances"] == sum(
        shard["examples"] for shard in first["splits"]["train"]["shards"]) > 0


def test_a_build_killed_while_finalizing_finishes_with_the_same_bytes(corpus_settings, tmp_path,
                                                                     monkeypatch, capsys):
    straight = builder.build_from_config(
        run_config({**corpus_settings, "data.dir": str(tmp_path / "straight")}), num_processes=1)
    config = run_config({**corpus_settings, "data.dir": str(tmp_path / "data")})

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # every shard renamed into place, no metadata yet

    with monkeypatch.context() as patch:
        patch.setattr(tfds.core.DatasetInfo, "write_to_directory", killed)
        with pytest.raises(KeyboardInterrupt):
            builder.build_from_config(config, num_processes=1)
    folder = dataset_settings.dataset_dir(config)
    assert not builder.make_builder(config).is_prepared()
    assert not list(Path(folder, build_unit.UNITS_DIR).glob("*.array_record"))  # all renamed
    builder.build_from_config(config, num_processes=1)
    assert f"{NUM_FILES} built before; 0 to build" in capsys.readouterr().out
    assert digests(folder) == digests(straight)


def test_a_second_build_of_one_folder_is_refused(corpus_settings, tmp_path):
    config = run_config({**corpus_settings, "data.dir": str(tmp_path / "data")})
    folder = Path(dataset_settings.dataset_dir(config))
    folder.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom albert_jax import file_lock\n"
         "file_lock.acquire(sys.argv[1], in_use='busy', advice='wait')\nprint('held', flush=True)\n"
         "time.sleep(600)", str(folder / builder.LOCK_FILE)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        refused = cli("data", "build", *config_flags({**corpus_settings,
                                                      "data.dir": str(tmp_path / "data")}))
        assert refused.returncode != 0
        message = refused.stderr.strip().splitlines()[-2]
        assert message.startswith("albert-jax data build: error: data folder") and \
            f"is being built by another `albert-jax data build`: its lock " \
            f"{folder / builder.LOCK_FILE} is held by pid {holder.pid}" in message
        assert os.listdir(folder) == [builder.LOCK_FILE]  # the other build's folder untouched
        with pytest.raises(builder.DataBuildLocked):
            builder.build_from_config(config, num_processes=1)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_beam_build_with_corpus_and_data_in_a_bucket(corpus_settings, local_build, bucket,
                                                     tmp_path):
    remote_corpus = epath.Path(bucket) / "corpus"
    for path in sorted(Path(corpus_settings["data.corpus"]).parent.glob("*.txt.gz")):
        (remote_corpus / path.name).write_bytes(path.read_bytes())
    settings = {**corpus_settings, "data.corpus": f"{remote_corpus}/*.txt.gz",
                "data.dir": f"{bucket}/data", "data.staging_dir": str(tmp_path / "staging")}
    result = cli("data", "build", *config_flags(settings),
                 f"--beam_pipeline_options={BEAM_LOCAL}")
    assert result.returncode == 0, result.stderr[-3000:]
    folder = dataset_settings.dataset_dir(run_config(settings))
    # The shards are the local build's; the metadata too, but for where it says the corpus was.
    assert folder.startswith("gs://") and digests(folder, corpus_spec=(
        settings["data.corpus"], corpus_settings["data.corpus"])) == local_build
    assert not os.listdir(tmp_path / "staging")  # every shard uploaded, staging cleared


def _kill_after_first_unit(process: subprocess.Popen, units_dir: Path) -> int:
    """SIGKILLs the build (its whole process group: Beam's or the pool's workers too) once a
    unit has its manifest; the number of manifests then."""
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if list(units_dir.glob("unit-*.json")):
            break
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return len(list(units_dir.glob("unit-*.json")))


def build_on_the_pool_and_on_beam_after_a_kill(settings: dict, root: Path, num_units: int
                                                ) -> tuple[dict[str, str], dict[str, str], str]:
    """`data build` of `settings` on the process pool (2 processes, in root/pool), and on Beam
    (in root/beam) killed once a unit is built and run again, each checked to end well: the
    digests of the pool's and Beam's folders, and the rerun's output."""
    pool_settings = {**settings, "data.dir": str(root / "pool")}
    pooled = cli("data", "build", *config_flags(pool_settings))
    assert pooled.returncode == 0, pooled.stderr[-3000:]
    assert f"{num_units} units" in pooled.stdout and "with 2 processes" in pooled.stdout
    beam_settings = {**settings, "data.dir": str(root / "beam")}
    folder_of_beam = Path(dataset_settings.dataset_dir(run_config(beam_settings)))
    process = start_cli("data", "build", *config_flags(beam_settings),
                        f"--beam_pipeline_options={BEAM_LOCAL}", start_new_session=True,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    built_before = _kill_after_first_unit(process, folder_of_beam / build_unit.UNITS_DIR)
    assert 1 <= built_before < num_units
    assert not (folder_of_beam / "dataset_info.json").exists()
    again = cli("data", "build", *config_flags(beam_settings),
                f"--beam_pipeline_options={BEAM_LOCAL}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{built_before} built before" in again.stdout
    assert f"{num_units - built_before} to build with Apache Beam" in again.stdout
    return (digests(dataset_settings.dataset_dir(run_config(pool_settings))),
            digests(os.fspath(folder_of_beam)), pooled.stdout + again.stdout)


@pytest.mark.slow
def test_a_killed_build_resumes_to_the_same_bytes(corpus_settings, local_build, tmp_path):
    # On the process pool; on Beam: test_corpus_formats.py's
    # test_cut_files_build_the_same_bytes_on_every_runner_and_after_a_kill.
    settings = {**corpus_settings, "data.dir": str(tmp_path / "data")}
    folder = Path(dataset_settings.dataset_dir(run_config(settings)))
    process = start_cli("data", "build", *config_flags(settings), start_new_session=True,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    built_before = _kill_after_first_unit(process, folder / build_unit.UNITS_DIR)
    assert 1 <= built_before < NUM_FILES, "the kill came after the build had finished"
    assert not (folder / "dataset_info.json").exists()
    again = cli("data", "build", *config_flags(settings))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{built_before} built before" in again.stdout  # only the other units were built
    assert digests(os.fspath(folder)) == local_build
    loaded = tfds.builder_from_directory(os.fspath(folder))
    metadata = json.loads((folder / "metadata.json").read_text())
    for split in ("train", "eval"):
        assert loaded.info.splits[split].num_examples == \
            metadata["splits"][split]["instances"] > 0


@pytest.mark.slow
def test_the_package_beam_stages_for_dataflow_workers(tmp_path):
    # What `setup_file=./pyproject.toml` makes Beam build and upload for its workers.
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import Stager
    options = PipelineOptions([f"--setup_file={REPO / 'pyproject.toml'}"])
    staged = {name: source for source, name, _ in Stager.extract_staging_tuple_iter(
        Stager.create_job_resources(options, str(tmp_path)))}
    assert "workflow.tar.gz" in staged, staged  # what Beam installs on each worker
    with tarfile.open(staged["workflow.tar.gz"]) as archive:
        names = archive.getnames()
    root = names[0].split("/")[0]
    assert root.startswith("albert_jax-") or root.startswith("albert-jax-"), root
    for module in ("albert_jax/data/building/build_unit.py", "albert_jax/data/building/beam_build.py",
                   "setup.cfg", "pyproject.toml"):
        assert f"{root}/{module}" in names, module
