"""TensorFlow tensor bundles (TF1 checkpoints) read and written without TensorFlow.

A TF1 checkpoint `<prefix>` is a tensor bundle (tensorflow/core/util/tensor_bundle):
  `<prefix>.index`                a LevelDB-format table (tensorflow/core/lib/io/table_format.txt):
                                  key "" -> BundleHeaderProto, tensor name -> BundleEntryProto
  `<prefix>.data-SSSSS-of-NNNNN`  the raw little-endian tensor bytes that the entries point at
The protobufs are decoded by hand (varint wire format) and the table blocks are read and written
exactly as TF's table_builder.cc / block_builder.cc / format.cc do, checksums included; TF writes
bundle index blocks uncompressed (tensor_bundle.cc sets kNoCompression), so a snappy block is
refused with a clear error. `save_tf_checkpoint` writes the same format (TF could read it back).
Prefixes are local or gs:// (etils.epath).

Nothing here knows about ALBERT: variable names are opaque strings (tf_checkpoint.py maps them).
"""
from __future__ import annotations

import struct
from typing import Iterator, Mapping

import ml_dtypes
import numpy as np
from etils import epath

# ---------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli), as tensorflow/core/lib/hash/crc32c.h.

_CRC32C_POLYNOMIAL = 0x82F63B78  # reflected Castagnoli polynomial
_CRC32C_MASK_DELTA = 0xA282EAD8  # crc32c::Mask


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_CRC32C_POLYNOMIAL), table >> 1)
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()
_CRC_TABLE_LIST = _CRC_TABLE.tolist()


def _crc_register(register: int, data: bytes) -> int:
    table = _CRC_TABLE_LIST
    for byte in data:
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def crc32c(data: bytes | np.ndarray) -> int:
    """crc32c::Value(data): the CRC-32C of a byte string (or of an array's raw bytes).

    Pure Python is ~1 MB/s, too slow for xxlarge's 268 MB tensors, so the bytes are cut into
    `lanes` equal runs whose CRC registers advance together in NumPy, one byte column per step.
    The CRC register is linear over GF(2), so run k's contribution to the whole is its register
    pushed through `length` zero bytes: 32 extra lanes fed zeros from the basis states 1 << j
    give that linear map, and the runs are folded in order with it.
    """
    raw = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
        else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    lanes = int(np.sqrt(raw.size * 16))  # balances NumPy call count against vector width
    if raw.size < 1 << 14:
        return _crc_register(0xFFFFFFFF, raw.tobytes()) ^ 0xFFFFFFFF
    length = raw.size // lanes
    columns = np.zeros((length, lanes + 32), np.uint8)
    columns[:, :lanes] = raw[:lanes * length].reshape(lanes, length).T
    registers = np.zeros(lanes + 32, np.uint32)
    registers[0] = 0xFFFFFFFF  # the initial inversion belongs to the first run only
    registers[lanes:] = np.left_shift(np.uint32(1), np.arange(32, dtype=np.uint32))
    for column in columns:
        registers = _CRC_TABLE[(registers ^ column) & 0xFF] ^ (registers >> 8)
    basis = registers[lanes:]
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # [byte value, bit]
    shift_tables = [np.bitwise_xor.reduce(np.where(bits, basis[8 * j:8 * j + 8], 0), axis=1)
                    .astype(np.uint32).tolist() for j in range(4)]
    t0, t1, t2, t3 = shift_tables
    register = int(registers[0])
    for lane_register in registers[1:lanes].tolist():
        register = (t0[register & 0xFF] ^ t1[(register >> 8) & 0xFF] ^ t2[(register >> 16) & 0xFF]
                    ^ t3[register >> 24] ^ lane_register)
    return _crc_register(register, raw[lanes * length:].tobytes()) ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """crc32c::Mask: what TF stores, so that a CRC of CRC-bearing data stays informative."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC32C_MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Protobuf wire format (only what the bundle protos use: varint, fixed32, length-delimited).

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields: negative values take ten bytes (two's complement)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(buffer: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = buffer[position]
        value |= (byte & 0x7F) << shift
        position += 1
        shift += 7
        if not byte & 0x80:
            return value, position


def _proto_fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: int for varint/fixed32/fixed64, bytes for length-delimited."""
    position = 0
    while position < len(message):
        tag, position = _read_varint(message, position)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _read_varint(message, position)
        elif wire_type == 1:
            value, position = struct.unpack_from("<Q", message, position)[0], position + 8
        elif wire_type == 2:
            size, position = _read_varint(message, position)
            value, position = message[position:position + size], position + size
        elif wire_type == 5:
            value, position = struct.unpack_from("<I", message, position)[0], position + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} in field {field}")
        if position > len(message):
            raise ValueError("truncated protobuf message")
        yield field, value


def _number(value: int | bytes) -> int:
    """A varint or fixed field's value; a length-delimited one there is a malformed message."""
    if isinstance(value, bytes):
        raise ValueError("a length-delimited protobuf field where a number belongs")
    return value


def _message(value: int | bytes) -> bytes:
    """A length-delimited field's bytes; a number there is a malformed message."""
    if not isinstance(value, bytes):
        raise ValueError("a number where a protobuf message belongs")
    return value


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# ---------------------------------------------------------------------------------------------
# LevelDB table (tensorflow/core/lib/io: format.cc, block_builder.cc, table_builder.cc).

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48  # two BlockHandles padded to 2 * 20 bytes, then the 8-byte magic
_BLOCK_SIZE = 262144  # table_options.h defaults
_RESTART_INTERVAL = 16


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Entries of one block: shared, non_shared, value_size varints, key delta, value; then the
    restart offsets (uint32 each) and their count (uint32)."""
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 * (num_restarts + 1)
    position, key = 0, b""
    while position < limit:
        shared, position = _read_varint(block, position)
        non_shared, position = _read_varint(block, position)
        value_size, position = _read_varint(block, position)
        key = key[:shared] + block[position:position + non_shared]
        position += non_shared
        yield key, block[position:position + value_size]
        position += value_size


def _read_block(table: bytes, handle: bytes, path: str) -> bytes:
    offset, position = _read_varint(handle, 0)
    size, _ = _read_varint(handle, position)
    if offset + size + 5 > len(table):
        raise ValueError(f"{path}: block at {offset} (+{size} bytes) runs past the end of the file "
                         "(truncated checkpoint index?)")
    contents, block_type = table[offset:offset + size], table[offset + size]
    (stored_crc,) = struct.unpack_from("<I", table, offset + size + 1)
    if mask_crc(crc32c(table[offset:offset + size + 1])) != stored_crc:
        raise ValueError(f"{path}: block checksum mismatch at offset {offset}; the file is corrupt")
    if block_type == 1:
        raise ValueError(f"{path}: snappy-compressed table block; TF writes checkpoint indexes "
                         "uncompressed, so this is not a TF checkpoint index this reader supports")
    if block_type != 0:
        raise ValueError(f"{path}: unknown block compression type {block_type}")
    return contents


def _read_table(table: bytes, path: str) -> Iterator[tuple[bytes, bytes]]:
    if len(table) < _FOOTER_SIZE or struct.unpack("<Q", table[-8:])[0] != _TABLE_MAGIC:
        raise ValueError(f"{path} is not a TF checkpoint index (no table magic number at its end)")
    footer = table[-_FOOTER_SIZE:]
    _, position = _read_varint(footer, 0)  # metaindex handle: TF tables have no meta blocks
    _, position = _read_varint(footer, position)
    index = _read_block(table, footer[position:], path)
    for _, data_handle in _block_entries(index):
        yield from _block_entries(_read_block(table, data_handle, path))


class _BlockBuilder:
    """block_builder.cc: prefix-compressed keys with a full key every `restart_interval`."""

    def __init__(self, restart_interval: int) -> None:
        self.restart_interval = restart_interval
        self.buffer, self.restarts, self.counter, self.last_key = bytearray(), [0], 0, b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.restart_interval:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += _varint(shared) + _varint(len(key) - shared) + _varint(len(value))
        self.buffer += key[shared:] + value
        self.last_key, self.counter = key, self.counter + 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buffer) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts,
                                                len(self.restarts))


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """table_builder.cc FindShortestSeparator: a short key in [start, limit)."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common < min(len(start), len(limit)) and start[common] < 0xFF \
            and start[common] + 1 < limit[common]:
        return start[:common] + bytes([start[common] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """table_builder.cc FindShortSuccessor: a short key >= `key`."""
    for position, byte in enumerate(key):
        if byte != 0xFF:
            return key[:position] + bytes([byte + 1])
    return key


def _build_table(items: list[tuple[bytes, bytes]], block_size: int = _BLOCK_SIZE) -> bytes:
    """table_builder.cc TableBuilder with kNoCompression, for keys in strictly increasing order."""
    out = bytearray()

    def write_block(block: _BlockBuilder) -> bytes:
        contents = block.finish()
        handle = _varint(len(out)) + _varint(len(contents))
        out.extend(contents + b"\x00")  # block type kNoCompression, covered by the CRC
        out.extend(struct.pack("<I", mask_crc(crc32c(contents + b"\x00"))))
        return handle

    data, index = _BlockBuilder(_RESTART_INTERVAL), _BlockBuilder(1)
    pending_handle, last_key = None, b""

    def flush() -> None:
        nonlocal data, pending_handle
        if data.buffer:
            pending_handle, data = write_block(data), _BlockBuilder(_RESTART_INTERVAL)

    for number, (key, value) in enumerate(items):
        if number and key <= last_key:
            raise ValueError(f"table keys must increase strictly: {key!r} after {last_key!r}")
        if number and len(key) + len(value) >= 2 * block_size:
            flush()
        if pending_handle is not None:
            index.add(_shortest_separator(last_key, key), pending_handle)
            pending_handle = None
        last_key = key
        data.add(key, value)
        if data.size_estimate() >= block_size:
            flush()
    flush()
    metaindex_handle = write_block(_BlockBuilder(_RESTART_INTERVAL))
    if pending_handle is not None:
        index.add(_short_successor(last_key), pending_handle)
    index_handle = write_block(index)
    out.extend((metaindex_handle + index_handle).ljust(_FOOTER_SIZE - 8, b"\x00"))
    out.extend(struct.pack("<Q", _TABLE_MAGIC))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Tensor bundle (tensor_bundle.cc, tensor_bundle.proto).

# tensorflow/core/framework/types.proto DataType values.
_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"), 4: np.dtype("u1"),
    5: np.dtype("<i2"), 6: np.dtype("i1"), 9: np.dtype("<i8"), 10: np.dtype("?"),
    14: np.dtype(ml_dtypes.bfloat16), 19: np.dtype("<f2"),
}
_DTYPE_ENUMS = {dtype.newbyteorder("="): enum for enum, dtype in _DTYPES.items()}
# BundleHeaderProto: num_shards 1, endianness LITTLE (0, the default, so absent), version
# {producer 1} (kTensorBundleVersion; min_consumer 0 absent).
_HEADER = b"\x08\x01" + b"\x1a\x02\x08\x01"


class _Entry:
    """A parsed BundleEntryProto."""

    def __init__(self, name: str, message: bytes) -> None:
        self.name, self.dtype_enum = name, 0
        self.shape: tuple[int, ...] = ()
        self.shard_id = self.offset = self.size = self.crc = 0
        self.sliced = False
        for field, value in _proto_fields(message):
            if field == 1:
                self.dtype_enum = _number(value)
            elif field == 2:  # TensorShapeProto: repeated Dim dim = 2 {int64 size = 1}
                self.shape = tuple(
                    _signed64(_number(dict(_proto_fields(_message(dim))).get(1, 0)))
                    for number, dim in _proto_fields(_message(value)) if number == 2)
            elif field == 3:
                self.shard_id = _number(value)
            elif field == 4:
                self.offset = _number(value)
            elif field == 5:
                self.size = _number(value)
            elif field == 6:
                self.crc = _number(value)
            elif field == 7:
                self.sliced = True


def _entry_proto(dtype_enum: int, shape: tuple[int, ...], offset: int, size: int,
                 crc: int) -> bytes:
    """BundleEntryProto bytes as proto3 serializes them: fields in number order, zeros left out,
    the shape always present (BundleWriter sets it, even for a scalar)."""
    def field(tag: int, value: int) -> bytes:
        return bytes([tag]) + _varint(value) if value else b""

    dims = [field(0x08, size) for size in shape]  # Dim {int64 size = 1}
    shape_proto = b"".join(b"\x12" + _varint(len(dim)) + dim for dim in dims)  # repeated dim = 2
    return (field(0x08, dtype_enum) + b"\x12" + _varint(len(shape_proto)) + shape_proto
            + field(0x20, offset) + field(0x28, size)
            + (b"\x35" + struct.pack("<I", crc) if crc else b""))  # fixed32 crc32c = 6


def _data_filename(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _read_index(prefix: str) -> tuple[int, dict[str, _Entry]]:
    """(number of data shards, tensor name -> entry) from `<prefix>.index`."""
    path = prefix + ".index"
    table = epath.Path(path).read_bytes()
    items = iter(_read_table(table, path))
    header_key, header = next(items, (None, b""))
    if header_key != b"":
        raise ValueError(f"{path}: the first entry is not the bundle header; not a TF checkpoint")
    fields = dict(_proto_fields(header))
    version = dict(_proto_fields(_message(fields.get(3, b""))))
    if fields.get(2, 0) != 0:
        raise ValueError(f"{path}: big-endian checkpoint; convert it on a big-endian host first")
    min_consumer = _number(version.get(2, 0))  # VersionDef.min_consumer vs kTensorBundleVersion
    if min_consumer > 1:
        raise ValueError(f"{path}: written by a newer TensorFlow (bundle format min_consumer="
                         f"{min_consumer} > 1)")
    return _number(fields.get(1, 1)), {key.decode(): _Entry(key.decode(), value)
                                       for key, value in items}


def _read_tensor(prefix: str, entry: _Entry, num_shards: int) -> np.ndarray:
    if entry.sliced:
        raise ValueError(f"variable {entry.name!r} in {prefix} is saved in partitioned slices, "
                         "which this reader does not assemble")
    if entry.dtype_enum not in _DTYPES:
        raise ValueError(f"variable {entry.name!r} in {prefix} has TF dtype enum "
                         f"{entry.dtype_enum}, not a numeric type this reader supports")
    dtype = _DTYPES[entry.dtype_enum]
    count = int(np.prod(entry.shape, dtype=np.int64))
    if entry.size != count * dtype.itemsize:
        raise ValueError(f"variable {entry.name!r} in {prefix}: entry says {entry.size} bytes but "
                         f"shape {entry.shape} of {dtype} needs {count * dtype.itemsize}")
    path = _data_filename(prefix, entry.shard_id, num_shards)
    with epath.Path(path).open("rb") as data_file:  # a gs:// file: a ranged read
        data_file.seek(entry.offset)
        raw = data_file.read(entry.size)
    if len(raw) != entry.size:
        raise ValueError(f"{path} is truncated: variable {entry.name!r} needs bytes "
                         f"[{entry.offset}, {entry.offset + entry.size})")
    if mask_crc(crc32c(raw)) != entry.crc:
        raise ValueError(f"{path}: checksum mismatch for variable {entry.name!r}; file is corrupt")
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("=")).reshape(entry.shape)


def tf_checkpoint_shapes(prefix: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of every variable in the TF checkpoint `prefix`, from its index alone
    (as tf.train.list_variables; no tensor data is read)."""
    _, entries = _read_index(prefix)
    return {name: entry.shape for name, entry in entries.items()}


def read_tf_checkpoint(prefix: str, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """The variables `names` (default: all) of the TF checkpoint `prefix`, as NumPy arrays."""
    num_shards, entries = _read_index(prefix)
    missing = sorted(set(names or ()) - set(entries))
    if missing:
        raise KeyError(f"variables {missing} are not in checkpoint {prefix}")
    return {name: _read_tensor(prefix, entries[name], num_shards)
            for name in (sorted(entries) if names is None else names)}


def save_tf_checkpoint(variables: Mapping[str, np.ndarray], prefix: str) -> None:
    """Writes `variables` as a TF1 checkpoint `<prefix>.index` + `<prefix>.data-00000-of-00001`,
    byte for byte as TF's BundleWriter does (no data alignment; entries in name order)."""
    arrays = {name: np.asarray(value) for name, value in variables.items()}
    for name, array in arrays.items():
        if not name:
            raise ValueError("variable names must be non-empty (the empty key is the header)")
        if array.dtype.newbyteorder("=") not in _DTYPE_ENUMS:
            raise ValueError(f"variable {name!r} has dtype {array.dtype}, which has no TF "
                             "checkpoint encoding here; use one of "
                             f"{sorted(map(str, _DTYPE_ENUMS))}")
    epath.Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    data_path, index_items, offset = _data_filename(prefix, 0, 1), [(b"", _HEADER)], 0
    with epath.Path(data_path + ".tmp").open("wb") as data_file:
        for name in sorted(arrays, key=str.encode):
            array = arrays[name]
            raw = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
            data_file.write(raw)
            entry = _entry_proto(_DTYPE_ENUMS[array.dtype.newbyteorder("=")], array.shape,
                                 offset, len(raw), mask_crc(crc32c(raw)))
            index_items.append((name.encode(), entry))
            offset += len(raw)
    epath.Path(prefix + ".index.tmp").write_bytes(_build_table(index_items))
    # Data first, then index, as BundleWriter::Finish.
    epath.Path(data_path + ".tmp").replace(data_path)
    epath.Path(prefix + ".index.tmp").replace(prefix + ".index")
