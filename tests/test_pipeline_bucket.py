"""Training data in a bucket, mode (b) of albert_jax/data/input/shard_copy.py: data.dir=gs://... on the
storage emulator; each host copies its own train shards and the eval split, and reads only them."""
import collections
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
import tensorflow_datasets as tfds
from etils import epath

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.data.building import builder, dataset_settings
from albert_jax.data.input import pipeline, shard_copy
from albert_jax.errors import ConfigError
from test_builder import REPO, small_config, write_corpus  # (tests/ is on sys.path under pytest)
from test_pipeline import _assert_same_batches, _row_key, _take

SHARD_BYTES = 60_000  # the train split in several shards (host 0 of 2 reads >= 3), eval in 1+


@pytest.fixture(scope="module")
def local_config(tmp_path_factory):
    """A dataset built on local disk with SHARD_BYTES shards."""
    tmp = tmp_path_factory.mktemp("bucket_pipeline")
    corpus_glob = write_corpus(tmp / "corpus", 300)
    tokenizer_lib.train((line for path in sorted((tmp / "corpus").glob("*.txt"))
                         for line in path.read_text().splitlines() if line),
                        str(tmp / "spm.model"), vocab_size=200)
    config = small_config(tmp, corpus_glob, str(tmp / "spm.model"))
    config.data.shard_bytes = SHARD_BYTES
    builder.build_from_config(config, num_processes=1)
    return config


@pytest.fixture(scope="module")
def bucket_data(local_config, storage_emulator):
    """The local dataset uploaded with epath to a bucket folder, as the builder leaves it there:
    (data.dir in the bucket, {file name: bytes} of the dataset folder)."""
    data_dir = f"gs://{storage_emulator.bucket}/{uuid.uuid4().hex[:12]}/data"
    local_dir = epath.Path(dataset_settings.dataset_dir(local_config))
    remote_dir = epath.Path(data_dir) / str(local_dir.relative_to(local_config.data.dir))
    remote_dir.mkdir(parents=True, exist_ok=True)
    contents = {path.name: path.read_bytes() for path in local_dir.iterdir()}
    for name, data in contents.items():
        (remote_dir / name).write_bytes(data)
    return data_dir, contents


def _bucket_config(local_config, data_dir, local_dir):
    config = local_config.copy_and_resolve_references()
    config.data.dir = data_dir
    config.data.local_dir = str(local_dir)
    return config


def _shard_names(contents, split):
    return sorted(name for name in contents if f"-{split}.array_record-" in name)


def _copied_dataset(config):
    return shard_copy.local_dataset_dir(dataset_settings.dataset_dir(config),
                                        config.data.local_dir)


def test_each_host_copies_its_train_shards_and_the_eval_split(local_config, bucket_data,
                                                               tmp_path):
    data_dir, contents = bucket_data
    train, evaluation = _shard_names(contents, "train"), _shard_names(contents, "eval")
    assert len(train) >= 4 and evaluation
    metadata = sorted(name for name in contents if name.endswith(".json"))
    for host in range(2):
        config = _bucket_config(local_config, data_dir, tmp_path / f"host{host}")
        next(pipeline.make_iterator(config, process_index=host, process_count=2))
        copied = _copied_dataset(config)
        assert copied == str(tmp_path / f"host{host}" / os.path.relpath(
            dataset_settings.dataset_dir(local_config), local_config.data.dir))
        shards = train[host::2] + evaluation
        assert sorted(os.listdir(copied)) == sorted(
            metadata + shards + [f"{name}.verified" for name in shards])
        for name in metadata + shards:
            assert (tmp_path / copied / name).read_bytes() == contents[name], name


def _bucket_hosts(local_config, data_dir, tmp_path, **kwargs):
    return [pipeline.make_iterator(_bucket_config(local_config, data_dir, tmp_path / f"h{host}"),
                                   process_index=host, process_count=2, **kwargs)
            for host in range(2)]


def test_hosts_read_only_their_own_examples_in_a_seeded_order(local_config, bucket_data,
                                                               tmp_path):
    data_dir, _ = bucket_data
    full = pipeline.SplitSource(dataset_settings.dataset_dir(local_config), "train")
    ends = np.cumsum(tfds.builder_from_directory(full.dataset_dir).info.splits["train"]
                     .shard_lengths)
    shard_of = {_row_key(full[index]): int(np.searchsorted(ends, index, "right"))
                for index in range(len(full))}
    first = [list(host) for host in _bucket_hosts(local_config, data_dir, tmp_path, repeat=False)]
    again = [list(host) for host in _bucket_hosts(local_config, data_dir, tmp_path, repeat=False)]
    assert len(first[0]) == len(first[1]) > 0  # one pass, cut so that hosts stay in step
    seen = collections.Counter()
    for host, batches in enumerate(first):
        _assert_same_batches(batches, again[host])  # deterministic
        assert all(batch["input_ids"].shape == (8, 64) for batch in batches)  # batch 16 / 2
        keys = [_row_key(batch, row) for batch in batches for row in range(8)]
        assert {shard_of[key] % 2 for key in keys} == {host}  # shards j with j % 2 == host
        seen.update(keys)
    assert max(seen.values()) == 1  # no example twice in a pass, on either host
    in_order = [_row_key(full[index]) for index in range(len(full)) if shard_of[
        _row_key(full[index])] % 2 == 0][:8]
    assert [_row_key(first[0][0], row) for row in range(8)] != in_order  # shuffled


@pytest.mark.parametrize("masking_mode", ["static", "dynamic"])
def test_restored_iterator_continues_exactly(local_config, bucket_data, tmp_path, masking_mode):
    data_dir, _ = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    config.data.masking = masking_mode
    uninterrupted = pipeline.make_iterator(config, process_index=1, process_count=2)
    _take(uninterrupted, 3)
    state = uninterrupted.get_state()
    expected = _take(uninterrupted, 30)  # past the end of this host's first epoch
    restored = pipeline.make_iterator(config, process_index=1, process_count=2)
    restored.set_state(state)
    _assert_same_batches(_take(restored, 30), expected)


@pytest.mark.parametrize("masking_mode", ["static", "dynamic"])
def test_one_host_trains_on_the_batches_of_local_disk(local_config, bucket_data, tmp_path,
                                                      masking_mode):
    data_dir, _ = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    config.data.masking = local_config.data.masking = masking_mode
    try:
        expected = _take(pipeline.make_iterator(local_config, process_index=0, process_count=1), 5)
    finally:
        local_config.data.masking = "static"
    _assert_same_batches(
        _take(pipeline.make_iterator(config, process_index=0, process_count=1), 5), expected)


def test_worker_processes_give_the_same_batches(local_config, bucket_data, tmp_path):
    data_dir, _ = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    config.data.masking = "dynamic"
    expected = _take(pipeline.make_iterator(config, process_index=0, process_count=2), 4)
    config.data.num_workers = 2
    iterator = pipeline.make_iterator(config, process_index=0, process_count=2)
    try:
        _assert_same_batches(_take(iterator, 4), expected)
    finally:
        iterator.close()


def test_eval_is_that_of_the_local_dataset(local_config, bucket_data, tmp_path):
    data_dir, _ = bucket_data
    for host in range(2):
        expected = list(pipeline.make_iterator(local_config, "eval", process_index=host,
                                               process_count=2, repeat=False))
        config = _bucket_config(local_config, data_dir, tmp_path / f"h{host}")
        _assert_same_batches(list(pipeline.make_iterator(
            config, "eval", process_index=host, process_count=2, repeat=False)), expected)


def test_an_interrupted_or_damaged_copy_is_completed_on_the_next_start(local_config,
                                                                        bucket_data, tmp_path):
    data_dir, contents = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    expected = _take(pipeline.make_iterator(config, process_index=0, process_count=2), 3)
    copied = tmp_path / _copied_dataset(config)
    host_files = _shard_names(contents, "train")[::2] + _shard_names(contents, "eval")
    partial, truncated, flipped, longer = host_files[:4]
    # A copy cut off half way under its temporary name; a truncated file; a byte changed (right
    # size, wrong checksum); one byte more.
    (copied / partial).rename(copied / f"{partial}.partial0")
    os.truncate(copied / f"{partial}.partial0", len(contents[partial]) // 2)
    os.truncate(copied / truncated, len(contents[truncated]) // 3)
    changed = bytearray(contents[flipped])
    changed[len(changed) // 2] ^= 0xFF
    (copied / flipped).write_bytes(bytes(changed))
    (copied / longer).write_bytes(contents[longer] + b"\0")

    restarted = _take(pipeline.make_iterator(config, process_index=0, process_count=2), 3)
    _assert_same_batches(restarted, expected)
    assert not [name for name in os.listdir(copied) if ".partial" in name]
    for name in (partial, truncated, flipped, longer):
        assert (copied / name).read_bytes() == contents[name], name


def test_a_resumed_copy_of_wrong_bytes_is_redone_from_the_start(local_config, bucket_data,
                                                                tmp_path):
    data_dir, contents = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    name = _shard_names(contents, "train")[1]
    copied = tmp_path / shard_copy.local_dataset_dir(dataset_settings.dataset_dir(config),
                                                     config.data.local_dir)
    copied.mkdir(parents=True)
    (copied / f"{name}.partial1").write_bytes(b"\xff" * 1000)  # not the object's first bytes
    next(pipeline.make_iterator(config, process_index=1, process_count=2))
    assert (copied / name).read_bytes() == contents[name]


def test_fewer_train_shards_than_hosts_says_what_to_do(local_config, bucket_data, tmp_path):
    data_dir, _ = bucket_data
    config = _bucket_config(local_config, data_dir, tmp_path)
    config.batch_size = 64
    with pytest.raises(ConfigError, match=r"has \d+ train shards for 64 hosts.*smaller "
                                          r"data.shard_bytes.*gcsfuse"):
        pipeline.make_iterator(config, process_index=0, process_count=64)


def test_no_dataset_in_the_bucket(local_config, bucket, tmp_path):
    config = _bucket_config(local_config, f"{bucket}/empty", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no dataset at gs://.*albert-jax data build"):
        pipeline.make_iterator(config, process_index=0, process_count=1)


_SMALL_DISK_SCRIPT = """
import pathlib
import sys
sys.path[:0] = ["tests", "."]
from albert_jax.data.input import pipeline
from test_builder import small_config
config = small_config(pathlib.Path(sys.argv[1]), *sys.argv[2:4])
config.data.dir, config.data.local_dir = sys.argv[4], sys.argv[5]
try:
    pipeline.make_iterator(config, process_index=0, process_count=2)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_a_local_disk_too_small_says_what_to_do(local_config, bucket_data, tmp_path):
    """A real 64 KiB file system (tmpfs in a mount namespace of our own), no faked numbers."""
    small = tmp_path / "small"
    small.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs "
                            f"{small}"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"no mount namespace for a small file system here: {probe.stderr[-200:]}")
    data_dir, _ = bucket_data
    tmp = str(os.path.dirname(local_config.data.dir))
    arguments = [tmp, local_config.data.corpus, local_config.data.tokenizer, data_dir, str(small)]
    script = f"mount -t tmpfs -o size=64k tmpfs {small} && exec {sys.executable} -c \"$0\" \"$@\""
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script, _SMALL_DISK_SCRIPT,
                             *arguments], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.stdout.startswith("ConfigError data.dir=gs://"), result.stdout + result.stderr
    assert "in data.local_dir" in result.stdout and "GB free: set data.local_dir to a bigger " \
        "disk, or mount the bucket with gcsfuse" in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1


def test_local_bytes_per_host(local_config, bucket_data):
    data_dir, contents = bucket_data
    train, evaluation = _shard_names(contents, "train"), _shard_names(contents, "eval")
    eval_bytes = sum(len(contents[name]) for name in evaluation)
    for process_count in (1, 2, 3):
        expected = max(sum(len(contents[name]) for name in train[host::process_count])
                       for host in range(process_count)) + eval_bytes
        for directory in (dataset_settings.dataset_dir(local_config),
                          dataset_settings.dataset_dir(
                              _bucket_config(local_config, data_dir, "unused"))):
            assert shard_copy.local_bytes_per_host(directory, process_count) == expected
    assert shard_copy.local_bytes_per_host(f"{data_dir}/nothing/here", 2) is None
