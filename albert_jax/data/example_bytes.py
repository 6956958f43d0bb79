"""The tf.Example bytes of a dict of fixed-shape arrays, written directly.

  encode = ExampleEncoder({"input_ids": ((512,), np.int32), "masked_lm_weights": ((20,), np.float32)})
  encode({"input_ids": ids, "masked_lm_weights": weights})   # bytes

The same bytes as TFDS's writer path (`features.encode_example`, then
`example_serializer.ExampleSerializer(...).get_tf_example(...).SerializeToString(
deterministic=True)`), which builds a protobuf message per example and is most of a data
build's CPU time. The wire format (tensorflow/core/example/{example,feature}.proto):

  Example    { Features features = 1; }
  Features   { map<string, Feature> feature = 1; }   entries sorted by key (deterministic)
  Feature    { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
  Int64List  { repeated int64 value = 1 [packed = true]; }   varints, negatives in 10 bytes
  FloatList  { repeated float value = 1 [packed = true]; }   little-endian float32

Integer and boolean arrays are Int64Lists (TFDS widens them to int64), floating ones FloatLists.
tests/test_example_bytes.py checks byte equality against TFDS's serializer.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

_FLOAT_LIST, _INT64_LIST = 2, 3  # Feature's oneof fields
_MAX_VARINT_BYTES = 10
_SHIFTS = np.arange(0, 7 * _MAX_VARINT_BYTES, 7, dtype=np.uint64)


def _varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint: 7 bits a byte, low first, high bit = more."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# The varints of 0 .. 2^16 - 1 (any vocabulary up to 65,536 pieces), little-endian in a uint32
# each (1 to 3 bytes, zero padded), and which of those 4 bytes are the varint's (0x01 = bool True).
_TABLE_SIZE = 1 << 16
_TABLE_CODES = np.zeros(_TABLE_SIZE, np.uint32)
_TABLE_KEEP = np.zeros(_TABLE_SIZE, np.uint32)
_values = np.arange(_TABLE_SIZE, dtype=np.uint32)
for _group in range(3):  # byte _group: 7 bits, and 0x80 if a further group follows
    _has_group = (_values >> 7 * _group != 0) | (_group == 0)
    _byte = (_values >> 7 * _group & 0x7F) | (_values >> 7 * (_group + 1) != 0) << 7
    _TABLE_CODES |= np.where(_has_group, _byte, 0).astype(np.uint32) << 8 * _group
    _TABLE_KEEP |= _has_group.astype(np.uint32) << 8 * _group
del _values, _group, _has_group, _byte
_SHORT_VARINTS = [_varint(value) for value in range(1 << 12)]  # lengths and tags


def _length_delimited(field: int, payload: bytes) -> bytes:
    """Field `field` (< 16) of wire type 2 (bytes, sub-message, packed list) holding `payload`."""
    length = len(payload)
    return (bytes((field << 3 | 2,)) + (_SHORT_VARINTS[length] if length < 1 << 12
                                        else _varint(length)) + payload)


def packed_varints(values: np.ndarray) -> bytes:
    """int64 [n] (any integer dtype, widened) as the varints of a packed repeated int64."""
    values = np.asarray(values).ravel()
    if not values.size:
        return b""
    # The largest value seen as unsigned: negative values (10 bytes each) count as huge.
    unsigned = values.view(np.uint32) if values.dtype == np.int32 else \
        values.astype(np.int64).view(np.uint64)
    largest = int(unsigned.max())
    if largest < 0x80:  # One byte each: the value itself.
        return values.astype(np.uint8).tobytes()
    if largest < _TABLE_SIZE:
        return _TABLE_CODES.take(values).view(np.uint8)[
            _TABLE_KEEP.take(values).view(np.bool_)].tobytes()
    unsigned = values.astype(np.int64).view(np.uint64)  # two's complement: 10 groups if < 0
    num_groups = (int(unsigned.max()).bit_length() + 6) // 7
    shifted = unsigned[:, None] >> _SHIFTS[:num_groups]  # [n, num_groups]
    # A value takes one byte per 7-bit group up to its highest non-zero group (at least one);
    # every byte but its last has the continuation bit.
    present = shifted != 0
    present[:, 0] = True
    more = np.zeros_like(present)
    more[:, :-1] = present[:, 1:]
    groups = (shifted & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
    return groups[present].tobytes()


def _feature(values: np.ndarray) -> bytes:
    """The bytes of one Feature message holding `values`."""
    if values.dtype.kind == "f":
        field, payload = _FLOAT_LIST, values.astype("<f4", copy=False).ravel().tobytes()
    elif values.dtype.kind in "iub":
        field, payload = _INT64_LIST, packed_varints(values)
    else:
        raise TypeError(f"no tf.Example list for dtype {values.dtype}")
    return _length_delimited(field, _length_delimited(1, payload) if payload else b"")


class ExampleEncoder:
    """Encodes dicts of arrays of the given shapes and dtypes as tf.Example bytes.

    spec: {name: (shape, dtype)}. Calling it with a dict of exactly those names, shapes and
    dtypes returns the serialized Example; anything else raises ValueError.
    """

    def __init__(self, spec: Mapping[str, tuple[tuple[int, ...], type]]):
        self._spec = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in spec.items()}
        self._names = sorted(self._spec)  # The map entries in key order (deterministic).
        self._keys = {name: _length_delimited(1, name.encode()) for name in self._names}

    def __call__(self, features: Mapping[str, np.ndarray]) -> bytes:
        if features.keys() != self._spec.keys():
            raise ValueError(f"features {sorted(features)} are not {self._names}")
        entries = []
        for name in self._names:
            values = features[name]
            shape, dtype = self._spec[name]
            if values.shape != shape or values.dtype != dtype:
                raise ValueError(f"feature {name!r} is {values.dtype}{list(values.shape)}, "
                                 f"expected {dtype}{list(shape)}")
            entry = self._keys[name] + _length_delimited(2, _feature(values))
            entries.append(_length_delimited(1, entry))
        return _length_delimited(1, b"".join(entries))
