"""Reference TF1 checkpoints without TensorFlow: the bundle format byte for byte, and ALBERT
weights that give the logits of a NumPy port of SPEC 3.2 run on the TF variables themselves."""
import json
import os
import struct

import flax.linen as nn
import jax
import numpy as np
import pytest

from albert_jax.convert import load_tf_checkpoint, save_tf_checkpoint
from albert_jax.convert.tf_checkpoint import crc32c, mask_crc, read_tf_checkpoint
from albert_jax.model import AlbertForPreTraining, ConfigError

# --------------------------------------------------------------------------------------------
# ALBERT variables by the SPEC 4.1 / 4.2 tables, and SPEC 3.2 in NumPy.

TINY = dict(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2,
            num_hidden_groups=1, inner_group_num=1, num_attention_heads=3, intermediate_size=20,
            hidden_act="gelu", max_position_embeddings=16, type_vocab_size=2,
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02,
            # SPEC 3.1: keys in the released json that the model never reads.
            down_scale_factor=1, net_structure_type=0, gap_size=0, num_memory_blocks=0)
VARIANTS = {
    "tiny": {},
    "groups_and_inner_groups": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    "embedding_equals_hidden": dict(embedding_size=12),
}


def _reference_variables(fields: dict, heads: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under the reference names and shapes (SPEC 4.1, 4.2)."""
    rng = np.random.default_rng(seed)
    V, E, H, I = (fields[k] for k in ("vocab_size", "embedding_size", "hidden_size",
                                      "intermediate_size"))
    shapes = {"bert/embeddings/word_embeddings": (V, E),
              "bert/embeddings/token_type_embeddings": (fields["type_vocab_size"], E),
              "bert/embeddings/position_embeddings": (fields["max_position_embeddings"], E),
              "bert/embeddings/LayerNorm/gamma": (E,), "bert/embeddings/LayerNorm/beta": (E,),
              "bert/pooler/dense/kernel": (H, H), "bert/pooler/dense/bias": (H,)}
    if E != H:
        shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = (E, H)
        shapes["bert/encoder/embedding_hidden_mapping_in/bias"] = (H,)
    for g in range(fields["num_hidden_groups"]):
        for i in range(fields["inner_group_num"]):
            scope = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            for name in ("attention_1/self/query", "attention_1/self/key", "attention_1/self/value",
                         "attention_1/output/dense"):
                shapes[scope + name + "/kernel"], shapes[scope + name + "/bias"] = (H, H), (H,)
            shapes[scope + "ffn_1/intermediate/dense/kernel"] = (H, I)
            shapes[scope + "ffn_1/intermediate/dense/bias"] = (I,)
            shapes[scope + "ffn_1/intermediate/output/dense/kernel"] = (I, H)
            shapes[scope + "ffn_1/intermediate/output/dense/bias"] = (H,)
            for norm in ("LayerNorm", "LayerNorm_1"):
                shapes[f"{scope}{norm}/gamma"] = shapes[f"{scope}{norm}/beta"] = (H,)
    if heads:
        shapes.update({"cls/predictions/transform/dense/kernel": (H, E),
                       "cls/predictions/transform/dense/bias": (E,),
                       "cls/predictions/transform/LayerNorm/gamma": (E,),
                       "cls/predictions/transform/LayerNorm/beta": (E,),
                       "cls/predictions/output_bias": (V,),
                       "cls/seq_relationship/output_weights": (2, H),
                       "cls/seq_relationship/output_bias": (2,)})
    return {name: ((name.endswith("gamma")) + 0.3 * rng.standard_normal(shape)).astype(np.float32)
            for name, shape in shapes.items()}


def _with_optimizer_state(variables: dict) -> dict:
    """What run_pretraining.py saves besides the weights: LAMB slots and the step (SPEC 4.4)."""
    state = {"global_step": np.array(125000, np.int64)}
    for name, value in variables.items():
        state[name + "/adam_m"] = np.full_like(value, 7.0)
        state[name + "/adam_v"] = np.full_like(value, 9.0)
    return {**variables, **state}


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12) * gamma + beta


def _gelu(x):  # SPEC 3.2.8: the reference "gelu" is the tanh form
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _reference_logits(v: dict, fields: dict, input_ids, token_type_ids, attention_mask,
                      masked_lm_positions):
    """SPEC 3.2 step by step in float64 on the TF variables; (mlm [B,P,V], sop [B,2])."""
    v = {name: value.astype(np.float64) for name, value in v.items()}
    batch, seq = input_ids.shape
    H, N, L, G = (fields[k] for k in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                      "num_hidden_groups"))
    x = (v["bert/embeddings/word_embeddings"][input_ids]
         + v["bert/embeddings/token_type_embeddings"][token_type_ids]
         + v["bert/embeddings/position_embeddings"][:seq])
    x = _layer_norm(x, v["bert/embeddings/LayerNorm/gamma"], v["bert/embeddings/LayerNorm/beta"])
    if "bert/encoder/embedding_hidden_mapping_in/kernel" in v:
        x = x @ v["bert/encoder/embedding_hidden_mapping_in/kernel"] \
            + v["bert/encoder/embedding_hidden_mapping_in/bias"]
    adder = (1.0 - attention_mask[:, None, None, :]) * -10000.0
    for layer in range(L):
        for inner in range(fields["inner_group_num"]):
            p = f"bert/encoder/transformer/group_{int(layer / L * G)}/inner_group_{inner}/"
            dense = lambda h, name: h @ v[p + name + "/kernel"] + v[p + name + "/bias"]
            heads = lambda h: h.reshape(batch, seq, N, H // N).transpose(0, 2, 1, 3)
            q, k, val = (heads(dense(x, f"attention_1/self/{n}")) for n in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(H // N) + adder
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            context = (probs @ val).transpose(0, 2, 1, 3).reshape(batch, seq, H)
            a = _layer_norm(dense(context, "attention_1/output/dense") + x,
                            v[p + "LayerNorm/gamma"], v[p + "LayerNorm/beta"])
            f = dense(_gelu(dense(a, "ffn_1/intermediate/dense")), "ffn_1/intermediate/output/dense")
            x = _layer_norm(f + a, v[p + "LayerNorm_1/gamma"], v[p + "LayerNorm_1/beta"])
    pooled = np.tanh(x[:, 0] @ v["bert/pooler/dense/kernel"] + v["bert/pooler/dense/bias"])
    h = np.take_along_axis(x, masked_lm_positions[:, :, None], axis=1)
    h = _gelu(h @ v["cls/predictions/transform/dense/kernel"] + v["cls/predictions/transform/dense/bias"])
    h = _layer_norm(h, v["cls/predictions/transform/LayerNorm/gamma"],
                    v["cls/predictions/transform/LayerNorm/beta"])
    mlm = h @ v["bert/embeddings/word_embeddings"].T + v["cls/predictions/output_bias"]
    sop = pooled @ v["cls/seq_relationship/output_weights"].T + v["cls/seq_relationship/output_bias"]
    return mlm, sop


def _write(tmp_path, fields: dict, variables: dict, prefix: str = "model.ckpt-125000") -> tuple[str, str]:
    config_path = str(tmp_path / "albert_config.json")
    with open(config_path, "w") as config_file:
        json.dump(fields, config_file)
    save_tf_checkpoint(variables, str(tmp_path / prefix))
    return str(tmp_path / prefix), config_path


def _expected_tree(config):
    ids = jax.ShapeDtypeStruct((1, 4), np.int32)
    return jax.eval_shape(lambda i: nn.unbox(AlbertForPreTraining(config).init(
        jax.random.PRNGKey(0), i, i, i, i)["params"]), ids)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_checkpoint_gives_reference_logits(name, tmp_path):
    fields = {**TINY, **VARIANTS[name]}
    variables = _reference_variables(fields)
    prefix, config_path = _write(tmp_path, fields, _with_optimizer_state(variables))
    config, params = load_tf_checkpoint(prefix, config_path)
    assert config.hidden_act == "gelu_tanh" and config.layer_norm_eps == 1e-12
    expected = _expected_tree(config)
    assert jax.tree.structure(params) == jax.tree.structure(expected)
    for actual, wanted in zip(jax.tree.leaves(params), jax.tree.leaves(expected)):
        assert actual.shape == wanted.shape and actual.dtype == wanted.dtype

    rng = np.random.default_rng(1)
    input_ids = rng.integers(0, fields["vocab_size"], (3, 9)).astype(np.int32)
    token_type_ids = (np.arange(9) >= 4).astype(np.int32)[None].repeat(3, 0)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[2, 3:] = 0
    positions = np.array([[1, 5, 8], [0, 2, 4], [2, 1, 0]], np.int32)
    mlm, sop = jax.jit(AlbertForPreTraining(config).apply)(
        {"params": params}, input_ids, token_type_ids, attention_mask, positions)
    reference_mlm, reference_sop = _reference_logits(variables, fields, input_ids, token_type_ids,
                                                     attention_mask, positions)
    assert np.abs(reference_mlm).max() > 1 and np.abs(reference_sop).max() > 0.1
    np.testing.assert_allclose(mlm, reference_mlm, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sop, reference_sop, rtol=0, atol=1e-5)


def test_tf_hub_export_and_checkpoint_directories(tmp_path):
    variables = _reference_variables(TINY)
    os.makedirs(tmp_path / "ckpt")
    prefix, config_path = _write(tmp_path / "ckpt", TINY, variables)
    _, params = load_tf_checkpoint(prefix, config_path)
    # A TF1 training directory: the `checkpoint` state file names the latest prefix.
    with open(tmp_path / "ckpt" / "checkpoint", "w") as state:
        state.write('model_checkpoint_path: "model.ckpt-125000"\n'
                    'all_model_checkpoint_paths: "model.ckpt-125000"\n')
    _, from_directory = load_tf_checkpoint(str(tmp_path / "ckpt"), config_path)
    # TF-Hub: `module/` names under variables/variables (SPEC 4.4), no optimizer slots.
    hub = {f"module/{name}": value for name, value in variables.items()}
    save_tf_checkpoint(hub, str(tmp_path / "hub" / "variables" / "variables"))
    _, from_hub = load_tf_checkpoint(str(tmp_path / "hub"), config_path)
    _, from_index = load_tf_checkpoint(prefix + ".index", config_path)
    for other in (from_directory, from_hub, from_index):
        jax.tree.map(np.testing.assert_array_equal, other, params)
    np.testing.assert_array_equal(params["seq_relationship"]["dense"]["kernel"],
                                  variables["cls/seq_relationship/output_weights"].T)


def test_backbone_only_checkpoint(tmp_path):
    prefix, config_path = _write(tmp_path, TINY, _reference_variables(TINY, heads=False))
    _, params = load_tf_checkpoint(prefix, config_path)
    assert set(params) == {"albert"}


def test_errors_list_missing_unknown_and_misshapen_variables(tmp_path):
    variables = _reference_variables(TINY)
    del variables["bert/pooler/dense/bias"]
    variables["bert/encoder/extra/kernel"] = np.zeros(3, np.float32)
    variables["cls/predictions/transform/dense/kernel"] = np.zeros((12, 9), np.float32)
    prefix, config_path = _write(tmp_path, TINY, variables)
    with pytest.raises(ValueError) as error:
        load_tf_checkpoint(prefix, config_path)
    message = str(error.value)
    assert "missing variables ['bert/pooler/dense/bias']" in message
    assert "unknown variables ['bert/encoder/extra/kernel']" in message
    assert "cls/predictions/transform/dense/kernel has shape (12, 9), the config needs (12, 8)" in message


def test_a_head_is_all_or_nothing(tmp_path):
    variables = _reference_variables(TINY, heads=False)
    variables["cls/predictions/output_bias"] = np.zeros(40, np.float32)
    prefix, config_path = _write(tmp_path, TINY, variables)
    with pytest.raises(ValueError, match=r"missing variables \['cls/predictions/transform/LayerNorm/beta'"):
        load_tf_checkpoint(prefix, config_path)


def test_config_json_mapping(tmp_path):
    prefix, config_path = _write(tmp_path, TINY, _reference_variables(TINY))
    for bad, match in ((dict(TINY, hidden_act="swish"), "hidden_act='swish'"),
                       ({k: v for k, v in TINY.items() if k != "vocab_size"}, "vocab_size")):
        with open(config_path, "w") as config_file:
            json.dump(bad, config_file)
        with pytest.raises(ConfigError, match=match):
            load_tf_checkpoint(prefix, config_path)
    with open(config_path, "w") as config_file:
        json.dump(TINY, config_file)
    with pytest.raises(FileNotFoundError, match="model.ckpt-best"):
        load_tf_checkpoint(str(tmp_path / "nowhere"), config_path)


# --------------------------------------------------------------------------------------------
# The bundle format itself.

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
    from albert_jax.convert.tf_checkpoint import _read_table
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
