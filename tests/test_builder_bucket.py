"""`albert-jax data build` into a bucket (the storage emulator): the same files as a local build,
read back through gcsfs; an unfinished build there is never taken as built. And the build's log
names the corpus, not its files."""
import os
import pathlib

import pytest
import tensorflow_datasets as tfds
from array_record.python.array_record_data_source import ArrayRecordDataSource
from etils import epath

from albert_jax.data.building import builder, dataset_settings
from cli_fixtures import DEMO_DATA, build_demo_pretraining_data, cli, config_flags, run_config
from test_builder import write_corpus


def test_build_into_a_bucket_matches_a_local_build(bucket, tmp_path):
    staging = tmp_path / "staging"
    settings = build_demo_pretraining_data(
        tmp_path, changes={"data.dir": bucket, "data.staging_dir": str(staging)})
    remote_dir = dataset_settings.dataset_dir(run_config(settings))
    local_dir = builder.build_from_config(  # here, in one process; the CLI ran workers
        run_config({**settings, "data.dir": str(tmp_path / "local")}), num_processes=1)
    assert remote_dir.startswith(f"{bucket}/albert_pretraining/seq64_")
    assert os.path.basename(remote_dir) == os.path.basename(local_dir) == dataset_settings.DATASET_VERSION
    assert sorted(path.name for path in epath.Path(remote_dir).iterdir()) == sorted(
        os.listdir(local_dir))
    assert not os.listdir(staging)  # every shard uploaded, the build's staging folder gone

    remote, here = tfds.builder_from_directory(remote_dir), tfds.builder_from_directory(local_dir)
    assert remote.info.metadata == here.info.metadata
    for split in ("train", "eval"):
        assert remote.info.splits[split].shard_lengths == here.info.splits[split].shard_lengths
        for remote_path, local_path in zip(remote.info.splits[split].filepaths,
                                           here.info.splits[split].filepaths):
            assert str(remote_path).startswith("gs://")
            copy = tmp_path / "downloaded" / remote_path.name  # (read through gcsfs)
            copy.parent.mkdir(exist_ok=True)
            copy.write_bytes(epath.Path(remote_path).read_bytes())
            records = ArrayRecordDataSource([str(copy)])
            expected = ArrayRecordDataSource([os.fspath(local_path)])
            assert len(records) == len(expected) > 0
            for index in range(len(expected)):
                assert records[index] == expected[index], (split, index)
            assert copy.read_bytes() == pathlib.Path(local_path).read_bytes()

    again = cli("data", "build", *config_flags(settings))
    assert again.returncode == 0 and f"dataset exists: {remote_dir}" in again.stdout


def test_an_unfinished_build_in_a_bucket_is_redone(bucket, tmp_path, capsys):
    settings = build_demo_pretraining_data(tmp_path, num_documents=150)
    local_dir = pathlib.Path(dataset_settings.dataset_dir(run_config(settings)))
    config = run_config({**settings, "data.dir": bucket,
                          "data.staging_dir": str(tmp_path / "staging")})
    remote_dir = epath.Path(dataset_settings.dataset_dir(config))
    # What a build killed before its metadata leaves in the bucket: uploaded shards, one under
    # its unfinished name, features.json, no dataset_info.json.
    remote_dir.mkdir(parents=True, exist_ok=True)
    for path in local_dir.iterdir():
        if path.name != "dataset_info.json":
            (remote_dir / path.name).write_bytes(path.read_bytes())
    (remote_dir / "albert_pretraining-train.array_record-00001.incomplete").write_bytes(b"cut")
    assert not builder.make_builder(config).is_prepared()
    with pytest.raises(Exception, match="dataset_info.json"):
        tfds.builder_from_directory(os.fspath(remote_dir))

    builder.build_from_config(config, num_processes=1)
    assert "removing the unfinished build" in capsys.readouterr().out
    assert builder.make_builder(config).is_prepared()
    assert sorted(path.name for path in remote_dir.iterdir()) == sorted(
        path.name for path in local_dir.iterdir())
    for path in local_dir.iterdir():
        if ".array_record-" in path.name:
            assert (remote_dir / path.name).read_bytes() == path.read_bytes(), path.name


def test_the_build_log_names_the_corpus_not_its_files(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", 240, num_files=12)
    settings = {**DEMO_DATA, "data.corpus": corpus, "data.tokenizer": str(tmp_path / "spm.model"),
                "data.dir": str(tmp_path / "data"), "data.vocab_size": 200}
    for command in (["tokenizer", "train"], ["data", "build"]):
        result = cli(*command, *config_flags(settings))
        assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert f"corpus '{corpus}': 12 text files, " in log  # corpus.describe
    assert "part3.txt" not in log and "corpus_signature" not in log
