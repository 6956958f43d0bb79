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
_TABLE_LENGTHS = np.zeros(_TABLE_SIZE, np.int64)
_values = np.arange(_TABLE_SIZE, dtype=np.uint32)
for _group in range(3):  # byte _group: 7 bits, and 0x80 if a further group follows
    _has_group = (_values >> 7 * _group != 0) | (_group == 0)
    _byte = (_values >> 7 * _group & 0x7F) | (_values >> 7 * (_group + 1) != 0) << 7
    _TABLE_CODES |= np.where(_has_group, _byte, 0).astype(np.uint32) << 8 * _group
    _TABLE_KEEP |= _has_group.astype(np.uint32) << 8 * _group
    _TABLE_LENGTHS += _has_group
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


class ExampleEncoder:
    """Encodes dicts of arrays of the given shapes and dtypes as tf.Example bytes.

    spec: {name: (shape, dtype)}. Calling it with a dict of exactly those names, shapes and
    dtypes returns the serialized Example; anything else raises ValueError. The varints of all
    integer features are made in one pass over their values, and each entry's framing (which
    depends only on the length of its list's bytes) is cached.
    """

    def __init__(self, spec: Mapping[str, tuple[tuple[int, ...], type]]):
        self._spec = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in spec.items()}
        for name, (_, dtype) in self._spec.items():
            if dtype.kind not in "fiub":
                raise TypeError(f"feature {name!r}: no tf.Example list for dtype {dtype}")
        self._names = sorted(self._spec)  # The map entries in key order (deterministic).
        self._keys = {name: _length_delimited(1, name.encode()) for name in self._names}
        self._integer_names = [name for name in self._names if self._spec[name][1].kind != "f"]
        sizes = [int(np.prod(self._spec[name][0])) for name in self._integer_names]
        self._integer_bounds = np.cumsum([0] + sizes)  # where each feature's values start
        self._headers: dict[str, dict[int, bytes]] = {name: {} for name in self._names}

    def __call__(self, features: Mapping[str, np.ndarray]) -> bytes:
        if features.keys() != self._spec.keys():
            raise ValueError(f"features {sorted(features)} are not {self._names}")
        for name, (shape, dtype) in self._spec.items():
            values = features[name]
            if values.shape != shape or values.dtype != dtype:
                raise ValueError(f"feature {name!r} is {values.dtype}{list(values.shape)}, "
                                 f"expected {dtype}{list(shape)}")
        payloads = dict(zip(self._integer_names, self._integer_payloads(features)))
        entries = [self._entry(name, _INT64_LIST, payloads[name]) if name in payloads else
                   self._entry(name, _FLOAT_LIST,
                               features[name].astype("<f4", copy=False).ravel().tobytes())
                   for name in self._names]
        return _length_delimited(1, b"".join(entries))

    def _integer_payloads(self, features: Mapping[str, np.ndarray]) -> list[bytes]:
        """The packed varints of each integer feature, in `_integer_names` order."""
        arrays = [features[name].ravel() for name in self._integer_names]
        if not self._integer_bounds[-1]:
            return [b""] * len(arrays)
        values = np.concatenate(arrays, dtype=np.int64, casting="unsafe")
        largest = int(values.view(np.uint64).max())  # negative values count as huge
        if largest < 0x80:  # One byte each: the value itself.
            data, bounds = values.astype(np.uint8).tobytes(), self._integer_bounds.tolist()
        elif largest < _TABLE_SIZE:
            data = _TABLE_CODES.take(values).view(np.uint8)[
                _TABLE_KEEP.take(values).view(np.bool_)].tobytes()
            byte_ends = np.zeros(len(values) + 1, np.int64)
            np.cumsum(_TABLE_LENGTHS.take(values), out=byte_ends[1:])
            bounds = byte_ends[self._integer_bounds].tolist()
        else:
            return [packed_varints(array) for array in arrays]
        return [data[start:end] for start, end in zip(bounds, bounds[1:])]

    def _entry(self, name: str, field: int, payload: bytes) -> bytes:
        """The map entry of feature `name` (a Feature with list `field`) holding `payload`."""
        headers = self._headers[name]
        header = headers.get(len(payload))
        if header is None:
            feature = _length_delimited(field, _length_delimited(1, payload) if payload else b"")
            entry = _length_delimited(1, self._keys[name] + _length_delimited(2, feature))
            header = headers[len(payload)] = entry[:len(entry) - len(payload)]
        return header + payload
