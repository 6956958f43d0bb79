"""The grain pipeline: host sharding, batching, resumable iterators, static and dynamic masking."""
import collections
import dataclasses

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from albert_jax.data import builder, masking, pipeline
from albert_jax.model.presets import ConfigError
from test_builder import build_small_dataset  # (tests/ is on sys.path under pytest)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return build_small_dataset(tmp_path_factory.mktemp("pipeline"), num_documents=300)


@pytest.fixture(scope="module")
def train_source(config):
    return pipeline.SplitSource(builder.dataset_dir(config), "train")


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
    # Example i goes to host i % 3; one pass leaves the last len % 3 out so hosts stay in step.
    kept = len(train_source) - len(train_source) % 3
    expected = collections.Counter(_row_key(train_source[index]) for index in range(kept))
    assert seen == expected


def test_eval_is_unshuffled_static_and_finite(config):
    config.data.masking = "dynamic"  # eval keeps the stored masks whatever the training masking
    try:
        batches = list(pipeline.make_iterator(config, "eval", process_index=0, process_count=1,
                                              repeat=False))
    finally:
        config.data.masking = "static"
    source = pipeline.SplitSource(builder.dataset_dir(config), "eval")
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
    config.batch_size = 8 * 8  # host batch 8 on host 0 of 8: an epoch is len/8 examples
    try:
        iterator = pipeline.make_iterator(config, process_index=0, process_count=8)
        epoch_length = len(range(0, len(train_source), 8))
        examples = [{name: values[row] for name, values in batch.items()}
                    for batch in _take(iterator, 2 * epoch_length // 8 + 2) for row in range(8)]
    finally:
        config.data.masking = "static"
        config.batch_size = 16
    masks_by_epoch = [{}, {}]
    for position, features in enumerate(examples[:2 * epoch_length]):
        tokens = masking.unmask_features(features)
        masks_by_epoch[position // epoch_length][tokens.tobytes()] = features
        length = int(features["input_mask"].sum())
        count = int((features["masked_lm_weights"] > 0).sum())
        assert 0 < count <= min(20, max(1, round(length * 0.15)))  # SPEC 1.4.3 budget
    stored = {masking.unmask_features(train_source[index]).tobytes()
              for index in range(0, len(train_source), 8)}
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
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    global_batch = pipeline.to_global_batch(host_batch, sharding)
    for name, value in host_batch.items():
        assert isinstance(global_batch[name], jax.Array)
        assert global_batch[name].sharding == sharding
        np.testing.assert_array_equal(np.asarray(global_batch[name]), value)


def test_missing_dataset_says_how_to_build_it(config, tmp_path):
    data_dir = config.data.dir
    config.data.dir = str(tmp_path)
    try:
        with pytest.raises(FileNotFoundError, match="no dataset at .*albert-jax data build"):
            pipeline.make_iterator(config, process_index=0, process_count=1)
    finally:
        config.data.dir = data_dir


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
