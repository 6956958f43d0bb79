"""Mesh from config, logical-axis rules, sharded init, train state shardings (8 CPU devices)."""
import importlib.util
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from albert_jax import pretraining
from albert_jax.errors import ConfigError
from albert_jax.model import AlbertForPreTraining, get_config  # noqa: E402
from albert_jax.train import optim, sharding, tree_names  # noqa: E402
from albert_jax.train import state as state_lib

SEQ_LEN, MAX_PREDICTIONS = 8, 2


def mesh_config(data, fsdp, tensor):
    return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


def test_eight_devices():
    assert jax.device_count() == 8


@pytest.mark.parametrize("axes,expected", [
    ((8, 1, 1), (8, 1, 1)), ((2, 4, 1), (2, 4, 1)), ((2, 2, 2), (2, 2, 2)),
    ((-1, 2, 1), (4, 2, 1)), ((1, -1, 4), (1, 2, 4)),
])
def test_mesh_shapes_resolve(axes, expected):
    mesh = sharding.make_mesh(mesh_config(*axes))
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    assert tuple(mesh.shape.values()) == expected
    assert set(mesh.axis_types) == {jax.sharding.AxisType.Auto}
    assert sorted(d.id for d in mesh.devices.flat) == list(range(8))


@pytest.mark.parametrize("axes,message", [
    ((3, 1, 1), "mesh.data=3, mesh.fsdp=1, mesh.tensor=1: the mesh has 3 devices but there are 8"),
    ((4, 4, 1), "the mesh has 16 devices but there are 8"),
    ((-1, -1, 1), "only one mesh axis may be -1, got ['data', 'fsdp']"),
    ((-1, 3, 1), "the fixed axes (3 devices) do not divide the 8 devices"),
    ((0, 8, 1), "mesh.data=0 must be a positive integer or -1"),
])
def test_mesh_errors_name_values_and_device_count(axes, message):
    with pytest.raises(ConfigError) as error:
        sharding.make_mesh(mesh_config(*axes))
    assert message in str(error.value)


def test_mesh_on_given_devices():
    mesh = sharding.make_mesh(mesh_config(-1, 1, 2), devices=jax.devices()[:4])
    assert tuple(mesh.shape.values()) == (2, 1, 2)


# More than one slice: 8 CPU devices standing for slices of consecutive devices.

def multi_slice_config(data, fsdp, num_slices, **dcn):
    return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=1, num_slices=num_slices,
                                          **dcn))


def device_ids(mesh):
    return np.vectorize(lambda device: device.id)(mesh.devices)[:, :, 0].tolist()


def test_one_slice_is_todays_mesh():
    for axes in [(8, 1, 1), (2, 4, 1), (2, 2, 2)]:
        keyed = ml_collections.ConfigDict(dict(zip(("data", "fsdp", "tensor"), axes),
                                               num_slices=1, dcn_data=-1, dcn_fsdp=1))
        today = jax.make_mesh(axes, sharding.MESH_AXES, devices=jax.devices(),
                              axis_types=(jax.sharding.AxisType.Auto,) * 3)
        assert sharding.make_mesh(keyed).devices.tolist() == today.devices.tolist()


def test_two_slices_on_data_put_each_slice_in_its_own_data_rows():
    # Slice 0 = devices 0-3, slice 1 = 4-7 (consecutive groups, as CPU stand-ins); data is
    # slice-major: rows 0-1 inside slice 0, rows 2-3 inside slice 1; fsdp never leaves a slice.
    mesh = sharding.make_mesh(multi_slice_config(-1, 2, 2))
    assert dict(mesh.shape) == {"data": 4, "fsdp": 2, "tensor": 1}
    assert device_ids(mesh) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_fsdp_across_two_slices_tiles_the_slices_along_fsdp():
    mesh = sharding.make_mesh(multi_slice_config(2, 4, 2, dcn_data=1, dcn_fsdp=2))
    assert device_ids(mesh) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    # Four slices of 2, two on each axis: the blocks tile data x fsdp.
    mesh = sharding.make_mesh(multi_slice_config(4, 2, 4, dcn_data=2, dcn_fsdp=2))
    assert device_ids(mesh) == [[0, 2], [1, 3], [4, 6], [5, 7]]


@pytest.mark.parametrize("config, message", [
    (multi_slice_config(4, 2, 2, dcn_data=2, dcn_fsdp=2),
     "mesh.dcn_data=2 x mesh.dcn_fsdp=2 must equal mesh.num_slices=2"),
    (multi_slice_config(8, 1, 2, dcn_fsdp=2),
     "mesh.fsdp=1 (over all slices) is not divisible by mesh.dcn_fsdp=2"),
    (multi_slice_config(2, 4, 2, dcn_fsdp=4), "mesh.dcn_fsdp=4 does not divide mesh.num_slices=2"),
    (multi_slice_config(8, 1, 3), "mesh.num_slices=3 does not divide the 8 devices"),
    (multi_slice_config(1, 8, 4, dcn_fsdp=2),
     "mesh.data=1 (over all slices) is not divisible by mesh.dcn_data=2"),
    (multi_slice_config(8, 1, 0), "mesh.num_slices=0 must be a positive integer"),
    (multi_slice_config(8, 1, 2, dcn_fsdp=-1), "mesh.dcn_fsdp=-1 must be a positive integer"),
])
def test_multi_slice_errors_name_the_keys(config, message):
    with pytest.raises(ConfigError) as error:
        sharding.make_mesh(config)
    assert message in str(error.value)


class SliceDevice:
    """A device that names its slice, as TPU devices of a multi-slice job do."""

    platform = "tpu"

    def __init__(self, device_id, slice_index):
        self.id, self.slice_index = device_id, slice_index


def test_devices_are_grouped_by_their_slice_index():
    devices = [SliceDevice(i, slice_index) for i, slice_index in enumerate([1, 0, 1, 0])]
    assert [[d.id for d in group] for group in sharding.device_slices(devices, 2)] == [
        [1, 3], [0, 2]]
    with pytest.raises(ConfigError, match=r"mesh.num_slices=4 but the devices are in 2 "
                                          r"slice\(s\); set mesh.num_slices=2"):
        sharding.device_slices(devices, 4)
    # A run left at one slice on a multi-slice job is told, not laid out across slices blindly.
    with pytest.raises(ConfigError, match=r"mesh.num_slices=1 but the devices are in 2 slice"):
        sharding.make_mesh(multi_slice_config(4, 1, 1), devices)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="needs the [tpu] extra (libtpu's abstract devices name their slice)")
def test_the_layout_is_create_hybrid_device_mesh_on_tpu_slices(monkeypatch):
    from jax.experimental import mesh_utils

    from albert_jax.train import plan
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other tests' plans may hold libtpu
    devices = list(plan.tpu_target("v5e:2x2", num_slices=2).devices)
    for config, inner, dcn in [(multi_slice_config(4, 2, 2), (2, 2, 1), (2, 1, 1)),
                               (multi_slice_config(2, 4, 2, dcn_data=1, dcn_fsdp=2), (2, 2, 1),
                                (1, 2, 1))]:
        expected = mesh_utils.create_hybrid_device_mesh(inner, dcn, devices)
        assert sharding.make_mesh(config, devices).devices.tolist() == expected.tolist()


def boxed_params(**overrides):
    model = AlbertForPreTraining(get_config("tiny", **overrides))
    return model, state_lib.boxed_abstract_params(model, pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))


def specs_by_name(shardings):
    return {tree_names.path_name(path): leaf.spec
            for path, leaf in jax.tree_util.tree_flatten_with_path(shardings)[0]}


def test_rules_map_tiny_model_params():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    _, params = boxed_params()
    specs = specs_by_name(sharding.param_shardings(params, mesh))
    attention = "albert/encoder/group_0/inner_group_0/attention"
    ffn = "albert/encoder/group_0/inner_group_0/ffn"
    expected = {
        "albert/embeddings/word_embeddings/embedding": P("tensor", None),
        "albert/embeddings/token_type_embeddings/embedding": P(None, None),
        "albert/embeddings/position_embeddings/embedding": P(None, None),
        "albert/embeddings/LayerNorm/scale": P(None),
        "albert/encoder/embedding_hidden_mapping_in/kernel": P(None, "fsdp"),
        f"{attention}/query/kernel": P("fsdp", "tensor"),
        f"{attention}/query/bias": P("tensor"),
        f"{attention}/output/kernel": P("tensor", "fsdp"),
        f"{attention}/LayerNorm/bias": P("fsdp"),
        f"{ffn}/intermediate/kernel": P("fsdp", "tensor"),
        f"{ffn}/output/kernel": P("tensor", "fsdp"),
        "albert/pooler/kernel": P("fsdp", None),
        "predictions/dense/kernel": P("fsdp", None),
        "predictions/output_bias": P("tensor"),
        "seq_relationship/dense/kernel": P(None, None),
    }
    for name, spec in expected.items():
        assert specs[name] == spec, name
    assert len(specs) == 32


def test_non_dividing_dimension_is_replicated():
    # vocab 100 does not divide over tensor=8 (128 does): that dimension falls back to replicated.
    mesh = sharding.make_mesh(mesh_config(1, 1, 8))
    _, params = boxed_params(vocab_size=100)
    specs = specs_by_name(sharding.param_shardings(params, mesh))
    assert specs["albert/embeddings/word_embeddings/embedding"] == P(None, None)
    assert specs["predictions/output_bias"] == P(None)
    intermediate = "albert/encoder/group_0/inner_group_0/ffn/intermediate/kernel"
    assert specs[intermediate] == P("fsdp", "tensor")
    _, params = boxed_params(vocab_size=128)
    specs = specs_by_name(sharding.param_shardings(params, mesh))
    assert specs["albert/embeddings/word_embeddings/embedding"] == P("tensor", None)


def test_unshared_layers_axis_is_replicated():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    _, params = boxed_params(sharing="none")
    specs = specs_by_name(sharding.param_shardings(params, mesh))
    name = "albert/encoder/group_0_per_layer/inner_group_0/attention/query/kernel"
    assert specs[name] == P(None, "fsdp", "tensor")


def test_init_sharded_matches_unsharded_init():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    model = AlbertForPreTraining(get_config("tiny"))
    inputs = pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS)
    def init(rng):
        return model.init(rng, *inputs)["params"]

    rng = jax.random.key(3)
    params = sharding.init_sharded(init, mesh, rng)
    reference = sharding.unbox(jax.jit(init)(rng))
    expected_shardings = sharding.param_shardings(jax.eval_shape(init, rng), mesh)
    for (path, leaf), expected, want in zip(
            jax.tree_util.tree_flatten_with_path(params)[0],
            jax.tree.leaves(expected_shardings), jax.tree.leaves(reference)):
        assert leaf.sharding == expected, tree_names.path_name(path)
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(want))
    kernel = params["albert"]["encoder"]["group_0"]["inner_group_0"]["attention"]["query"]["kernel"]
    assert {shard.data.shape for shard in kernel.addressable_shards} == {(16, 16)}


def test_batch_sharding_and_replicated():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    batch = jax.device_put(jnp.arange(8 * 3).reshape(8, 3), sharding.batch_sharding(mesh))
    assert {shard.data.shape for shard in batch.addressable_shards} == {(2, 3)}
    scalar = jax.device_put(jnp.float32(1.0), sharding.replicated(mesh))
    assert len(scalar.addressable_shards) == 8


def test_debug_table():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    _, params = boxed_params()
    table = sharding.debug_table(params, mesh)
    lines = table.splitlines()
    assert len(lines) == 1 + 32 + 1
    query = next(line for line in lines if "attention/query/kernel" in line)
    # [32, 32] float32 split 2 x 2: 256 floats = 1024 bytes per device.
    assert "(32, 32)" in query and "('hidden', 'heads')" in query
    assert "('fsdp', 'tensor')" in query and "1.0 KiB" in query
    total_parameters = sum(int(np.prod(leaf.value.shape)) for leaf in jax.tree.leaves(
        params, is_leaf=lambda x: hasattr(x, "names")))
    assert lines[-1].startswith(f"total: {total_parameters:,} parameters")


def test_train_state_shardings_follow_params():
    mesh = sharding.make_mesh(mesh_config(2, 2, 2))
    model = AlbertForPreTraining(get_config("tiny"))
    optimizer = optim.lamb(1e-3)
    abstract, shardings = state_lib.abstract_train_state(
        model, optimizer, mesh, pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    def query(tree):
        return tree["albert"]["encoder"]["group_0"]["inner_group_0"]["attention"]["query"][
            "kernel"]

    moments = shardings.opt_state[0]
    assert query(shardings.params).spec == P("fsdp", "tensor")
    assert query(moments.mu).spec == P("fsdp", "tensor")
    assert query(moments.nu).spec == P("fsdp", "tensor")
    assert shardings.step.spec == P()
    assert abstract.step.shape == () and abstract.step.dtype == jnp.int32
    assert query(abstract.params).sharding == query(shardings.params)

    state = state_lib.init_train_state(model, optimizer, mesh, jax.random.key(0),
                                       pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    assert jax.tree.structure(state) == jax.tree.structure(abstract)
    for leaf, target in zip(jax.tree.leaves(state), jax.tree.leaves(abstract)):
        assert leaf.shape == target.shape and leaf.dtype == target.dtype
        assert leaf.sharding == target.sharding
    assert int(state.step) == 0
    boxed = state_lib.boxed_abstract_state(model, optimizer,
                                           pretraining.init_inputs(SEQ_LEN, MAX_PREDICTIONS))
    assert "attention/query/kernel" in state_lib.param_table(boxed.params, mesh)
