"""Will a run fit? `albert-jax plan`: the real train step compiled ahead of time for a target.

The target is a TPU topology (abstract devices from libtpu, the `[tpu]` extra: no TPU needed)
or N CPU devices standing in for N accelerators of a stated HBM size. Nothing is allocated: the
train state is abstract (shapes and shardings), the batch is `jax.ShapeDtypeStruct`s, and
`jit(...).lower(...).compile()` gives XLA's own plan of the bytes each device holds:

  parameters, optimizer state   the train state's shards on one device (from its shardings)
  peak                          on TPU, the TPU compiler's own total: the "Total bytes" of its
                                memory report (`*memory-usage-report.txt`, asked for with
                                `xla_dump_to`), arguments and temporaries, the number it holds
                                against HBM; on CPU, arguments + outputs - donated (aliased)
                                outputs + `memory_analysis().temp_size_in_bytes`
  temporaries                   activations, gradients, gathered weights, everything the step
                                makes and frees: on TPU the peak less the arguments

Why the report and not `memory_analysis()` on TPU: the compiler decides what fits by the
report's total (a refusal's "HLO temporaries (X)" is that total, and counts the arguments:
measured, xxlarge on v5e:2x2 at 16 sequences a chip, 26.05G = 2.49 GiB of arguments + 23.56 GiB
of temporaries in its buffer assignment), while `memory_analysis()` counts 0.1-0.7 GiB more
temporaries than the buffer assignment holds (base and xxlarge on v5e:2x2), so its sum could
exceed the chip's HBM in a program the compiler accepted. One source for accepted and refused
programs keeps "fits" and the peak consistent.

A TPU compile that does not fit raises RESOURCE_EXHAUSTED and returns no executable; the
memory report XLA dumps on the way still says the total and the largest buffers with their
shapes, so "does not fit" is a result.
The train step is compiled with the attention kernel the run would use there
(model/attention.py: under "auto", splash on a TPU topology, xla on CPU devices).
Then the obvious levers are tried, each from its smallest change up: more fsdp (fewer data
replicas), the fused attention kernel (splash, on TPU, where the plan ran xla: the scores and
probabilities are then never arrays in HBM), rematerialisation, more microbatches; all together
only if none fits alone. The smallest fitting change of every lever is reported, the first in
that order as `fits_with`.

Several slices (`--num_slices`, `mesh.num_slices`): the target is that many copies of the slice
joined over the data-center network (libtpu's `get_topology_desc(num_slices=N)`, or CPU devices
split into N groups), the mesh is the hybrid one of train/sharding.py, and the plan also reads
from the compiled program what crosses slices each step (train/dcn_traffic.py): the bytes per
device, each cross-slice collective, and a warning when anything but an all-reduce (the gradient
reduction, and the step's scalar metrics) crosses, e.g. fsdp's parameter all-gathers when
fsdp spans slices (`mesh.dcn_fsdp` > 1).

FLOPs per step are analytic (train/flops.py via the task): XLA's cost analysis counts the body
of a scan once, not once per layer.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import math
import os
import re
import tempfile
import time
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from albert_jax.errors import ConfigError
from albert_jax.model import attention
from albert_jax.train import dcn_traffic, flops, optim, sharding, validation
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from albert_jax.train.task import Task

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation, per JAX device (a core on v2/v3, a chip from v4 on)."""

    name: str
    hbm_bytes: int  # what the TPU compiler lets one program use
    peak_flops: float  # dense bf16 FLOP/s


# Per JAX device (a TensorCore on v2/v3, a chip from v4 on: v4 and v5p run as one "megacore"
# device). HBM: what the TPU compiler leaves to a program, the "available HBM (X G)" of its
# refusals (libtpu 0.0.42.1, one refused compile per generation; G = GiB): a little under the
# device's HBM (v3: 16 GiB a core, v4: 32 GiB, v5e: 16 GiB, v5p: 96 GiB, v6e: 32 GiB), so a
# plan's "fits" and its peak agree. FLOP/s, from the Cloud TPU system-architecture pages:
# cloud.google.com/tpu/docs/v3 (123 bf16 TFLOP/s per chip of two TensorCores), /v4 (275 per
# chip), /v5e (197), /v5p (459), /v6e (918); v2: 45 per chip of two TensorCores.
CHIPS = {
    "v2": Chip("v2", int(7.48 * GIB), 22.5e12),
    "v3": Chip("v3", int(15.48 * GIB), 61.5e12),
    "v4": Chip("v4", int(30.75 * GIB), 275e12),
    "v5e": Chip("v5e", int(15.75 * GIB), 197e12),
    "v5p": Chip("v5p", int(95.74 * GIB), 459e12),
    "v6e": Chip("v6e", int(31.25 * GIB), 918e12),
}
# The first word of a topology name ("v5e:16x16") -> chip; v5litepod / v6e names as gcloud's.
_CHIP_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6": "v6e", "v6lite": "v6e"}
# Generations whose two TensorCores per chip JAX drives as one device.
_MEGACORE = ("v4", "v5p")


@dataclasses.dataclass(frozen=True)
class Target:
    """What a plan compiles for: devices (abstract TPU or CPU), their HBM and peak FLOP/s."""

    name: str  # "v5e:16x16" or "8 CPU devices"
    devices: tuple[Any, ...]
    hbm_bytes: int
    peak_flops: float
    is_tpu: bool  # the TPU compiler refuses what does not fit; on CPU we compare
    num_slices: int = 1  # slices joined over the data-center network


def tpu_target(topology: str, num_slices: int = 1) -> Target:
    """The abstract devices of `num_slices` TPU slices of `topology` (e.g. "v5e:16x16",
    "v4:4x4x4"), from libtpu."""
    chip_name = topology.split(":", 1)[0].lower()
    chip_name = _CHIP_ALIASES.get(chip_name, chip_name)
    if chip_name not in CHIPS or ":" not in topology:
        raise ConfigError(f"--topology={topology!r} is not <chip>:<shape> for a chip in "
                          f"{sorted(CHIPS)}, e.g. v5e:16x16 or v4:4x4x4")
    _check_num_slices(num_slices)
    if importlib.util.find_spec("libtpu") is None and not os.environ.get("TPU_LIBRARY_PATH"):
        raise ConfigError(f"--topology={topology} needs libtpu to compile for TPU: "
                          "pip install 'albert-jax[tpu]' (or plan on --devices=N CPU devices "
                          "with --hbm_gib)")
    from jax.experimental import topologies  # only with libtpu: it starts the TPU compiler
    options: dict[str, Any] = {"chip_config_name": "megacore"} if chip_name in _MEGACORE else {}
    if num_slices > 1:
        options["num_slices"] = num_slices
    name = f"{chip_name}:{topology.split(':', 1)[1]}"
    try:
        description = topologies.get_topology_desc(platform="tpu", topology_name=name, **options)
    except Exception as error:  # the TPU runtime's own message says what it does not know
        if "lockfile" in str(error):
            # libtpu takes /tmp/libtpu_lockfile for the first process on a machine that loads
            # it; compiling for abstract devices uses no TPU, so a second one may share it.
            raise ConfigError(
                f"--topology={topology}: another process on this machine has libtpu loaded (it "
                "holds /tmp/libtpu_lockfile: a training run, a notebook, another plan). Planning "
                "uses no TPU: rerun with ALLOW_MULTIPLE_LIBTPU_LOAD=1 in the environment, or "
                "when that process has ended") from None
        raise ConfigError(f"--topology={topology}: libtpu does not know it ({error}); use "
                          "<chip>:<shape> as gcloud names TPU slices, e.g. v5e:4x4") from None
    chip = CHIPS[chip_name]
    name = topology if num_slices == 1 else f"{num_slices} x {topology}"
    return Target(name, tuple(description.devices), chip.hbm_bytes, chip.peak_flops,
                  is_tpu=True, num_slices=num_slices)


def _check_num_slices(num_slices: int) -> None:
    if not isinstance(num_slices, int) or num_slices < 1:
        raise ConfigError(f"--num_slices={num_slices} must be a positive integer")


def cpu_target(num_devices: int, hbm_gib: float, peak_tflops: float,
               num_slices: int = 1) -> Target:
    """N CPU devices of this process, each standing for an accelerator of `hbm_gib` GiB; the
    CPU compiler's buffer plan approximates the TPU's. With `num_slices` > 1 they stand for
    that many slices of N / num_slices devices (consecutive devices, sharding.device_slices)."""
    if num_devices < 1:
        raise ConfigError(f"--devices={num_devices} must be a positive integer")
    _check_num_slices(num_slices)
    if num_devices % num_slices:
        raise ConfigError(f"--devices={num_devices} is not divisible by --num_slices="
                          f"{num_slices}: give each slice as many devices")
    if not hbm_gib > 0 or not peak_tflops > 0:
        raise ConfigError(f"--hbm_gib={hbm_gib} and --peak_tflops={peak_tflops} must be positive")
    devices = jax.devices("cpu")
    if len(devices) < num_devices:
        raise ConfigError(f"--devices={num_devices} but this process has {len(devices)} CPU "
                          f"devices; set XLA_FLAGS=--xla_force_host_platform_device_count="
                          f"{num_devices} before JAX starts (`albert-jax plan` does)")
    name = f"{num_devices} CPU devices" + (
        f" as {num_slices} slices of {num_devices // num_slices}" if num_slices > 1 else "")
    return Target(name, tuple(devices[:num_devices]), int(hbm_gib * GIB), peak_tflops * 1e12,
                  is_tpu=False, num_slices=num_slices)


@dataclasses.dataclass
class Measurement:
    """Bytes per device of one compiled (or refused) train step (see the module docstring)."""

    mesh: dict[str, int]
    num_microbatches: int
    remat_policy: str
    attention_impl: str  # the kernel compiled ("auto" resolved for the target)
    param_bytes_per_device: int
    opt_state_bytes_per_device: int
    argument_bytes_per_device: int
    temp_bytes_per_device: int
    peak_bytes_per_device: int
    hbm_bytes_per_device: int
    fits: bool
    largest_buffers: list[dict[str, Any]]
    compile_seconds: float
    # Across slices (nothing on one slice; unknown for a program the compiler refused).
    dcn_bytes_per_step_per_device: int = 0
    # One {kind, bytes} per cross-slice collective.
    dcn_collectives: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    dcn_warning: str = ""  # one line when more than the gradient all-reduce crosses
    dcn_measured: bool = True  # False: the TPU compiler refused the program: no HLO to read


# A TPU out-of-memory compile: "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory
# required for HLO temporaries (49.99G) exceeds available HBM (15.75G)." Despite the words, the
# figure is the memory report's total, arguments included.
_TEMPORARIES = re.compile(r"HLO temporaries \(([\d.]+)([KMGT]?)\)")
_REPORT_TOTAL = re.compile(r"^Total bytes: (\d+)", re.MULTILINE)
_REPORT_ROW = re.compile(r"^\s*[\d.]+\w*\(\s*[\d.]+%\);\s*([\d.]+)(\w*);\s*\d+;\s*\d+;\s*(.+)$",
                         re.MULTILINE)
_UNITS = {"": 1, "B": 1, "K": 1024, "KiB": 1024, "M": 1024**2, "MiB": 1024**2, "G": GIB,
          "GiB": GIB, "T": 1024**4, "TiB": 1024**4}


def _memory_report(dump_dir: str) -> tuple[int | None, list[dict[str, Any]]]:
    """(total bytes, the 8 largest buffers {bytes, shapes}) of the default memory space (HBM)
    in the train step's XLA memory report, the largest module's if there are several."""
    best: tuple[int | None, list[dict[str, Any]]] = (None, [])
    for path in glob.glob(os.path.join(dump_dir, "*memory-usage-report.txt")):
        with open(path) as report:
            # Sections "Memory Space: default (color=0)", "Memory Space: vmem (color=1)", ...
            sections = report.read().split("Memory Space: ")
        default = next((text for text in sections if text.startswith("default")), "")
        total = _REPORT_TOTAL.search(default)
        if total is None or (best[0] is not None and int(total.group(1)) <= best[0]):
            continue
        rows = [{"bytes": int(float(size) * _UNITS.get(unit, 1)), "shapes": shapes.strip()}
                for size, unit, shapes in _REPORT_ROW.findall(default)]
        rows.sort(key=lambda row: -row["bytes"])
        best = (int(total.group(1)), rows[:8])
    return best


def _bytes_per_device(tree: Any) -> int:
    """Bytes of one device's shards of a tree of ShapeDtypeStruct with shardings."""
    return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * np.dtype(leaf.dtype).itemsize
               for leaf in jax.tree.leaves(tree))


BuildTask = Callable[[ml_collections.ConfigDict], tuple[Task, dict[str, jax.ShapeDtypeStruct]]]


def measure(config: ml_collections.ConfigDict, build_task: BuildTask,
            target: Target) -> Measurement:
    """Compiles the train step of `config` for `target`; what each device holds.

    `build_task(config)` gives the task and its train batch as ShapeDtypeStructs of the global
    batch ([batch_size, ...]); the config is validated (mesh, batch split) before compiling.
    """
    if sharding.num_slices(config.mesh) != target.num_slices:
        raise ConfigError(f"config mesh.num_slices={sharding.num_slices(config.mesh)} but the "
                          f"target {target.name} has {target.num_slices} slice(s); make them agree")
    validation.check_run(config, len(target.devices))
    mesh_shape = sharding.mesh_shape(config.mesh, len(target.devices))
    task, batch_spec = build_task(config)
    mesh = sharding.make_mesh(config.mesh, list(target.devices))
    optimizer, learning_rate_fn = optim.make_optimizer(config.optim, config.total_steps)
    abstract_state, state_shardings = state_lib.abstract_train_state(
        task.model, optimizer, mesh, task.init_inputs())
    batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    batch = {name: jax.ShapeDtypeStruct(spec.shape, spec.dtype, sharding=batch_sharding)
             for name, spec in batch_spec.items()}
    rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)  # jax.random.PRNGKey
    train_step = step_lib.jit_train_step(task, optimizer, learning_rate_fn, mesh, state_shardings,
                                         num_microbatches=config.num_microbatches)
    param_bytes = _bytes_per_device(abstract_state.params)
    opt_state_bytes = _bytes_per_device(abstract_state.opt_state)
    argument_bytes = _bytes_per_device((abstract_state, batch, rng))
    started = time.perf_counter()
    refusal = None
    with tempfile.TemporaryDirectory() as dump_dir:
        lowered = train_step.lower(abstract_state, batch, rng)
        try:
            compiled = lowered.compile(compiler_options={"xla_dump_to": dump_dir})
        except jax.errors.JaxRuntimeError as error:
            if "RESOURCE_EXHAUSTED" not in str(error):
                raise
            compiled, refusal = None, str(error)
        report_total, largest = _memory_report(dump_dir)
    seconds = time.perf_counter() - started
    crossing = []
    if compiled is not None and target.num_slices > 1:
        slice_of = {device: index for index, devices in enumerate(
            sharding.device_slices(list(target.devices), target.num_slices)) for device in devices}
        crossing = [collective for collective in dcn_traffic.collectives(
                        compiled.as_text(), [slice_of[device] for device in mesh.devices.flat])
                    if collective.crosses_slices]
    if compiled is None:
        assert refusal is not None  # set with compiled = None
        peak, fits = _refused_peak(refusal, report_total), False
        temp = peak - argument_bytes
    elif target.is_tpu and report_total is not None:
        # The TPU compiler has already compared this total with the HBM it leaves to programs
        # (CHIPS).
        peak, fits = report_total, True
        temp = peak - argument_bytes
    else:
        memory = compiled.memory_analysis()
        argument_bytes, temp = memory.argument_size_in_bytes, memory.temp_size_in_bytes
        peak = (argument_bytes + memory.output_size_in_bytes - memory.alias_size_in_bytes + temp)
        fits = target.is_tpu or peak <= target.hbm_bytes
    return Measurement(mesh=dict(zip(sharding.MESH_AXES, mesh_shape)),
                       num_microbatches=config.num_microbatches,
                       remat_policy=task.model_config.remat_policy,
                       attention_impl=attention.resolve(task.model_config,
                                                        target.devices[0].platform),
                       param_bytes_per_device=param_bytes,
                       opt_state_bytes_per_device=opt_state_bytes,
                       argument_bytes_per_device=argument_bytes, temp_bytes_per_device=temp,
                       peak_bytes_per_device=peak, hbm_bytes_per_device=target.hbm_bytes,
                       fits=fits, largest_buffers=[] if fits else largest,
                       compile_seconds=seconds,
                       dcn_bytes_per_step_per_device=sum(c.bytes_per_device for c in crossing),
                       dcn_collectives=[{"kind": c.kind, "bytes": c.bytes_per_device}
                                        for c in crossing],
                       dcn_warning=_dcn_warning(crossing, config.mesh),
                       dcn_measured=compiled is not None or target.num_slices == 1)


def _dcn_warning(crossing: list[dcn_traffic.Collective],
                 mesh_config: ml_collections.ConfigDict) -> str:
    """One line when collectives other than all-reduces (the gradient reduction, the step's
    scalar metrics) cross slices, with the lever that keeps them inside one; else ""."""
    others = [c for c in crossing if c.kind != "all-reduce"]
    if not others:
        return ""
    kinds = sorted({c.kind for c in others})
    moved = sharding.format_bytes(sum(c.bytes_per_device for c in others))
    slices = sharding.num_slices(mesh_config)
    _, dcn_fsdp, _ = sharding.dcn_shape(mesh_config)
    lever = (f"fsdp spans {dcn_fsdp} slices, so its parameter gathers cross DCN on every layer: "
             f"set mesh.dcn_fsdp=1 (mesh.dcn_data={slices}) and keep fsdp inside a slice"
             if dcn_fsdp > 1 else "keep fsdp inside a slice: mesh.dcn_fsdp=1")
    return (f"WARNING: besides the gradient all-reduce, {len(others)} collective(s) "
            f"({', '.join(kinds)}; {moved} per device per step) cross slices over the "
            f"data-center network; {lever}")


def _refused_peak(refusal: str, report_total: int | None) -> int:
    """The bytes a refused TPU program needs per device: its memory report's total, else the
    figure of XLA's message (the same total, arguments included)."""
    if report_total is not None:
        return report_total
    temporaries = _TEMPORARIES.search(refusal)
    if temporaries is None:
        raise RuntimeError(f"the TPU compiler refused the train step and left no memory report "
                           f"to read the bytes from: {refusal[:2000]}")
    return int(float(temporaries.group(1)) * _UNITS[temporaries.group(2)])


def _with(config: ml_collections.ConfigDict, changes: dict[str, Any]) -> ml_collections.ConfigDict:
    changed = config.copy_and_resolve_references()
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (changed[section] if section else changed)[name] = value
    return changed


def _doublings(start: int, stop: int) -> list[int]:
    """start*2, start*4, ... up to stop (powers of two times start that divide stop)."""
    values, value = [], start * 2
    while value <= stop and stop % value == 0:
        values.append(value)
        value *= 2
    return values


# Remat policies (model/encoder.py), from the most activation memory kept to the least: "dots"
# keeps every matmul output, "dots_no_batch" those without batch dimensions in the dot (the
# projections, not attention's scores and context), "full" nothing.
_REMAT_BY_MEMORY = ("none", "dots", "dots_no_batch", "full")
_ALL_LEVERS = "fsdp+attention_impl+remat+microbatches"


def _lever_ladders(config: ml_collections.ConfigDict, mesh_shape: tuple[int, int, int],
                   measured: Measurement, target: Target, attention_dropout: float
                   ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(lever, its settings from the smallest change to the largest), in the order tried."""
    remat_policy = measured.remat_policy
    data, fsdp, _ = mesh_shape
    batch_devices = data * fsdp
    dcn_data, dcn_fsdp, _ = sharding.dcn_shape(config.mesh)
    # More fsdp inside a slice: the data axis keeps spanning its slices.
    fsdp_ladder = [{"mesh.data": batch_devices // size, "mesh.fsdp": size}
                   for size in _doublings(fsdp, batch_devices)
                   if (batch_devices // size) % dcn_data == 0 and size % dcn_fsdp == 0]
    remat_ladder = [{"model_overrides.remat_policy": policy}
                    for policy in _REMAT_BY_MEMORY[_REMAT_BY_MEMORY.index(remat_policy) + 1:]]
    microbatch_sizes = [m for m in _doublings(config.num_microbatches, config.batch_size)
                        if (config.batch_size // m) % batch_devices == 0]
    microbatch_ladder = [{"num_microbatches": m} for m in microbatch_sizes]
    # Splash only where it runs for real (not a CPU stand-in) and can run this model: the
    # fused kernels have no attention dropout (presets.validate).
    attention_ladder = []
    if (target.is_tpu and measured.attention_impl == "xla"
            and attention_dropout == 0):
        attention_ladder = [{"model_overrides.attention_impl": "splash"}]
    yield "fsdp", fsdp_ladder
    yield "attention_impl", attention_ladder
    yield "remat", remat_ladder
    yield "microbatches", microbatch_ladder
    # All three: the most fsdp and remat, then the fewest microbatches that fit.
    most = {**(fsdp_ladder[-1] if fsdp_ladder else {}),
            **(attention_ladder[-1] if attention_ladder else {}),
            **(remat_ladder[-1] if remat_ladder else {})}
    if most:
        yield _ALL_LEVERS, [dict(most, num_microbatches=m)
                                          for m in [config.num_microbatches, *microbatch_sizes]]


def _smallest_fitting(config: ml_collections.ConfigDict, build_task: BuildTask, target: Target,
                      ladder: list[dict[str, Any]], tried: list[dict[str, Any]]
                      ) -> tuple[dict[str, Any], Measurement] | None:
    """The first setting of `ladder` that fits, by bisection: the largest change first (if even
    it does not fit, the smaller ones are not compiled)."""
    found = None
    low, high = 0, len(ladder) - 1
    while low <= high:
        middle = high if found is None else (low + high) // 2
        changes = ladder[middle]
        measurement = measure(_with(config, changes), build_task, target)
        tried.append({"changes": changes, "fits": measurement.fits,
                      "peak_bytes_per_device": measurement.peak_bytes_per_device})
        if measurement.fits:
            found = (changes, measurement)
            high = middle - 1
        elif found is None:
            return None
        else:
            low = middle + 1
    return found


def overrides(changes: dict[str, Any]) -> str:
    """The command-line flags of a config change, e.g. --config.mesh.fsdp=16."""
    return " ".join(f"--config.{key}={value}" for key, value in changes.items())


def plan(config: ml_collections.ConfigDict, build_task: BuildTask, target: Target, *,
         mfu: float, try_levers: bool = True) -> dict[str, Any]:
    """The plan of `config` on `target` as one JSON-able dict (see `format_plan`): the bytes per
    device, whether it fits, FLOPs per step and the implied step time at `mfu`; if it does not
    fit, the levers tried, the smallest change that fits (`fits_with`, or None) and the smallest
    change of each other lever that fits alone (`also_fits_with`)."""
    if not 0 < mfu <= 1:
        raise ConfigError(f"--mfu={mfu} must be in (0, 1]")
    measurement = measure(config, build_task, target)
    task, _ = build_task(config)
    flops_per_step = (flops.TRAIN_FLOPS_PER_FORWARD * config.batch_size
                      * task.flops_per_example(config.seq_len))
    result = {
        "topology": target.name,
        "num_slices": target.num_slices,
        "devices": len(target.devices),
        "device_kind": target.devices[0].device_kind,
        "model": task.model_config.to_dict(),
        "batch_size": config.batch_size,
        "seq_len": config.seq_len,
        "compute_dtype": task.model_config.dtype,
        **dataclasses.asdict(measurement),
        "flops_per_step": flops_per_step,
        "peak_flops_per_device": target.peak_flops,
        "mfu": mfu,
        "step_seconds": flops_per_step / (mfu * target.peak_flops * len(target.devices)),
        "levers_tried": [],
        "fits_with": None,
        "also_fits_with": [],
    }
    if measurement.fits or not try_levers:
        return result
    data, fsdp, tensor = (measurement.mesh[axis] for axis in sharding.MESH_AXES)
    mesh_shape = (data, fsdp, tensor)
    options: list[dict[str, Any]] = []
    for lever, ladder in _lever_ladders(config, mesh_shape, measurement, target,
                                        task.model_config.attention_probs_dropout_prob):
        if lever == _ALL_LEVERS and options:
            break  # one lever alone is enough
        found = _smallest_fitting(config, build_task, target, ladder, result["levers_tried"])
        if found is not None:
            changes, fitting = found
            options.append({"lever": lever, "overrides": overrides(changes),
                            **dataclasses.asdict(fitting)})
    # Each lever has its price (fsdp: more communication; remat: recomputation; microbatches:
    # smaller matmuls): `fits_with` is the first in the order tried, the others are to weigh.
    result["fits_with"] = options[0] if options else None
    result["also_fits_with"] = options[1:]
    return result


def num_hosts(target: Target) -> int:
    """The hosts (processes) of `target`: a TPU slice's, or 1 for CPU devices."""
    return len({getattr(device, "process_index", 0) for device in target.devices})


def _size(count: int | None) -> str:
    return "-" if count is None else sharding.format_bytes(count)


def _shorten(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _dcn_line(result: dict[str, Any]) -> str:
    """What crosses slices per step, by kind of collective."""
    if not result["dcn_measured"]:
        return ("across slices: unknown (the compiler refused the program, so there is no "
                "program to read)")
    by_kind: dict[str, list[int]] = {}
    for collective in result["dcn_collectives"]:
        by_kind.setdefault(collective["kind"], []).append(collective["bytes"])
    kinds = "; ".join(f"{kind} x{len(sizes)} {_size(sum(sizes))}"
                      for kind, sizes in sorted(by_kind.items()))
    # The gradient all-reduce moves about the parameters' bytes (f32); more means the same
    # gradient crosses in pieces (ALBERT's shared layers: each use's contribution apart).
    ratio = result["dcn_bytes_per_step_per_device"] / max(1, result["param_bytes_per_device"])
    return (f"across slices (DCN) per device per step: "
            f"{_size(result['dcn_bytes_per_step_per_device'])}" + (f" ({kinds})" if kinds else "")
            + f", {ratio:.2g}x the parameter bytes per device")


def format_plan(result: dict[str, Any]) -> str:
    """The plan as a few lines for a person."""
    mesh = " ".join(f"{axis}={size}" for axis, size in result["mesh"].items())
    model = result["model"]
    lines = [
        f"target: {result['topology']} ({result['devices']} x {result['device_kind']}, "
        f"{_size(result['hbm_bytes_per_device'])} HBM each)",
        f"run: H={model['hidden_size']} L={model['num_hidden_layers']} "
        f"V={model['vocab_size']}, batch {result['batch_size']} x {result['seq_len']}, "
        f"{result['num_microbatches']} microbatch(es), remat {result['remat_policy']}, "
        f"attention {result['attention_impl']}, {result['compute_dtype']}; mesh {mesh}",
        f"per device: parameters {_size(result['param_bytes_per_device'])}, optimizer state "
        f"{_size(result['opt_state_bytes_per_device'])}, temporaries "
        f"{_size(result['temp_bytes_per_device'])}, peak {_size(result['peak_bytes_per_device'])}"
        f" of {_size(result['hbm_bytes_per_device'])}: "
        + ("fits" if result["fits"] else "DOES NOT FIT"),
        f"FLOPs per step {result['flops_per_step']:.3g}: {result['step_seconds']:.3g} s per step "
        f"at {result['mfu']:.0%} MFU of {result['peak_flops_per_device'] / 1e12:.4g} TFLOP/s "
        f"per device",
    ]
    if result["num_slices"] > 1:
        lines.append(_dcn_line(result))
        if result["dcn_warning"]:
            lines.append(result["dcn_warning"])
    if result["largest_buffers"]:
        lines.append("largest buffers: " + "; ".join(
            f"{_size(row['bytes'])} {_shorten(row['shapes'])}"
            for row in result["largest_buffers"][:5]))
    for tried in result["levers_tried"]:
        lines.append(f"  tried {overrides(tried['changes'])}: peak "
                     f"{_size(tried['peak_bytes_per_device'])}, "
                     + ("fits" if tried["fits"] else "does not fit"))
    fits_with = result["fits_with"]
    for option in ([fits_with] if fits_with else []) + result["also_fits_with"]:
        lines.append(f"{'fits with' if option is fits_with else 'or with'} ({option['lever']}): "
                     f"{option['overrides']} (peak {_size(option['peak_bytes_per_device'])})")
    if fits_with is None and result["levers_tried"]:
        lines.append("no lever tried fits: a larger slice, tensor parallelism or a smaller "
                     "batch per device is needed")
    if "data_local_bytes_per_host" in result:  # pretraining; albert_jax/data/input/shard_copy.py
        local = result["data_local_bytes_per_host"]
        lines.append(f"with data.dir=gs://..., each of {result['hosts']} host(s) copies "
                     + ("an unknown amount (no built dataset)" if local is None
                        else f"up to {_size(local)}")
                     + " to data.local_dir: its train shards and the eval split")
    return "\n".join(lines)
