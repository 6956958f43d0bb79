"""The device mesh, the one table from logical axis names to mesh axes, and sharded init.

Mesh axes: "data" (pure data parallelism: replicas), "fsdp" (data parallel too, but
parameters and optimizer state are split over it and gathered when used), "tensor" (Megatron
style: attention heads and the FFN inner dimension split over it). The batch is split over
("data", "fsdp").

Every parameter carries logical axis names (model/layers.py); `LOGICAL_RULES` maps them to mesh
axes, so changing the parallelism is a config edit (`config.mesh`), never a model edit. A
parameter dimension whose size does not divide the product of its mesh axes (e.g. 2 token types
on a 4-way axis, or vocab 30000 on an 8-way tensor axis) is replicated on that dimension instead:
jit requires even shards, and such dimensions are small next to the ones that do divide.

The mesh is built with `AxisType.Auto` axes: shardings are set on jit inputs/outputs and
propagated by the compiler (the default of `jax.make_mesh` is now `Explicit`, which would type
every array with its sharding). Propagation alone does not keep the batch split under fsdp: the
parameters arrive split over "fsdp" on their hidden side and the compiler may keep that layout
for the activations, holding the whole global batch on every device (measured, albert-base at
batch 256 x 512 on 16 devices: 107 GiB of temporaries per device with fsdp=16, 12.9 GiB with
data=16). So the model also names the axes of its activations (`nn.with_logical_constraint`:
batch, length, activation_hidden, activation_heads, ...) and of each Dense kernel where it is
used (gathered over fsdp, still split over tensor), and `activation_sharding(mesh)` binds those
names while a step is traced; outside it they are no-ops (init, single-device use).

More than one slice (`mesh.num_slices` > 1): slices talk over the data-center network (DCN),
10-100x slower than the chips' own links (ICI). `mesh.data`/`mesh.fsdp`/`mesh.tensor` are still
the whole axes over all slices; `mesh.dcn_data`/`mesh.dcn_fsdp` say how many slices each spans
(their product is `mesh.num_slices`; by default all on data, so that only the gradient
all-reduce crosses DCN), and the rest of each axis lies inside a slice. The devices are laid out
as `mesh_utils.create_hybrid_device_mesh` does (each slice's block ordered along its ICI, the
blocks tiled over the DCN axes), so an axis index is slice-major: data index = slice's data
position x (data per slice) + position inside the slice. TPU devices name their slice
(`slice_index`); other devices (CPU devices standing for several slices) are split into
`num_slices` consecutive groups, so the CPU tests run the same layout code as a TPU pod.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import NamedSharding, PartitionSpec

from albert_jax.errors import ConfigError
from albert_jax.train import tree_names

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# (logical axis, mesh axis or axes or None = replicated), in order of precedence (flax rules).
LOGICAL_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", BATCH_AXES),
    ("hidden", "fsdp"),  # the H side of every [H, x] / [x, H] kernel: ZeRO-3 style
    ("heads", "tensor"),  # q/k/v column-parallel, attention output row-parallel
    ("mlp", "tensor"),  # FFN intermediate column-parallel, FFN output row-parallel
    ("vocab", "tensor"),  # word embeddings [V, E] and the MLM output bias [V]
    ("embedding", None),  # E = 128: small, replicated
    ("token_types", None),
    ("positions", None),
    ("hidden_out", None),  # the pooler's output side (its input side is "hidden")
    ("classes", None),
    ("layers", None),  # the stacked axis of unshared (per-layer) parameters
    # Activations (model/encoder.py, albert.py, heads.py). Their feature axes have names of
    # their own: "hidden" would split them over fsdp, the parameters' layout, not theirs.
    ("length", None),
    ("activation_embedding", None),
    ("activation_hidden", None),
    ("activation_heads", "tensor"),
    ("activation_mlp", "tensor"),
)

# The train state (params and optimizer moments: the bytes fsdp exists to split) also splits the
# embedding tables over fsdp, ZeRO-3 style (gathered where used). albert-base's word embeddings
# are 3.8M of its 11.7M parameters: without this, fsdp=16 cut the state 2.7x, not 16x.
# LOGICAL_RULES alone places weights outside a train state (checkpoint.load onto a mesh).
STATE_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("vocab", ("tensor", "fsdp")),
    ("positions", "fsdp"),
    *LOGICAL_RULES,
)


def _axis_sizes(mesh_config: ml_collections.ConfigDict) -> dict[str, int]:
    sizes = {}
    for axis in MESH_AXES:
        if axis not in mesh_config:
            raise ConfigError(f"config mesh section lacks mesh.{axis}; it needs {MESH_AXES} "
                              "(one of them may be -1: the rest of the devices)")
        size = mesh_config[axis]
        if not isinstance(size, int) or size == 0 or size < -1:
            raise ConfigError(f"config mesh.{axis}={size!r} must be a positive integer or -1")
        sizes[axis] = size
    return sizes


def mesh_shape(mesh_config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tensor) sizes from `config.mesh`, resolving one -1 to the remaining devices."""
    sizes = _axis_sizes(mesh_config)
    described = ", ".join(f"mesh.{axis}={size}" for axis, size in sizes.items())
    free = [axis for axis, size in sizes.items() if size == -1]
    if len(free) > 1:
        raise ConfigError(f"config {described}: only one mesh axis may be -1, got {free}")
    fixed = math.prod(size for size in sizes.values() if size != -1)
    if free:
        if num_devices % fixed:
            raise ConfigError(f"config {described}: the fixed axes ({fixed} devices) do not "
                              f"divide the {num_devices} devices")
        sizes[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise ConfigError(f"config {described}: the mesh has {fixed} devices but there are "
                          f"{num_devices}; make the product equal {num_devices} or set one "
                          "axis to -1")
    data, fsdp, tensor = (sizes[axis] for axis in MESH_AXES)
    return data, fsdp, tensor


def num_slices(mesh_config: ml_collections.ConfigDict) -> int:
    """`mesh.num_slices` (1 where a config has no such key)."""
    count = mesh_config.get("num_slices", 1)
    if not isinstance(count, int) or count < 1:
        raise ConfigError(f"config mesh.num_slices={count!r} must be a positive integer")
    return count


def dcn_shape(mesh_config: ml_collections.ConfigDict) -> tuple[int, int, int]:
    """How many slices each mesh axis spans: (mesh.dcn_data, mesh.dcn_fsdp, 1), their product
    `mesh.num_slices`; dcn_data=-1 (the default) is the slices dcn_fsdp leaves. Tensor
    parallelism never crosses slices."""
    slices = num_slices(mesh_config)
    sizes = {"data": mesh_config.get("dcn_data", -1), "fsdp": mesh_config.get("dcn_fsdp", 1)}
    for axis, size in sizes.items():
        if not isinstance(size, int) or size == 0 or size < -1 or (axis != "data" and size < 1):
            allowed = "a positive integer or -1" if axis == "data" else "a positive integer"
            raise ConfigError(f"config mesh.dcn_{axis}={size!r} must be {allowed}")
    if sizes["data"] == -1:
        if slices % sizes["fsdp"]:
            raise ConfigError(f"config mesh.dcn_fsdp={sizes['fsdp']} does not divide "
                              f"mesh.num_slices={slices}")
        sizes["data"] = slices // sizes["fsdp"]
    if sizes["data"] * sizes["fsdp"] != slices:
        raise ConfigError(f"config mesh.dcn_data={sizes['data']} x mesh.dcn_fsdp={sizes['fsdp']} "
                          f"must equal mesh.num_slices={slices} (the slices each axis spans)")
    return sizes["data"], sizes["fsdp"], 1


def slice_shape(mesh_config: ml_collections.ConfigDict, num_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tensor) inside one slice: the whole axes divided by `dcn_shape`."""
    whole, dcn = mesh_shape(mesh_config, num_devices), dcn_shape(mesh_config)
    for axis, size, slices in zip(MESH_AXES, whole, dcn):
        if size % slices:
            raise ConfigError(f"config mesh.{axis}={size} (over all slices) is not divisible by "
                              f"mesh.dcn_{axis}={slices}, the slices it spans")
    data, fsdp, tensor = (size // slices for size, slices in zip(whole, dcn))
    return data, fsdp, tensor


def device_slices(devices: list[jax.Device], count: int) -> list[list[jax.Device]]:
    """`devices` grouped by slice, in slice order: by `slice_index` for TPU devices (of a
    multi-slice job or topology), else `count` consecutive groups (CPU devices standing for
    slices, which name no slice or, across processes, all slice 0; in a multi-process CPU run,
    one process per group when the counts agree)."""
    if devices[0].platform == "tpu" and getattr(devices[0], "slice_index", None) is not None:
        groups: dict[int, list[jax.Device]] = {}
        for device in devices:
            groups.setdefault(device.slice_index, []).append(device)
        slices = [groups[index] for index in sorted(groups)]
        if len(slices) != count:
            raise ConfigError(f"config mesh.num_slices={count} but the devices are in "
                              f"{len(slices)} slice(s); set mesh.num_slices={len(slices)}")
        return slices
    if len(devices) % count:
        raise ConfigError(f"config mesh.num_slices={count} does not divide the {len(devices)} "
                          "devices")
    per_slice = len(devices) // count
    return [devices[start:start + per_slice] for start in range(0, len(devices), per_slice)]


def make_mesh(mesh_config: ml_collections.ConfigDict,
              devices: list[jax.Device] | None = None) -> jax.sharding.Mesh:
    """The ("data", "fsdp", "tensor") mesh over `devices` (default: all devices of all hosts),
    over several slices if `mesh.num_slices` > 1 (module docstring)."""
    devices = jax.devices() if devices is None else list(devices)
    shape = mesh_shape(mesh_config, len(devices))
    axis_types = (jax.sharding.AxisType.Auto,) * 3
    slices = device_slices(devices, num_slices(mesh_config))
    if len(slices) == 1:
        # jax.make_mesh orders devices along the physical topology (TPU ICI rings).
        return jax.make_mesh(shape, MESH_AXES, axis_types=axis_types, devices=devices)
    inner, dcn = slice_shape(mesh_config, len(devices)), dcn_shape(mesh_config)
    # mesh_utils.create_hybrid_device_mesh's layout, with our grouping of devices into slices.
    blocks = np.empty(dcn, dtype=object)
    for index, slice_devices in enumerate(slices):
        blocks[np.unravel_index(index, dcn)] = mesh_utils.create_device_mesh(inner, slice_devices)
    return jax.sharding.Mesh(np.block(blocks.tolist()), MESH_AXES, axis_types=axis_types)


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Leading (batch) dimension split over ("data", "fsdp"); other dimensions replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def microbatch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """[num_microbatches, microbatch, ...]: every microbatch split over ("data", "fsdp"), so
    each scan iteration works on 1/num_microbatches of every device's rows."""
    return NamedSharding(mesh, PartitionSpec(None, BATCH_AXES))


def replica_microbatch_spec() -> PartitionSpec:
    """`microbatch_sharding` inside one data replica (see `replica_activation_sharding`)."""
    return PartitionSpec(None, REPLICA_BATCH_AXES)


@contextlib.contextmanager
def activation_sharding(mesh: jax.sharding.Mesh) -> Iterator[None]:
    """While a step is traced in this context, the model's activation constraints
    (`nn.with_logical_constraint`) bind to `mesh` through LOGICAL_RULES; outside, they are no-ops.

    An abstract mesh, because `jax.set_mesh` may not be entered inside `jax.jit`.
    """
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(LOGICAL_RULES):
        yield


# Inside one data replica (train/step.py runs the gradient per replica, "data" a manual axis):
# the replica's rows are split over fsdp alone, and no constraint may name the manual axis.
REPLICA_AXIS = "data"
REPLICA_BATCH_AXES = tuple(axis for axis in BATCH_AXES if axis != REPLICA_AXIS)
REPLICA_RULES = tuple((name, REPLICA_BATCH_AXES if axes == BATCH_AXES else axes)
                      for name, axes in LOGICAL_RULES)


@contextlib.contextmanager
def replica_activation_sharding() -> Iterator[None]:
    """`activation_sharding` inside a function that `jax.shard_map` runs once per data replica
    (the abstract mesh is shard_map's, with "data" manual): the batch is split over fsdp."""
    with nn.logical_axis_rules(REPLICA_RULES):
        yield


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    """A full copy on every device (scalars, RNG keys, metrics)."""
    return NamedSharding(mesh, PartitionSpec())


def to_global_batch(host_batch: dict[str, np.ndarray],
                    batch_sharding: jax.sharding.Sharding) -> dict[str, jax.Array]:
    """Host batches of all hosts -> global arrays [global_batch, ...] laid out by
    `batch_sharding`; the hosts' rows are concatenated in process order."""
    return {name: jax.make_array_from_process_local_data(batch_sharding, value)
            for name, value in host_batch.items()}


def is_boxed(value: Any) -> bool:
    """True for a leaf that carries partitioning metadata (`nn.LogicallyPartitioned`)."""
    return isinstance(value, nn.Partitioned)


def _unbox(value: Any) -> Any:
    return value.value if is_boxed(value) else value


def unbox(tree: Any) -> Any:
    """The plain arrays of a boxed tree (without the sharding constraint `nn.unbox` may add)."""
    return jax.tree.map(_unbox, tree, is_leaf=is_boxed)


def logical_axes(leaf: Any) -> tuple[str | None, ...] | None:
    """The logical axis names of a boxed leaf; None for a plain leaf (replicated)."""
    if isinstance(leaf, nn.LogicallyPartitioned):
        return tuple(leaf.names)
    return None


def partition_spec(leaf: Any, mesh: jax.sharding.Mesh,
                   rules: tuple[tuple[str, Any], ...] = LOGICAL_RULES) -> PartitionSpec:
    """The mesh PartitionSpec of one (boxed or plain) leaf; see the module doc for the fallback."""
    if not is_boxed(leaf):
        return PartitionSpec()
    if isinstance(leaf, nn.LogicallyPartitioned):
        spec = nn.logical_to_mesh_axes(leaf.names, rules)
        assert spec is not None  # None only for no names
    else:  # nn.Partitioned: the names are mesh axes already.
        spec = PartitionSpec(*leaf.names)
    dims = []
    for size, axes in zip(np.shape(leaf.value), spec):
        shards = 1 if axes is None else math.prod(
            mesh.shape[axis] for axis in ((axes,) if isinstance(axes, str) else axes))
        dims.append(axes if size % shards == 0 else None)
    return PartitionSpec(*dims)


def param_shardings(boxed_tree: Any, mesh: jax.sharding.Mesh,
                    rules: tuple[tuple[str, Any], ...] = LOGICAL_RULES) -> Any:
    """A tree of NamedSharding shaped like `unbox(boxed_tree)`.

    `boxed_tree` is typically `jax.eval_shape(model.init, ...)` (or a train state built from it):
    boxed leaves are sharded by their logical names, plain leaves (step counters) replicated.
    """
    return jax.tree.map(lambda leaf: NamedSharding(mesh, partition_spec(leaf, mesh, rules)),
                        boxed_tree, is_leaf=is_boxed)


def init_sharded(init_fn: Callable[..., Any], mesh: jax.sharding.Mesh, *args: Any,
                 rules: tuple[tuple[str, Any], ...] = LOGICAL_RULES,
                 shardings: Any = None) -> Any:
    """Runs `init_fn(*args)` (which returns a boxed tree) so every array is born sharded.

    The shardings (unless given: `param_shardings` of the same tree) come from
    `jax.eval_shape(init_fn, *args)`, and the init is one jit with those `out_shardings`: no
    device ever holds a full unsharded copy. Returns the unboxed tree. The values equal an
    unsharded init (the threefry PRNG is partitionable).
    """
    if shardings is None:
        shardings = param_shardings(jax.eval_shape(init_fn, *args), mesh, rules)
    return jax.jit(lambda *inputs: unbox(init_fn(*inputs)), out_shardings=shardings)(*args)


def format_bytes(count: int) -> str:
    """`count` bytes for a person: 512 B, 3.2 MiB, 12.9 GiB."""
    value, unit = float(count), "B"
    for larger_unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger_unit
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"


def debug_table(boxed_tree: Any, mesh: jax.sharding.Mesh,
                rules: tuple[tuple[str, Any], ...] = LOGICAL_RULES) -> str:
    """One line per parameter: path, shape, logical axes, partition spec, bytes per device;
    then a total line (parameter count, bytes per device, bytes over all devices)."""
    rows = [("parameter", "shape", "logical axes", "partition spec", "per device")]
    total_count = total_bytes = device_bytes = 0
    leaves = jax.tree_util.tree_flatten_with_path(boxed_tree, is_leaf=is_boxed)[0]
    for path, leaf in leaves:
        value = _unbox(leaf)
        spec = partition_spec(leaf, mesh, rules)
        shard_shape = NamedSharding(mesh, spec).shard_shape(tuple(value.shape))
        itemsize = np.dtype(value.dtype).itemsize
        shard_bytes = math.prod(shard_shape) * itemsize
        total_count += math.prod(value.shape)
        total_bytes += math.prod(value.shape) * itemsize
        device_bytes += shard_bytes
        name = tree_names.path_name(path)
        axes = logical_axes(leaf)
        rows.append((name, str(tuple(value.shape)), "-" if axes is None else str(axes),
                     str(tuple(spec)), format_bytes(shard_bytes)))
    rows.append((f"total: {total_count:,} parameters", "", "",
                 f"mesh {dict(mesh.shape)}",
                 f"{format_bytes(device_bytes)} (of {format_bytes(total_bytes)})"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)
