"""The bytes a compiled step moves between slices, read from its optimized HLO.

A TPU program compiled for several slices hands every transfer between slices to the Megascale
runtime: a `send` with `_xla_host_transfer_handler_name="xla_megascale_runtime"` whose
`_xla_megascale_transfer_type` names the collective (ALL_REDUCE, ALL_GATHER, ...); the part of
a collective inside a slice stays an ordinary collective over that slice's devices (measured,
libtpu 0.0.42.1, 2 x v5e:2x2: the gradient all-reduce becomes one such send per gradient
buffer, padded to the [8, 128] tiles). Each send's data is counted, once per run.

Elsewhere (CPU devices standing for slices), every collective of the program (all-reduce, all-gather, reduce-scatter, all-to-all,
collective-permute, and their async `-start` forms) names the devices it joins: replica groups
(`{{0,1},{2,3}}`, the iota form `[4,2]<=[8]`, or the mesh form `mesh['axis_0'=2,'axis_1'=4],
device_ids=([4,2]T(1,0)) {'axis_0'}`) or source-target pairs. Their numbers are partition ids:
the position of a device in the mesh's flattened device array, which the jit of a mesh-sharded
step uses as its device assignment. A collective crosses slices when one of its groups holds
devices of more than one slice. Its bytes per device are its operands' bytes (what each device
puts in: for the gradient all-reduce, the gradient shard it holds), times the times it runs per
step: a while loop (e.g. the scan over layers) runs its `known_trip_count`, or, where the
optimized HLO names none (the TPU compiler's), the N of its condition `counter < N`, XLA's
canonical loop from 0.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

import numpy as np

# Bytes per element of HLO element types (sub-byte types rounded up per element).
_ELEMENT_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4,
                  "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8,
                  "c64": 8, "c128": 16}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*?)\)(?:, |$)")
_ARRAY = re.compile(r"\b([a-z]\w*)\[([\d,]*)\]")
_CALLED = re.compile(r"\b(calls|to_apply|body|condition)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CONDITION = re.compile(r"\bcondition=%?([\w.\-]+)")
_CONSTANT = re.compile(r"^\s*%?([\w.\-]+) = s32\[\]\S* constant\((\d+)\)")
_LESS_THAN = re.compile(r"ROOT .* compare\(%?[\w.\-]+, %?([\w.\-]+)\), direction=LT")
_LIST_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\(([^)]*\)?)\))? "
                          r"\{([^}]*)\}")
_MEGASCALE_TYPE = re.compile(r'_xla_megascale_transfer_type="(\w+)"')
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective of a compiled program: its kind, the bytes each device puts in per step,
    and whether a group of it spans slices."""

    kind: str  # "all-reduce", "all-gather", ...
    bytes_per_device: int
    crosses_slices: bool


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape ("f32[16,32]{1,0}", or a tuple of them)."""
    shape = re.sub(r"/\*.*?\*/", "", shape)  # /*index=5*/ marks in long tuples
    return sum(_ELEMENT_BYTES.get(dtype, 0) * math.prod(int(d) for d in dims.split(",") if d)
               for dtype, dims in _ARRAY.findall(shape))


def _iota(dims: str, transpose: str | None) -> np.ndarray:
    shape = [int(d) for d in dims.split(",")]
    ids = np.arange(math.prod(shape)).reshape(shape)
    return ids.transpose([int(p) for p in transpose.split(",")]) if transpose else ids


def device_groups(attributes: str, num_partitions: int) -> list[list[int]]:
    """The partition-id groups of a collective from its attribute text (module docstring); one
    group of every partition when it names none (`replica_groups={}`)."""
    pairs = _PAIRS.search(attributes)
    if pairs:
        return [[int(x) for x in pair.split(",")] for pair in re.findall(r"\{(\d+,\d+)\}",
                                                                          pairs.group(1))]
    mesh = _MESH_GROUPS.search(attributes)
    if mesh:
        axes = re.findall(r"'([^']+)'=(\d+)", mesh.group(1))
        sizes = [int(size) for _, size in axes]
        ids_text = mesh.group(2)
        if not ids_text:
            ids = np.arange(math.prod(sizes))
        elif ids_text.startswith("["):
            iota = re.match(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", ids_text)
            assert iota is not None, ids_text  # XLA's iota form: [dims]T(perm)
            ids = _iota(iota.group(1), iota.group(2))
        else:
            ids = np.array([int(x) for x in re.findall(r"\d+", ids_text)])
        ids = ids.reshape(sizes)
        names = [name for name, _ in axes]
        grouped = [names.index(name) for name in re.findall(r"'([^']+)'", mesh.group(3))]
        others = [axis for axis in range(len(names)) if axis not in grouped]
        group_size = math.prod(sizes[axis] for axis in grouped)
        return ids.transpose(others + grouped).reshape(-1, group_size).tolist()
    iota = _IOTA_GROUPS.search(attributes)
    if iota:
        groups, size = (int(d) for d in iota.group(1).split(","))
        return _iota(iota.group(2), iota.group(3)).reshape(groups, size).tolist()
    listed = _LIST_GROUPS.search(attributes)
    if listed and listed.group(1):
        return [[int(x) for x in group.split(",") if x]
                for group in re.findall(r"\{([\d,]*)\}", listed.group(1))]
    return [list(range(num_partitions))]


def collectives(hlo_text: str, partition_slices: Sequence[int]) -> list[Collective]:
    """Every collective of the optimized HLO module `hlo_text` (`compiled.as_text()`), with
    its bytes per device per step; `partition_slices[p]` is the slice of partition p."""
    computations: dict[str, list[tuple[str, str, str, str]]] = {}
    order: list[str] = []
    entry, current = None, None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and not line.startswith(" "):
            current = header.group(1)
            computations[current], order = [], order + [current]
            if line.startswith("ENTRY"):
                entry = current
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            computations[current].append((instruction[1], instruction[2], instruction[3], line))
    shapes = {name: shape for body in computations.values() for name, shape, _, _ in body}

    def trip_count(while_line: str) -> int:
        known = _TRIP_COUNT.search(while_line)
        if known:
            return int(known.group(1))
        condition = _CONDITION.search(while_line)
        lines = [line for *_, line in computations.get(condition.group(1), [])] if condition else []
        constants = {match[1]: match[2] for match in map(_CONSTANT.match, lines) if match}
        less = next((match.group(1) for match in map(_LESS_THAN.search, lines) if match), None)
        return int(constants.get(less, 1))  # unknown: once, a lower bound

    # Times each computation runs per step: callers come after their callees in HLO text.
    runs = dict.fromkeys(order, 0)
    runs[entry if entry is not None else order[-1]] = 1
    for name in reversed(order):
        for _, _, opcode, line in computations[name]:
            called = _CALLED.findall(line)
            branches = _BRANCHES.search(line)
            if branches:
                called += [("branch", c.strip().lstrip("%")) for c in branches.group(1).split(",")]
            for role, callee in called:
                # A loop body runs its trip count; a conditional's branches are each counted
                # once (an upper bound).
                times = trip_count(line) if role == "body" and opcode == "while" else 1
                if callee in runs:
                    runs[callee] += runs[name] * times
    found = []
    for name in order:
        for _, _, opcode, line in computations[name]:
            kind = opcode.removesuffix("-start")
            megascale = _MEGASCALE_TYPE.search(line) if opcode == "send" else None
            if (kind not in COLLECTIVES and megascale is None) or runs[name] == 0:
                continue
            instruction = _INSTRUCTION.match(line)
            assert instruction is not None  # kept above because it matched
            operands = re.findall(r"%([\w.\-]+)", instruction.group(4))
            if megascale is not None:  # send(data, token): a transfer between slices
                kind, crosses = megascale.group(1).lower().replace("_", "-"), True
                operands = operands[:1]
            else:
                groups = device_groups(line, len(partition_slices))
                crosses = any(len({partition_slices[p] for p in group}) > 1 for group in groups)
            operand_bytes = sum(shape_bytes(shapes.get(operand, "")) for operand in operands)
            found.append(Collective(kind, operand_bytes * runs[name], crosses))
    return found
