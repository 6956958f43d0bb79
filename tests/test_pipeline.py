"""The grain pipeline: host sharding, batching, resumable iterators, static and dynamic masking."""
import collections
import dataclasses

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from albert_jax.data.building import dataset_settings, masking
from albert_jax.data.input import pipeline
from albert_jax.errors import ConfigError
from albert_jax.train import sharding
from test_builder import build_small_dataset  # (tests/ is on sys.path under pytest)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return build_small_dataset(tmp_path_factory.mktemp("pipeline"), num_documents=300)


@pytest.fixture(scope="module")
def train_source(config):
    return pipeline.SplitSource(dataset_settings.dataset_dir(config), "train")


def _row_key(features, index=None):
    """Bytes identifying one example (one row of a batch when `index` is given)."""
    return b"".join((values if index is None else values[index]).tobytes()
                    for _, values in sorted(features.items()))


def _take(iterator, count):
    return [next(iterator) for _ in range(count)]


def _assert_same_batches(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_batches_have_spec_features_and_host_batch_shape(config):
    batch = next(pipeline.make_iterator(config, process_index=1, process_count=2))
    assert {name: (value.shape, value.dtype) for name, value in batch.items()} == {
        "input_ids": ((8, 64), np.int32), "input_mask": ((8, 64), np.int32),
        "segment_ids": ((8, 64), np.int32), "token_boundary": ((8, 64), np.int32),
        "masked_lm_positions": ((8, 20), np.int32), "masked_lm_ids": ((8, 20), np.int32),
        "masked_lm_weights": ((8, 20), np.float32), "next_sentence_labels": ((8, 1), np.int32)}


def test_host_batch_size(config):
    assert pipeline.host_batch_size(config, "train", process_count=4) == 4  # batch_size 16
    assert pipeline.host_batch_size(config, "eval", process_count=2) == 4  # eval_batch_size 8
    with pytest.raises(ConfigError, match="batch_size=16 is not divisible by the 3 hosts"):
        pipeline.host_batch_size(config, "train", process_count=3)


def test_host_shards_are_disjoint_and_cover_the_split(config, train_source):
    config.batch_size = 3  # one example per host batch
    try:
        seen = collections.Counter()
        for process_index in range(3):
            for batch in pipeline.make_iterator(config, process_index=process_index,
                                                process_count=3, repeat=False):
                seen[_row_key(batch, 0)] += 1
    finally:
        config.batch_size = 16
    # One shuffled pass cut to whole global batches of 3: the last len % 3 examples are left out
    # so hosts stay in step; every other example goes to exactly one host.
    stored = collections.Counter(_row_key(train_source[index]) for index in range(len(train_source)))
    assert sum(seen.values()) == len(train_source) - len(train_source) % 3
    assert all(count == 1 for count in seen.values()) and not seen - stored


def _global_batches(config, process_count, count, split="train", repeat=True):
    """The first `count` global batches of a `process_count`-host run: hosts' rows concatenated."""
    hosts = [pipeline.make_iterator(config, split, process_index=index,
                                    process_count=process_count, repeat=repeat)
             for index in range(process_count)]
    batches = []
    for _ in range(count):
        host_batches = [next(host) for host in hosts]
        batches.append({name: np.concatenate([batch[name] for batch in host_batches])
                        for name in host_batches[0]})
    return batches


@pytest.mark.parametrize("masking_mode", ["static", "dynamic"])
def test_global_batches_do_not_depend_on_the_number_of_hosts(config, train_source, masking_mode):
    config.data.masking = masking_mode
    try:
        count = 2 * len(train_source) // 16 + 3  # batch_size 16: past the end of epoch 2
        expected = _global_batches(config, 1, count)
        assert expected[0]["input_ids"].shape == (16, 64)
        for process_count in (2, 4):
            _assert_same_batches(_global_batches(config, process_count, count), expected)
    finally:
        config.data.masking = "static"


class RecordingSource:
    """`source[i]` = {"example_index": [i]}; remembers which examples were read."""

    def __init__(self, length):
        self.length = length
        self.read = []

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        self.read.append(index)
        return {"example_index": np.array([index])}


def test_hosts_read_only_their_own_disjoint_rows():
    sources = [RecordingSource(10) for _ in range(2)]
    hosts = [pipeline.make_dataset(source, batch_size=4, process_index=index, process_count=2,
                                   repeat=True, shuffle_seed=7, dynamic_masking=None)
             for index, source in enumerate(sources)]
    rows = [[host[batch_number]["example_index"][:, 0].tolist() for host in hosts]
            for batch_number in range(5)]  # 20 stream positions: two epochs of 10 examples
    assert all(len(host_rows) == 2 for batch_rows in rows for host_rows in batch_rows)
    assert [len(source.read) for source in sources] == [10, 10]  # no other host's rows read
    # Positions 0-9 (epoch 0): host 0's rows of batches 0-2, host 1's of batches 0-1; the rest
    # (epoch 1) is host 1's rows of batches 2-4 and host 0's of 3-4. Each epoch is a permutation.
    epoch_0 = sum((rows[batch][0] for batch in range(3)), []) + rows[0][1] + rows[1][1]
    epoch_1 = sum((rows[batch][1] for batch in range(2, 5)), []) + rows[3][0] + rows[4][0]
    assert sorted(epoch_0) == sorted(epoch_1) == list(range(10))
    assert epoch_0 != epoch_1  # a new shuffle each epoch


def test_eval_global_batches_do_not_depend_on_the_number_of_hosts(config):
    expected = list(pipeline.make_iterator(config, "eval", process_index=0, process_count=1,
                                           repeat=False))
    for process_count in (2, 4):
        _assert_same_batches(
            _global_batches(config, process_count, len(expected), "eval", repeat=False), expected)
        ends = [list(pipeline.make_iterator(config, "eval", process_index=index,
                                            process_count=process_count, repeat=False))
                for index in range(process_count)]
        assert [len(batches) for batches in ends] == [len(expected)] * process_count


def test_eval_is_unshuffled_static_and_finite(config):
    config.data.masking = "dynamic"  # eval keeps the stored masks whatever the training masking
    try:
        batches = list(pipeline.make_iterator(config, "eval", process_index=0, process_count=1,
                                              repeat=False))
    finally:
        config.data.masking = "static"
    source = pipeline.SplitSource(dataset_settings.dataset_dir(config), "eval")
    assert len(batches) == len(source) // 8
    for batch_index, batch in enumerate(batches):
        for row in range(8):
            assert _row_key(batch, row) == _row_key(source[batch_index * 8 + row])


@pytest.mark.parametrize("masking_mode", ["static", "dynamic"])
def test_restored_iterator_continues_exactly(config, masking_mode):
    config.data.masking = masking_mode
    try:
        uninterrupted = pipeline.make_iterator(config, process_index=0, process_count=1)
        _take(uninterrupted, 3)
        state = uninterrupted.get_state()
        expected = _take(uninterrupted, 4)
        restored = pipeline.make_iterator(config, process_index=0, process_count=1)
        restored.set_state(state)
        _assert_same_batches(_take(restored, 4), expected)
    finally:
        config.data.masking = "static"


def test_iterator_state_saves_and_restores_through_orbax(config, tmp_path):
    iterator = pipeline.make_iterator(config, process_index=0, process_count=1)
    _take(iterator, 2)
    with ocp.CheckpointManager(tmp_path / "checkpoints") as manager:
        manager.save(2, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(iterator)))
        manager.wait_until_finished()
        expected = _take(iterator, 3)
        fresh = pipeline.make_iterator(config, process_index=0, process_count=1)
        restored = manager.restore(
            2, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(fresh)))["data"]
    _assert_same_batches(_take(restored, 3), expected)


def test_dynamic_masks_change_every_epoch_and_keep_the_tokens(config, train_source):
    config.data.masking = "dynamic"
    try:
        iterator = pipeline.make_iterator(config, process_index=0, process_count=1)
        epoch_length = len(train_source)
        examples = [{name: values[row] for name, values in batch.items()}
                    for batch in _take(iterator, 2 * epoch_length // 16 + 2) for row in range(16)]
    finally:
        config.data.masking = "static"
    masks_by_epoch = [{}, {}]
    for position, features in enumerate(examples[:2 * epoch_length]):
        tokens = masking.unmask_features(features)
        masks_by_epoch[position // epoch_length][tokens.tobytes()] = features
        length = int(features["input_mask"].sum())
        count = int((features["masked_lm_weights"] > 0).sum())
        assert 0 < count <= min(20, max(1, round(length * 0.15)))  # SPEC 1.4.3 budget
    stored = {masking.unmask_features(train_source[index]).tobytes()
              for index in range(len(train_source))}
    assert set(masks_by_epoch[0]) == set(masks_by_epoch[1]) == stored  # same examples, same tokens
    changed = sum(not np.array_equal(masks_by_epoch[0][key]["masked_lm_positions"],
                                     masks_by_epoch[1][key]["masked_lm_positions"])
                  for key in stored)
    assert changed > 0.9 * len(stored)


def test_dynamic_masks_depend_on_example_and_epoch_only(config, train_source):
    masker = dataclasses.replace(
        pipeline.DynamicMasking.from_metadata(config, train_source.metadata), epoch_length=10)
    example = train_source[5]
    first = masker(3, (5, example))   # epoch 0
    again = masker(7, (5, example))   # epoch 0 at another position (other hosts or batch size)
    later = masker(13, (5, example))  # epoch 1
    _assert_same_batches([first], [again])
    assert not np.array_equal(first["input_ids"], later["input_ids"])
    np.testing.assert_array_equal(masking.unmask_features(later), masking.unmask_features(example))
    np.testing.assert_array_equal(later["token_boundary"], example["token_boundary"])


def test_to_global_batch_on_one_host(config):
    host_batch = next(pipeline.make_iterator(config, process_index=0, process_count=1))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    global_batch = sharding.to_global_batch(host_batch, batch_sharding)
    for name, value in host_batch.items():
        assert isinstance(global_batch[name], jax.Array)
        assert global_batch[name].sharding == batch_sharding
        np.testing.assert_array_equal(np.asarray(global_batch[name]), value)


def test_missing_dataset_says_how_to_build_it(config, tmp_path):
    data_dir = config.data.dir
    config.data.dir = str(tmp_path)
    try:
        with pytest.raises(FileNotFoundError, match="no dataset at .*albert-jax data build"):
            pipeline.make_iterator(config, process_index=0, process_count=1)
    finally:
        config.data.dir = data_dir


@pytest.mark.slow
def test_worker_processes_give_the_same_batches(config):
    config.data.masking = "dynamic"
    iterators = []
    try:
        iterators.append(pipeline.make_iterator(config, process_index=0, process_count=1))
        expected = _take(iterators[-1], 4)
        config.data.num_workers = 2
        iterators.append(pipeline.make_iterator(config, process_index=0, process_count=1))
        got = _take(iterators[-1], 2)
        state = iterators[-1].get_state()
        got += _take(iterators[-1], 2)
        iterators.append(pipeline.make_iterator(config, process_index=0, process_count=1))
        iterators[-1].set_state(state)
        restored = _take(iterators[-1], 2)
    finally:
        config.data.masking = "static"
        config.data.num_workers = 0
        for iterator in iterators:
            iterator.close()
    _assert_same_batches(got, expected)
    _assert_same_batches(restored, expected[2:])
