"""The TF tensor-bundle format without TensorFlow, byte for byte: CRC-32C, the LevelDB table
layout, the BundleHeaderProto/BundleEntryProto encodings, and corruption detection."""
import struct

import numpy as np
import pytest

from albert_jax.convert.tf_bundle import (
    _read_table,
    crc32c,
    mask_crc,
    read_tf_checkpoint,
    save_tf_checkpoint,
    tf_checkpoint_shapes,
)


def test_crc32c_matches_rfc3720_vectors():
    # RFC 3720 appendix B.4 and the classic "123456789" check value of CRC-32C.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert mask_crc(0) == 0xA282EAD8  # rotate(0) + kMaskDelta


def test_vectorised_crc32c_equals_byte_by_byte():
    rng = np.random.default_rng(0)
    table = [0] * 256
    for value in range(256):  # the Castagnoli table, built here independently
        crc = value
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table[value] = crc
    for size in (16384, 16385, 65537, 200003):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        crc = 0xFFFFFFFF
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        assert crc32c(data) == crc ^ 0xFFFFFFFF, size


def _block(contents: bytes) -> bytes:
    """A table block on disk: contents, type byte 0 (no compression), masked CRC of both."""
    return contents + b"\x00" + struct.pack("<I", mask_crc(crc32c(contents + b"\x00")))


def test_index_and_data_bytes_follow_the_documented_layout(tmp_path):
    # tensorflow/core/lib/io/table_format.txt (LevelDB), tensor_bundle.proto, written by hand.
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_tf_checkpoint({"a": array}, str(tmp_path / "ckpt"))
    with open(tmp_path / "ckpt.data-00000-of-00001", "rb") as data_file:
        assert data_file.read() == array.tobytes()  # raw little-endian, no padding
    entry = (b"\x08\x01"                                         # dtype DT_FLOAT
             + b"\x12\x08" + b"\x12\x02\x08\x02" + b"\x12\x02\x08\x03"  # shape {dim 2} {dim 3}
             + b"\x28\x18"                                       # size 24 (offset 0 omitted)
             + b"\x35" + struct.pack("<I", mask_crc(crc32c(array.tobytes()))))
    header = b"\x08\x01\x1a\x02\x08\x01"  # num_shards 1, version {producer 1}
    data_block = (b"\x00\x00\x06" + header                     # key "" (shared 0, 0 new bytes)
                  + b"\x00\x01" + bytes([len(entry)]) + b"a" + entry
                  + struct.pack("<II", 0, 1))                  # restarts [0], count 1
    metaindex_block = struct.pack("<II", 0, 1)                 # empty
    index_block = (b"\x00\x01\x02" + b"b" + bytes([0, len(data_block)])  # successor("a") -> handle
                   + struct.pack("<II", 0, 1))
    metaindex_at = len(data_block) + 5
    index_at = metaindex_at + len(metaindex_block) + 5
    footer = (bytes([metaindex_at, len(metaindex_block), index_at, len(index_block)]).ljust(40, b"\0")
              + struct.pack("<Q", 0xDB4775248B80FB57))
    expected = _block(data_block) + _block(metaindex_block) + _block(index_block) + footer
    with open(tmp_path / "ckpt.index", "rb") as index_file:
        assert index_file.read() == expected


def _bundle_protos():
    """BundleHeaderProto / BundleEntryProto built from tensor_bundle.proto's field numbers."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    from google.protobuf import descriptor_pool, message_factory
    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="bundle_check.proto", package="check",
                                              syntax="proto3")

    def message(name, *fields):
        proto = file.message_type.add(name=name)
        for field_name, number, kind, extra in fields:
            proto.field.add(name=field_name, number=number, type=kind,
                            label=extra.pop("label", F.LABEL_OPTIONAL), **extra)

    message("Dim", ("size", 1, F.TYPE_INT64, {}), ("name", 2, F.TYPE_STRING, {}))
    message("Shape", ("dim", 2, F.TYPE_MESSAGE, dict(type_name=".check.Dim", label=F.LABEL_REPEATED)),
            ("unknown_rank", 3, F.TYPE_BOOL, {}))
    message("Entry", ("dtype", 1, F.TYPE_INT32, {}),
            ("shape", 2, F.TYPE_MESSAGE, dict(type_name=".check.Shape")),
            ("shard_id", 3, F.TYPE_INT32, {}), ("offset", 4, F.TYPE_INT64, {}),
            ("size", 5, F.TYPE_INT64, {}), ("crc32c", 6, F.TYPE_FIXED32, {}))
    message("Version", ("producer", 1, F.TYPE_INT32, {}), ("min_consumer", 2, F.TYPE_INT32, {}))
    message("Header", ("num_shards", 1, F.TYPE_INT32, {}), ("endianness", 2, F.TYPE_INT32, {}),
            ("version", 3, F.TYPE_MESSAGE, dict(type_name=".check.Version")))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("check.Header")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("check.Entry")))


def test_entries_equal_what_protobuf_serializes(tmp_path):
    Header, Entry = _bundle_protos()
    variables = {"global_step": np.array(7, np.int64), "w": np.ones((3, 0, 2), np.float32),
                 "x/y": np.arange(300, dtype=np.float16).reshape(300, 1),
                 "z": np.array([True, False])}
    save_tf_checkpoint(variables, str(tmp_path / "ckpt"))
    with open(tmp_path / "ckpt.index", "rb") as index_file:
        items = dict(_read_table(index_file.read(), "ckpt.index"))
    header = Header(num_shards=1)
    header.version.producer = 1
    assert items.pop(b"") == header.SerializeToString(deterministic=True)
    offset, dtypes = 0, {np.dtype(np.int64): 9, np.dtype(np.float32): 1, np.dtype(np.float16): 19,
                         np.dtype(bool): 10}
    for name in sorted(variables):
        raw = variables[name].tobytes()
        entry = Entry(dtype=dtypes[variables[name].dtype], offset=offset, size=len(raw),
                      crc32c=mask_crc(crc32c(raw)))
        entry.shape.SetInParent()  # BundleWriter always sets the shape, even for a scalar
        for size in variables[name].shape:
            entry.shape.dim.add(size=size)
        assert items.pop(name.encode()) == entry.SerializeToString(deterministic=True), name
        offset += len(raw)
    assert not items
    assert tf_checkpoint_shapes(str(tmp_path / "ckpt")) == \
        {"global_step": (), "w": (3, 0, 2), "x/y": (300, 1), "z": (2,)}
    read = read_tf_checkpoint(str(tmp_path / "ckpt"))
    for name, value in variables.items():
        assert read[name].dtype == value.dtype and np.array_equal(read[name], value)


def _varint(buffer: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while buffer[position] & 0x80:
        value |= (buffer[position] & 0x7F) << shift
        position, shift = position + 1, shift + 7
    return value | (buffer[position] << shift), position + 1


def _block_items(block: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
    """(key, value) entries of a block and its restart count, by the LevelDB block layout."""
    (restarts,) = struct.unpack("<I", block[-4:])
    items, position, key = [], 0, b""
    while position < len(block) - 4 * (restarts + 1):
        shared, position = _varint(block, position)
        new, position = _varint(block, position)
        length, position = _varint(block, position)
        key = key[:shared] + block[position:position + new]
        items.append((key, block[position + new:position + new + length]))
        position += new + length
    return items, restarts


def _index_entries(table: bytes) -> list[tuple[bytes, int, int]]:
    """(separator key, data block offset, size) from the footer's index handle, parsed here by
    the format description alone: footer = metaindex handle, index handle, padding, magic."""
    assert struct.unpack("<Q", table[-8:])[0] == 0xDB4775248B80FB57
    _, position = _varint(table, len(table) - 48)
    _, position = _varint(table, position)
    offset, position = _varint(table, position)
    size, _ = _varint(table, position)
    entries = []
    for key, handle in _block_items(table[offset:offset + size])[0]:
        block_offset, after = _varint(handle, 0)
        entries.append((key, block_offset, _varint(handle, after)[0]))
    return entries


def test_many_variables_span_several_blocks(tmp_path):
    # > 262144 bytes of index entries: several data blocks, separator keys in the index block,
    # restart points every 16 keys (table_builder.cc, block_builder.cc).
    variables = {f"bert/encoder/layer_{n:05d}/some/long/variable/name": np.array([n], np.int32)
                 for n in range(6000)}
    save_tf_checkpoint(variables, str(tmp_path / "ckpt"))
    table = (tmp_path / "ckpt.index").read_bytes()
    blocks = _index_entries(table)
    assert len(blocks) >= 2
    keys = []
    for number, (separator, offset, size) in enumerate(blocks):
        items, restarts = _block_items(table[offset:offset + size])
        assert restarts == -(-len(items) // 16)  # a full key every 16 entries
        if number + 1 < len(blocks):
            assert size >= 262144 and offset + size + 5 == blocks[number + 1][1]
        keys.append([key for key, _ in items])
    for number, (separator, _, _) in enumerate(blocks):
        # The index key separates: >= every key of its block, < every key of the next.
        assert keys[number][-1] <= separator
        if number + 1 < len(blocks):
            assert separator < keys[number + 1][0]
    assert [key for block_keys in keys for key in block_keys] == \
        [b""] + sorted(name.encode() for name in variables)
    read = read_tf_checkpoint(str(tmp_path / "ckpt"))
    assert list(read) == sorted(variables)
    assert all(read[name].tolist() == value.tolist() for name, value in variables.items())


def test_corruption_is_detected(tmp_path):
    save_tf_checkpoint({"a": np.arange(4, dtype=np.float32)}, str(tmp_path / "ckpt"))
    data_path = tmp_path / "ckpt.data-00000-of-00001"
    data = bytearray(data_path.read_bytes())
    data[5] ^= 1
    data_path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch for variable 'a'"):
        read_tf_checkpoint(str(tmp_path / "ckpt"))
    index_path = tmp_path / "ckpt.index"
    index = bytearray(index_path.read_bytes())
    index_path.write_bytes(bytes(index[:-1]))
    with pytest.raises(ValueError, match="not a TF checkpoint index"):
        read_tf_checkpoint(str(tmp_path / "ckpt"))
    flipped = bytearray(index)
    flipped[3] ^= 1
    index_path.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="block checksum mismatch"):
        read_tf_checkpoint(str(tmp_path / "ckpt"))
    # A snappy block (type 1) with a valid checksum is refused by name.
    [(_, offset, size)] = _index_entries(bytes(index))
    index[offset + size] = 1
    index[offset + size + 1:offset + size + 5] = struct.pack(
        "<I", mask_crc(crc32c(bytes(index[offset:offset + size + 1]))))
    index_path.write_bytes(bytes(index))
    with pytest.raises(ValueError, match="snappy"):
        read_tf_checkpoint(str(tmp_path / "ckpt"))
