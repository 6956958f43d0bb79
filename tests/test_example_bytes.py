"""example_bytes: the tf.Example bytes of TFDS's serializer, written directly."""
import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer

from albert_jax.data.building import build_unit, example_bytes


def _tfds_bytes(features: tfds.features.FeaturesDict, example: dict) -> bytes:
    serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
    return serializer.get_tf_example(features.encode_example(example)).SerializeToString(
        deterministic=True)


def test_random_examples_have_tfds_bytes():
    """Values of every varint length (1-10 bytes, negatives), floats incl. inf/nan/-0, empty
    lists, one-element lists, names that sort differently as str and by length."""
    rng = np.random.default_rng(0)
    spec = {"b": ((3,), np.int64), "a_long_name": ((7,), np.int32), "ab": ((0,), np.int32),
            "z": ((1,), np.int32), "floats": ((5,), np.float32), "flags": ((4,), np.bool_),
            "matrix": ((2, 3), np.int64)}
    features = tfds.features.FeaturesDict(
        {name: tfds.features.Tensor(shape=shape, dtype=dtype) for name, (shape, dtype) in spec.items()})
    encode = example_bytes.ExampleEncoder(spec)
    for trial in range(300):
        bits = int(rng.integers(1, 64))  # |values| < 2^bits: 1 to 10 varint bytes
        example = {}
        for name, (shape, dtype) in spec.items():
            if dtype == np.float32:
                with np.errstate(over="ignore"):
                    values = (rng.normal(size=shape) * 10.0 ** rng.integers(-40, 40)
                              ).astype(np.float32)
                values[rng.random(shape) < 0.1] = rng.choice([np.inf, -np.inf, np.nan, -0.0, 0.0])
            elif dtype == np.bool_:
                values = rng.random(shape) < 0.5
            else:
                info = np.iinfo(dtype)
                high = min(2 ** bits, int(info.max))
                values = rng.integers(-high if trial % 3 == 0 else 0, high, size=shape,
                                      dtype=np.int64).astype(dtype)
            example[name] = values
        assert encode(example) == _tfds_bytes(features, example), (trial, example)


def test_pretraining_features_have_tfds_bytes():
    """The SPEC 1.5 features at seq 512 with realistic values (what `data build` writes)."""
    rng = np.random.default_rng(1)
    features = build_unit.example_features(512, 20)
    encode = example_bytes.ExampleEncoder(
        {name: (feature.shape, feature.np_dtype) for name, feature in features.items()})
    for _ in range(50):
        length, masked = int(rng.integers(21, 513)), int(rng.integers(1, 21))
        example = {name: np.zeros(feature.shape, feature.np_dtype)
                   for name, feature in features.items()}
        example["input_ids"][:length] = rng.integers(0, 30000, length)
        example["input_mask"][:length] = 1
        example["segment_ids"][length // 2:length] = 1
        example["token_boundary"][:length] = rng.integers(0, 2, length)
        example["masked_lm_positions"][:masked] = np.sort(rng.choice(length, masked, replace=False))
        example["masked_lm_ids"][:masked] = rng.integers(0, 30000, masked)
        example["masked_lm_weights"][:masked] = 1.0
        example["next_sentence_labels"][0] = rng.integers(0, 2)
        assert encode(example) == _tfds_bytes(features, example)


def test_wrong_features_are_refused():
    encode = example_bytes.ExampleEncoder({"a": ((2,), np.int32)})
    with pytest.raises(ValueError, match="'a' is int64\\[2\\], expected int32\\[2\\]"):
        encode({"a": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match="'a' is int32\\[3\\]"):
        encode({"a": np.zeros(3, np.int32)})
    with pytest.raises(ValueError, match="are not"):
        encode({"b": np.zeros(2, np.int32)})
