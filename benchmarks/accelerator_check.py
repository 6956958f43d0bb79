"""The accelerator check: everything a GPU can tell about this package, in one run of 8 minutes.

  python benchmarks/accelerator_check.py --output=accelerator_check.json [--smoke]
      [--budget_s=450] [--parts=equality,loss,pretraining,torch,finetune,predict,plan]

The first thing done on a GPU machine (docs/performance.md); benchmarks/RESULTS.md
"Accelerator check" has the recipe that brings the missing packages to a machine that reaches
no registry. The JSON at --output is rewritten as each part finishes, so a run killed at its
time limit still returns what it measured; a short table is printed at the end. Each part has
its own time budget (and the run one, --budget_s): a part with too little time left is skipped
with a note, one whose budget runs out stops between rows and says so (skipped if it had
measured no row yet, partial otherwise).

Parts (albert-base and albert-large at batch x 512, the batch filling about 40% of the GPU):
  equality     AlbertModel's outputs and parameter gradients, attention `xla` against `cudnn`
               at seq 512 (albert-base, batch 8, padded rows, one all padding), with the
               tolerances tests/test_attention.py holds splash to (float32 2e-5, bfloat16 2e-2,
               relative, and absolute that share of the leaf's largest magnitude, >= 2e-3).
               cuDNN's fused attention takes bfloat16 only (presets.validate), so float32 is a
               note. Without a GPU, splash (Pallas interpret mode) stands in for cudnn.
  loss         the pretraining loss of one batch (float32, albert-base, deterministic) on the
               accelerator against jax.devices("cpu"): at "highest" matmul precision within
               1e-4 relative; at the default precision (TF32 on A100/H100) as a reading.
  pretraining  the project's step (train/step.py jit_train_step, the reference LAMB, the
               pretraining task) per preset: bfloat16 cudnn, bfloat16 xla, float32 (TF32
               matmuls) xla, in that order; compile seconds apart, step seconds (median), tokens/s, MFU
               against the device kind's data-sheet peak (PEAK_TFLOPS: bf16 for bfloat16 rows,
               TF32 for float32 rows; "unknown" kind: no MFU). The batch: the planner
               (train/plan.py measure) compiles the step at a probe batch for this device, and
               the batch is the largest multiple of 8 whose linearly scaled peak fills
               FILL_FRACTION of JAX's memory (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.5 here: torch
               has the other half). Measured peak: memory_stats() peak_bytes_in_use after the
               row (a process high-water mark: a row lower than an earlier one reads masked).
  torch        HuggingFace PyTorch AlbertForPreTraining at our batch, bf16 autocast, AdamW
               (the peer tables' step: bench_table.hf_torch_train), eager and torch.compile;
               tokens/s and ours / HF per preset (HF computes the MLM head at every position).
  finetune     our fine-tuning step (bench_table.ours_finetune: configs/glue.py MRPC, AdamW)
               on GLUE-shaped batches of pairs at each length bucket of configs/glue.py and at
               seq_len 512; examples/s, MFU, and the speed-up of each bucket over 512
               (--smoke: the first bucket and seq_len only).
  predict      `albert-jax predict` rows/s on 20,000 rows against HuggingFace's
               text-classification pipeline on the same GPU (bench_predict.compare_rounds on
               its demo classification run).
  plan         the planner's peak per device for each pretraining row (compiled for this
               device: arguments + outputs - donated + temporaries, train/plan.py's CPU/GPU
               formula) against the measured peak; and `albert-jax plan --devices=1`'s
               prediction, compiled for the CPU, for the first row.

--smoke: tiny shapes and budgets, the same code, on any machine (tests/test_accelerator_check.py
runs it on the CPU, so the check cannot rot between GPU days). torch.compile runs its "eager"
backend there (inductor's C++ build alone takes a minute on 2 cores).
"""
from __future__ import annotations

import os

# Before JAX starts: grow JAX's memory as needed, up to half the GPU (torch takes the other).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any, Callable  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from albert_jax import config as config_lib  # noqa: E402
from albert_jax import files, pretraining  # noqa: E402
from albert_jax.model import AlbertModel, attention, get_config  # noqa: E402
from albert_jax.train import flops, optim, plan, sharding  # noqa: E402
from albert_jax.train import state as state_lib  # noqa: E402
from albert_jax.train import step as step_lib  # noqa: E402
from benchmarks import bench_predict, bench_table  # noqa: E402
from configs import glue as glue_config  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402

PARTS = ("equality", "loss", "pretraining", "torch", "finetune", "predict", "plan")
# Dense tensor-core peaks per GPU from NVIDIA's data sheets, TFLOP/s: (bf16, TF32).
PEAK_TFLOPS = {
    "NVIDIA H100 80GB HBM3": (989.4, 494.7),  # SXM
    "NVIDIA H100 PCIe": (756.0, 378.0),
    "NVIDIA H100 NVL": (835.0, 417.5),
    "NVIDIA H200": (989.4, 494.7),
    "NVIDIA A100-SXM4-40GB": (312.0, 156.0),
    "NVIDIA A100-SXM4-80GB": (312.0, 156.0),
    "NVIDIA A100-PCIE-40GB": (312.0, 156.0),
    "NVIDIA A100 80GB PCIe": (312.0, 156.0),
}
# tests/test_attention.py's splash tolerances (relative; absolute: that share of the leaf's
# largest magnitude, at least ABSOLUTE_FLOOR).
ATTENTION_RTOL = {"float32": 2e-5, "bfloat16": 2e-2}
ABSOLUTE_FLOOR = 2e-3
LOSS_RTOL = 1e-4
FILL_FRACTION = 0.8  # of JAX's memory (half the GPU): the batch fills about 40% of the GPU
PRETRAIN_VARIANTS = (("bfloat16", "cudnn"), ("bfloat16", "xla"), ("float32", "xla"))


@dataclasses.dataclass(frozen=True)
class Settings:
    """Shapes, step counts and seconds of a full run (GPU) or of --smoke (any CPU)."""

    presets: tuple[str, ...] = ("albert-base-v2", "albert-large-v2")
    seq_len: int = 512
    equality_preset: str = "albert-base-v2"
    equality_batch: int = 8
    equality_dtypes: tuple[str, ...] = ("float32", "bfloat16")
    probe_batch: int = 8
    max_batch: int = 256
    fallback_batch: int = 32  # no memory statistics (a CPU): this batch
    steps: int = 8
    torch_steps: int = 5
    finetune_batch: int = 32
    finetune_dtypes: tuple[str, ...] = ("bfloat16", "float32")
    # Every length bucket timed; else the first and seq_len only (the same code, two compiles).
    finetune_every_bucket: bool = True
    predict_rows: int = 20_000
    predict_probe_rows: int = 1000
    predict_train_steps: int = 20
    hf_batch_sizes: tuple[int, ...] = (64, 256)
    torch_compile_backend: str = "inductor"
    budgets: tuple[tuple[str, float], ...] = (
        ("equality", 40), ("loss", 30), ("pretraining", 160), ("torch", 80), ("finetune", 45),
        ("predict", 75), ("plan", 20))


SMOKE = Settings(
    presets=("tiny",), seq_len=128, equality_preset="tiny", equality_batch=4,
    equality_dtypes=("bfloat16",), probe_batch=2,
    max_batch=4, fallback_batch=4, steps=2, torch_steps=1, finetune_batch=4,
    finetune_dtypes=("float32",), finetune_every_bucket=False, predict_rows=64,
    predict_probe_rows=16, predict_train_steps=1, hf_batch_sizes=(16,),
    torch_compile_backend="eager",
    budgets=(("equality", 40), ("loss", 30), ("pretraining", 40), ("torch", 30),
             ("finetune", 30), ("predict", 80), ("plan", 20)))


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def tiny_overrides(preset: str, seq_len: int) -> dict[str, Any]:
    """The tiny preset is 64 positions long: stretched to the smoke's sequence."""
    return {"max_position_embeddings": seq_len} if preset == "tiny" else {}


# --- The report ---------------------------------------------------------------------------------

class Report:
    """The JSON of the run, rewritten after every part; runs each part in its budget."""

    def __init__(self, path: str, settings: Settings, smoke: bool, budget_s: float):
        self.path, self.settings = path, settings
        self.deadline = time.perf_counter() + budget_s
        device = jax.devices()[0]
        self.data: dict[str, Any] = {
            "device": device.device_kind, "platform": device.platform,
            "peak_tflops_bf16_tf32": PEAK_TFLOPS.get(device.device_kind, "unknown"),
            "smoke": smoke, "budget_s": budget_s, "settings": dataclasses.asdict(settings),
            "versions": versions(), "command": " ".join([os.path.basename(sys.executable)]
                                                        + sys.argv),
            "parts": {}}
        self.shared: dict[str, Any] = {}  # what one part hands the next (the batches)
        self.write()

    def write(self) -> None:
        files.write_atomically(self.path, json.dumps(self.data, indent=1, default=float))

    def run(self, name: str, function: Callable[[Callable[[], float]], dict[str, Any]]) -> None:
        """Runs part `name` as function(seconds_left) -> its result, in min(its budget, the
        run's time left); records it (or why it was skipped, or its error) and rewrites."""
        started = time.perf_counter()
        budget = dict(self.settings.budgets)[name]
        part_deadline = min(started + budget, self.deadline)
        if part_deadline - started < 0.25 * budget:
            result = {"status": "skipped", "note": f"{self.deadline - started:.0f} s left of the "
                      f"run's budget, the part's is {budget:.0f} s"}
        else:
            try:
                result = function(lambda: part_deadline - time.perf_counter())
                result.setdefault("status", "done")
            except Exception as error:  # noqa: BLE001  one part's failure must not lose the rest
                result = {"status": "error", "error": f"{type(error).__name__}: {error}"[:2000],
                          "traceback": traceback.format_exc()[-4000:]}
        result["seconds"] = time.perf_counter() - started
        self.data["parts"][name] = result
        self.write()
        print(f"[{name}: {result['status']} in {result['seconds']:.0f} s]", file=sys.stderr,
              flush=True)


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "jax": jax.__version__}
    for name in ("flax", "optax", "orbax.checkpoint", "torch", "transformers"):
        try:
            found[name] = __import__(name, fromlist=["__version__"]).__version__
        except ImportError:
            found[name] = None
    return found


def stop_note(rows: list[dict[str, Any]], rows_total: int) -> dict[str, Any]:
    """The status and note of a part whose budget ran out after `rows`: skipped while none of
    them ran (rows marked "skipped" do not count; a row that failed does, so that its error
    is not hidden), partial after."""
    ran = sum("skipped" not in row for row in rows)
    return {"status": "partial" if ran else "skipped",
            "note": f"the part's budget ran out after {ran} of {rows_total} rows"}


def guarded(make_row: Callable[[], dict[str, Any]], **labels: Any) -> dict[str, Any]:
    """The row, or `labels` and the error that stopped it (out of memory, say): the rows
    measured before and after it are kept."""
    try:
        return make_row()
    except Exception as error:  # noqa: BLE001
        return {**labels, "error": f"{type(error).__name__}: {error}"[:1000]}


def timed_steps(run: Callable[[], None], steps: int) -> list[float]:
    """Seconds of each of `steps` calls of `run` (each blocks), after one untimed call."""
    run()
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return seconds


def peak_tflops(compute_dtype: str) -> float | None:
    """The data-sheet peak of this device for `compute_dtype` (float32: TF32), else None."""
    peaks = PEAK_TFLOPS.get(jax.devices()[0].device_kind)
    return None if peaks is None else peaks[0 if compute_dtype == "bfloat16" else 1]


def memory_stats() -> dict[str, int]:
    return jax.devices()[0].memory_stats() or {}


# --- equality: attention xla against cudnn ------------------------------------------------------

def padded_inputs(batch: int, seq_len: int, vocab: int) -> dict[str, np.ndarray]:
    """Rows of different lengths (SPEC 3.2.6: padding keys get -10000), one all padding, as
    tests/test_attention.py pads them, at `seq_len`."""
    rng = np.random.default_rng(0)
    lengths = np.array([seq_len, seq_len * 55 // 100, 1, 0, seq_len * 4 // 5, 5, seq_len,
                        seq_len // 2])[:batch]
    input_mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": rng.integers(5, vocab, (batch, seq_len)).astype(np.int32) * input_mask,
            "segment_ids": (np.arange(seq_len)[None, :] >= lengths[:, None] // 2).astype(np.int32),
            "input_mask": input_mask}


def equality_model(preset: str, dtype: str, impl: str, seq_len: int) -> AlbertModel:
    """AlbertModel of `preset` in `dtype`, attention `impl`, at least `seq_len` positions."""
    return AlbertModel(get_config(preset, dtype=dtype, attention_impl=impl,
                                  **tiny_overrides(preset, seq_len)))


def forward_and_gradients(model: AlbertModel, params: Any, inputs: dict[str, np.ndarray]) -> Any:
    """(sequence output, pooled output, parameter gradients) of `model` at `params` on
    `inputs`, on the host."""
    batch, seq_len = inputs["input_ids"].shape
    weights = jax.random.normal(jax.random.PRNGKey(1), (batch, seq_len, model.config.hidden_size))

    def loss(params, inputs):
        sequence, pooled = model.apply(params, **inputs)
        return jnp.sum(sequence.astype(jnp.float32) * weights), (sequence, pooled)

    def step(params, inputs):
        (_, (sequence, pooled)), grads = jax.value_and_grad(loss, has_aux=True)(params, inputs)
        return sequence, pooled, grads

    return jax.device_get(jax.jit(step)(params, inputs))


def worst_ratio(actual: Any, expected: Any, rtol: float) -> float:
    """max over leaves and elements of |a - b| / (atol + rtol |b|), atol = max(ABSOLUTE_FLOOR,
    rtol * the leaf's largest |b|): <= 1 is np.testing.assert_allclose's pass."""
    def ratio(a, b):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        atol = max(ABSOLUTE_FLOOR, rtol * float(np.abs(b).max()))
        return float(np.max(np.abs(a - b) / (atol + rtol * np.abs(b))))
    return max(jax.tree.leaves(jax.tree.map(ratio, actual, expected)))


def equality_part(settings: Settings, seconds_left: Callable[[], float]) -> dict[str, Any]:
    candidate = "cudnn" if on_gpu() else "splash"
    result: dict[str, Any] = {"candidate": candidate, "reference": "xla",
                              "seq_len": settings.seq_len, "batch": settings.equality_batch,
                              "preset": settings.equality_preset, "rows": []}
    if candidate == "splash":
        result["note"] = (f"the device ({jax.default_backend()}) has no cuDNN: splash (Pallas "
                          "interpret mode) stands in for cudnn, to run the comparison")
    for dtype in settings.equality_dtypes:
        if candidate == "cudnn" and dtype == "float32":
            result["rows"].append({"dtype": dtype, "skipped": "cuDNN's fused attention takes "
                                   "bfloat16/float16 only; presets.validate refuses "
                                   "attention_impl=cudnn with float32"})
            continue
        if seconds_left() <= 0:
            return {**result, **stop_note(result["rows"], len(settings.equality_dtypes))}
        result["rows"].append(guarded(lambda: equality_row(settings, dtype, candidate),
                                      dtype=dtype, passed=False))
    return result


def equality_row(settings: Settings, dtype: str, candidate: str) -> dict[str, Any]:
    reference, contender = (equality_model(settings.equality_preset, dtype, impl,
                                           settings.seq_len) for impl in ("xla", candidate))
    inputs = padded_inputs(settings.equality_batch, settings.seq_len,
                           reference.config.vocab_size)
    # One set of parameters for both sides, initialised jitted: op by op, the init compiles
    # each of its operations apart (seconds, even for the smoke's tiny model).
    params = sharding.unbox(jax.jit(reference.init)(jax.random.PRNGKey(0), **inputs))
    expected = forward_and_gradients(reference, params, inputs)
    actual = forward_and_gradients(contender, params, inputs)
    rtol = ATTENTION_RTOL[dtype]
    outputs, gradients = (worst_ratio(actual[:2], expected[:2], rtol),
                          worst_ratio(actual[2], expected[2], rtol))
    return {"dtype": dtype, "rtol": rtol, "outputs_worst_ratio": outputs,
            "gradients_worst_ratio": gradients, "passed": outputs <= 1 and gradients <= 1}


# --- loss: the accelerator against the CPU ------------------------------------------------------

def pretraining_task(preset: str, dtype: str, impl: str, batch: int, seq_len: int
                     ) -> tuple[Any, Any]:
    """(run config, PretrainingTask) of configs/pretrain.py for `preset` at batch x seq_len."""
    config = pretrain_config.get_config(f"model={preset}")
    config.compute_dtype, config.batch_size, config.seq_len = dtype, batch, seq_len
    config.model_overrides.attention_impl = impl
    for key, value in tiny_overrides(preset, seq_len).items():
        config.model_overrides[key] = value
    config.data.vocab_size = get_config(preset).vocab_size
    config.mesh.data = 1
    return config, pretraining.PretrainingTask(config, config_lib.model_config(config))


def loss_part(settings: Settings, seconds_left: Callable[[], float]) -> dict[str, Any]:
    batch = settings.equality_batch
    _, task = pretraining_task(settings.equality_preset, "float32", "xla", batch,
                               settings.seq_len)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        # Jitted: op by op, the init compiles each of its operations apart.
        params = sharding.unbox(jax.jit(task.model.init)(jax.random.PRNGKey(0),
                                                         *task.init_inputs()))
    params = jax.device_get(params)["params"]
    features = bench_table.pretraining_batch(batch, task.model_config.vocab_size,
                                             seq_len=settings.seq_len)

    def loss(params, batch):
        outputs = task.apply(params, batch, train=False, rng=None)
        return task.loss(task.loss_sums(outputs, batch), task.denominators(batch))

    def loss_on(device: Any, precision: str | None) -> float:
        placed = jax.device_put((params, features), device)
        with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
            return float(jax.jit(loss)(*placed))

    accelerator = jax.devices()[0]
    on_cpu = loss_on(cpu, None)
    if accelerator.platform == "cpu":  # the same computation again: nothing to learn
        highest = default = on_cpu
    else:
        highest, default = loss_on(accelerator, "highest"), loss_on(accelerator, None)
    relative = abs(highest - on_cpu) / abs(on_cpu)
    result = {"preset": settings.equality_preset, "batch": batch, "seq_len": settings.seq_len,
              "cpu_loss": on_cpu, "device_loss_highest": highest, "device_loss_default": default,
              "relative_difference_highest": relative,
              "relative_difference_default": abs(default - on_cpu) / abs(on_cpu),
              "rtol": LOSS_RTOL, "passed": relative <= LOSS_RTOL}
    if accelerator.platform == "cpu":
        result["note"] = "no accelerator: both sides ran on the CPU"
    return result


# --- pretraining: the project's step at batch x 512 ---------------------------------------------

def build_task_for(config: Any) -> tuple[Any, dict[str, jax.ShapeDtypeStruct]]:
    """train/plan.py's BuildTask of a pretraining config (as `albert-jax plan` builds it)."""
    task = pretraining.PretrainingTask(config, config_lib.model_config(config))
    return task, task.train_batch_spec(config.batch_size)


def device_target() -> plan.Target:
    """This process's first device as a planner target, its memory JAX's share of it."""
    device = jax.devices()[0]
    limit = memory_stats().get("bytes_limit", 0)
    return plan.Target(device.device_kind, (device,), limit, (peak_tflops("bfloat16") or 0) * 1e12,
                       is_tpu=False)


def choose_batch(settings: Settings, preset: str) -> dict[str, Any]:
    """The planner's peak at the probe batch (float32, xla: the largest of the variants),
    scaled linearly in the batch: the largest multiple of 8 (or the smoke's cap) whose peak
    fills FILL_FRACTION of JAX's memory."""
    target = device_target()
    config, _ = pretraining_task(preset, "float32", "xla", settings.probe_batch, settings.seq_len)
    probe = plan.measure(config, build_task_for, target)
    fixed = probe.param_bytes_per_device + probe.opt_state_bytes_per_device
    per_example = (probe.peak_bytes_per_device - fixed) / settings.probe_batch
    choice = {"probe_batch": settings.probe_batch, "probe_peak_bytes": probe.peak_bytes_per_device,
              "probe_compile_s": probe.compile_seconds, "state_bytes": fixed,
              "bytes_per_example": per_example, "jax_bytes_limit": target.hbm_bytes}
    if not target.hbm_bytes:
        return {**choice, "batch": settings.fallback_batch,
                "note": "no memory statistics on this device: the settings' batch"}
    fitting = int((FILL_FRACTION * target.hbm_bytes - fixed) / per_example)
    batch = min(settings.max_batch, max(8, fitting - fitting % 8))
    return {**choice, "batch": batch, "predicted_peak_bytes": fixed + per_example * batch}


def pretraining_row(preset: str, dtype: str, impl: str, batch: int, settings: Settings
                    ) -> dict[str, Any]:
    """The project's train step (jit_train_step, reference LAMB) compiled and timed."""
    config, task = pretraining_task(preset, dtype, impl, batch, settings.seq_len)
    mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
    optimizer, lr_fn = optim.make_optimizer(config.optim, config.total_steps)
    _, state_shardings = state_lib.abstract_train_state(task.model, optimizer, mesh,
                                                        task.init_inputs())
    state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(0),
                                       task.init_inputs())
    train_step = step_lib.jit_train_step(task, optimizer, lr_fn, mesh, state_shardings)
    features = jax.device_put(
        bench_table.pretraining_batch(batch, task.model_config.vocab_size,
                                      seq_len=settings.seq_len), sharding.batch_sharding(mesh))
    rng = jax.random.PRNGKey(1)
    compiled, compile_s = bench_table.compile_timed(train_step, state, features, rng)
    peak_before = memory_stats().get("peak_bytes_in_use")
    holder = {"state": state}

    def run() -> None:
        holder["state"], metrics = compiled(holder["state"], features, rng)
        jax.block_until_ready(metrics)

    seconds = timed_steps(run, settings.steps)
    peak_after = memory_stats().get("peak_bytes_in_use")
    step_s = statistics.median(seconds)
    model_flops = flops.train_flops_per_step(task.model_config, batch, settings.seq_len,
                                             config.data.max_predictions)
    peak = peak_tflops(dtype)
    return {"preset": preset, "dtype": dtype, "attention": impl, "batch": batch,
            "seq_len": settings.seq_len, "compile_s": compile_s, "step_s": step_s,
            "spread": (max(seconds) - min(seconds)) / step_s,
            "tokens_per_s": batch * settings.seq_len / step_s,
            "model_tflop_per_step": model_flops / 1e12,
            "achieved_tflops": model_flops / step_s / 1e12,
            "peak_tflops": peak if peak else "unknown",
            "mfu": model_flops / step_s / (peak * 1e12) if peak else None,
            "planner_peak_bytes": bench_table.peak_bytes(compiled),
            "measured_peak_bytes": peak_after,
            "measured_peak_is_this_row": (peak_after is not None
                                          and peak_after > (peak_before or 0))}


def pretraining_part(settings: Settings, seconds_left: Callable[[], float],
                     shared: dict[str, Any]) -> dict[str, Any]:
    """Every preset's batch first, then the rows variant by variant (PRETRAIN_VARIANTS, the
    GPU's own configuration first), each over the presets: a cut run keeps the rows that
    matter most."""
    result: dict[str, Any] = {"variants": [f"{dtype} {impl}" for dtype, impl in
                                           PRETRAIN_VARIANTS], "batches": {}, "rows": []}
    batches = shared.setdefault("batches", {})
    total = len(settings.presets) * len(PRETRAIN_VARIANTS)
    for preset in settings.presets:
        if seconds_left() <= 0:
            return {**result, **stop_note(result["rows"], total)}
        # Should the planner fail here, the settings' batch still measures the rows.
        choice = guarded(lambda: choose_batch(settings, preset), batch=settings.fallback_batch)
        result["batches"][preset], batches[preset] = choice, choice["batch"]
    for dtype, impl in PRETRAIN_VARIANTS:
        for preset in settings.presets:
            if seconds_left() <= 0:
                return {**result, **stop_note(result["rows"], total)}
            if impl == "cudnn" and not on_gpu():
                result["rows"].append({"preset": preset, "dtype": dtype, "attention": impl,
                                       "skipped": f"the device ({jax.default_backend()}) has "
                                                  "no cuDNN"})
                continue
            result["rows"].append(guarded(
                lambda: pretraining_row(preset, dtype, impl, batches[preset], settings),
                preset=preset, dtype=dtype, attention=impl, batch=batches[preset]))
    return result


# --- torch: HuggingFace PyTorch beside ours ------------------------------------------------------

def torch_row(preset: str, batch: int, compiled: bool, settings: Settings) -> dict[str, Any]:
    """HF's AlbertForPreTraining step at `batch` x seq_len, bf16 autocast; on running out of
    GPU memory, again at half the batch (tokens/s stay comparable)."""
    import torch

    halved_from: list[int] = []
    while True:
        try:
            row = torch_measurement(preset, batch, compiled, settings)
            if halved_from:
                row["note"] = ("out of GPU memory at batch "
                               f"{', '.join(map(str, halved_from))}: halved each time")
            return row
        except torch.cuda.OutOfMemoryError:
            if batch <= 1:
                raise
            halved_from.append(batch)
        batch //= 2
        free_torch_memory()  # out of the except: its traceback no longer holds the tensors


def torch_measurement(preset: str, batch: int, compiled: bool, settings: Settings
                      ) -> dict[str, Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model_config = get_config(preset, **tiny_overrides(preset, settings.seq_len))
    backend = settings.torch_compile_backend if compiled else None
    contender = bench_table.hf_torch_train(
        "HF torch", model_config, batch, seq_len=settings.seq_len, device=device,
        autocast_dtype=torch.bfloat16, compile_backend=backend)
    step_s = statistics.median(timed_steps(contender.run, settings.torch_steps))
    return {"preset": preset, "mode": f"torch.compile ({backend})" if compiled else "eager",
            "dtype": "bfloat16 autocast", "optimizer": "torch.optim.AdamW", "device": device,
            "batch": batch, "seq_len": settings.seq_len, "first_call_s": contender.compile_s,
            "step_s": step_s, "tokens_per_s": batch * settings.seq_len / step_s}


def free_torch_memory() -> None:
    """torch's cached GPU memory back to the device: the JAX processes after it need room."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def torch_part(settings: Settings, seconds_left: Callable[[], float],
               shared: dict[str, Any], pretraining: dict[str, Any]) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        return {"status": "skipped", "note": f"torch or transformers missing: {error}"}
    result: dict[str, Any] = {"rows": [], "ratios": []}
    presets = [preset for preset in settings.presets if preset in shared.get("batches", {})]
    if not presets:
        return {"status": "skipped", "note": "no pretraining batch chosen (that part did not run)"}
    total = 2 * len(presets)
    for preset in presets:
        for compiled in (False, True):
            if seconds_left() <= 0:
                return {**result, **stop_note(result["rows"], total)}
            row = guarded(lambda: torch_row(preset, shared["batches"][preset], compiled,
                                            settings), preset=preset, compiled=compiled)
            free_torch_memory()
            result["rows"].append(row)
            if "error" not in row:
                result["ratios"] += ratios_against(row, pretraining.get("rows", []))
    return result


def ratios_against(hf_row: dict[str, Any], our_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ours tokens/s / HF's, for each of our bfloat16 rows of the same preset."""
    return [{"preset": hf_row["preset"], "ours": f"{row['dtype']} {row['attention']}",
             "hf": hf_row["mode"], "ours_over_hf_tokens_per_s":
                 row["tokens_per_s"] / hf_row["tokens_per_s"]}
            for row in our_rows if row.get("preset") == hf_row["preset"]
            and row.get("dtype") == "bfloat16" and "tokens_per_s" in row]


# --- finetune: the fine-tuning step at length buckets --------------------------------------------

def finetune_part(settings: Settings, seconds_left: Callable[[], float]) -> dict[str, Any]:
    """Our GLUE step (MRPC, AdamW) at each bucket of configs/glue.py and at seq_len (or, without
    settings.finetune_every_bucket, at the first bucket and seq_len): batches of pairs whose
    longest lies in the bucket, so each runs at that length."""
    preset = settings.equality_preset
    buckets = tuple(b for b in glue_config.get_config("task=mrpc").length_buckets
                    if b < settings.seq_len) + (settings.seq_len,)
    # (the bucket below, the bucket): a bucket's pairs run from half the one below it to it.
    # Every bucket is timed, or the first and seq_len alone.
    lows_and_buckets = [pair for index, pair in enumerate(zip((1,) + buckets, buckets))
                        if settings.finetune_every_bucket or index in (0, len(buckets) - 1)]
    result: dict[str, Any] = {"preset": preset, "batch": settings.finetune_batch,
                              "seq_len": settings.seq_len, "length_buckets": buckets,
                              "timed_buckets": [bucket for _, bucket in lows_and_buckets],
                              "rows": []}
    total = len(lows_and_buckets) * len(settings.finetune_dtypes)
    for dtype in settings.finetune_dtypes:
        model_config = get_config(preset, dtype=dtype, **tiny_overrides(preset, settings.seq_len))
        for low, bucket in lows_and_buckets:
            if seconds_left() <= 0:
                return {**result, **stop_note(result["rows"], total)}
            result["rows"].append(guarded(
                lambda: finetune_row(settings, model_config, (max(low // 2, 8), bucket),
                                     buckets), dtype=dtype, bucket=bucket))
        full = [row for row in result["rows"] if row["dtype"] == dtype
                and row["bucket"] == settings.seq_len and "step_s" in row]
        for row in result["rows"]:
            if row["dtype"] == dtype and full and "step_s" in row:
                row["speedup_over_seq_len"] = full[0]["step_s"] / row["step_s"]
    return result


def finetune_row(settings: Settings, model_config: Any, lengths: tuple[int, int],
                 buckets: tuple[int, ...]) -> dict[str, Any]:
    """The step on 2 batches of pairs of `lengths` tokens (uniform), the longest pair of each
    `lengths[1]`: every step runs at that bucket."""
    bucket = lengths[1]
    batches = bench_table.glue_batches(settings.finetune_batch, settings.seq_len, lengths, 2,
                                       model_config.vocab_size)
    for host_batch in batches:
        host_batch["input_mask"][0, :bucket] = 1
    contender = bench_table.ours_finetune(f"{model_config.dtype} {bucket}", model_config,
                                          batches, buckets)
    step_s = statistics.median(timed_steps(contender.run, settings.steps))
    # As bench_table counts it: the backbone at every position, no masked-LM head.
    step_flops = (flops.TRAIN_FLOPS_PER_FORWARD * settings.finetune_batch
                  * flops.forward_flops_per_sequence(model_config, bucket, 0))
    peak = peak_tflops(model_config.dtype)
    return {"dtype": model_config.dtype,
            "attention": attention.resolve(model_config, jax.default_backend()),
            "bucket": bucket, "compile_s": contender.compile_s, "step_s": step_s,
            "examples_per_s": settings.finetune_batch / step_s,
            "mfu": step_flops / step_s / (peak * 1e12) if peak else None}


# --- predict: albert-jax predict against HuggingFace's pipeline ----------------------------------

def predict_part(settings: Settings, seconds_left: Callable[[], float]) -> dict[str, Any]:
    import torch

    device = 0 if torch.cuda.is_available() else -1
    with tempfile.TemporaryDirectory(prefix="accelerator_check-") as scratch:
        workdir = os.path.join(scratch, "run")
        models = bench_predict.prepare_models(workdir, scratch, settings.predict_train_steps)
        columns = ("id", "text", "text_b")
        rows = bench_predict.write_csv(os.path.join(scratch, "rows.csv"),
                                       bench_predict.pair_rows(settings.predict_rows, seed=3),
                                       columns)
        probe = bench_predict.write_csv(
            os.path.join(scratch, "probe.csv"),
            bench_predict.pair_rows(settings.predict_probe_rows, seed=4), columns)
        if seconds_left() <= 0:
            return {"status": "skipped", "note": "the budget ran out while fine-tuning the model"}
        compared = bench_predict.compare_rounds(workdir, models, rows, probe, 1,
                                                list(settings.hf_batch_sizes), device)
    return {"model": "bench_predict's demo classification run (E64 H128 L4)",
            "row_count": settings.predict_rows, "seq_len": models["seq_len"],
            "eval_batch_size": models["eval_batch_size"],
            "hf_device": "cuda:0" if device == 0 else "cpu", **compared}


# --- plan: the planner's peak against the measured one ------------------------------------------

def plan_part(settings: Settings, seconds_left: Callable[[], float],
              pretraining: dict[str, Any]) -> dict[str, Any]:
    rows = [{key: row[key] for key in ("preset", "dtype", "attention", "batch",
                                       "planner_peak_bytes", "measured_peak_bytes",
                                       "measured_peak_is_this_row")}
            for row in pretraining.get("rows", []) if "planner_peak_bytes" in row]
    if not rows:
        return {"status": "skipped", "note": "no pretraining row ran"}
    for row in rows:
        if row["measured_peak_is_this_row"]:
            row["planner_over_measured"] = row["planner_peak_bytes"] / row["measured_peak_bytes"]
    result: dict[str, Any] = {"rows": rows}
    if all(row["measured_peak_bytes"] is None for row in rows):
        result["note"] = "the device keeps no memory statistics: nothing measured"
    # What `albert-jax plan --devices=1` says without the GPU: the step compiled for the CPU,
    # for an xla row (the CPU compiles no cuDNN), one whose peak was measured if there is one.
    xla_rows = [row for row in rows if row["attention"] == "xla"]
    if not xla_rows or seconds_left() <= 0:
        return {**result, **stop_note(rows, len(rows) + 1)}
    first = max(xla_rows, key=lambda row: row["measured_peak_is_this_row"])
    config, _ = pretraining_task(first["preset"], first["dtype"], first["attention"],
                                 first["batch"], settings.seq_len)
    cpu_plan = plan.measure(config, build_task_for, plan.cpu_target(1, 80.0, 1.0))
    result["cpu_planner"] = {
        "preset": first["preset"], "dtype": first["dtype"], "attention": first["attention"],
        "batch": first["batch"], "peak_bytes": cpu_plan.peak_bytes_per_device,
        "compile_s": cpu_plan.compile_seconds,
        "over_measured": (cpu_plan.peak_bytes_per_device / first["measured_peak_bytes"]
                          if first["measured_peak_is_this_row"] else None)}
    return result


# --- The run --------------------------------------------------------------------------------------

def run_check(report: Report, parts: list[str]) -> None:
    settings, shared, done = report.settings, report.shared, report.data["parts"]
    functions = {
        "equality": lambda left: equality_part(settings, left),
        "loss": lambda left: loss_part(settings, left),
        "pretraining": lambda left: pretraining_part(settings, left, shared),
        "torch": lambda left: torch_part(settings, left, shared, done.get("pretraining", {})),
        "finetune": lambda left: finetune_part(settings, left),
        "predict": lambda left: predict_part(settings, left),
        "plan": lambda left: plan_part(settings, left, done.get("pretraining", {})),
    }
    for name in PARTS:
        if name in parts:
            report.run(name, functions[name])


def _gib(count: Any) -> str:
    return f"{count / 2**30:.2f}" if isinstance(count, (int, float)) else "-"


def _number(value: Any, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else str(value or "-")


def table(data: dict[str, Any]) -> str:
    """The short table of a finished (or cut) run."""
    lines = [f"{data['device']} ({data['platform']}), peaks bf16/TF32 TFLOP/s "
             f"{data['peak_tflops_bf16_tf32']}; versions {data['versions']}"]
    for name, part in data["parts"].items():
        lines.append(f"{name}: {part['status']} in {part['seconds']:.0f} s"
                     + (f" - {part.get('note') or part.get('error')}"
                        if part.get("note") or part.get("error") else ""))
        for row in part.get("rows", []) if isinstance(part.get("rows"), list) else []:
            label = " ".join(str(row[key]) for key in ("preset", "dtype", "attention", "bucket")
                             if key in row)
            if "skipped" in row or "error" in row:
                lines.append(f"  {label}: " + (f"skipped, {row['skipped']}" if "skipped" in row
                                               else f"ERROR {row['error'][:300]}"))
            elif name == "equality":
                lines.append(f"  {row['dtype']}: worst |diff| / tolerance outputs "
                             f"{row['outputs_worst_ratio']:.3f}, gradients "
                             f"{row['gradients_worst_ratio']:.3f}: "
                             f"{'passed' if row['passed'] else 'FAILED'}")
            elif name == "pretraining":
                lines.append(f"  {row['preset']} {row['dtype']} {row['attention']} batch "
                             f"{row['batch']}: compile {row['compile_s']:.1f} s, step "
                             f"{row['step_s'] * 1e3:.1f} ms, {row['tokens_per_s']:,.0f} tokens/s, "
                             f"MFU {_number(row['mfu'], '{:.1%}')}, peak GiB planner "
                             f"{_gib(row['planner_peak_bytes'])} measured "
                             f"{_gib(row['measured_peak_bytes'])}")
            elif name == "torch":
                lines.append(f"  HF {row['preset']} {row['mode']} batch {row['batch']}: step "
                             f"{row['step_s'] * 1e3:.1f} ms, {row['tokens_per_s']:,.0f} tokens/s")
            elif name == "finetune":
                lines.append(f"  {row['dtype']} {row['attention']} at {row['bucket']}: "
                             f"{row['examples_per_s']:,.0f} examples/s, x"
                             f"{_number(row.get('speedup_over_seq_len'), '{:.2f}')} over "
                             f"{part['seq_len']}")
        for ratio in part.get("ratios", []):
            lines.append(f"  ours {ratio['ours']} / HF {ratio['hf']} ({ratio['preset']}): "
                         f"{ratio['ours_over_hf_tokens_per_s']:.2f}x tokens/s")
        if name == "loss" and "cpu_loss" in part:
            lines.append(f"  loss cpu {part['cpu_loss']:.6f}, device highest "
                         f"{part['device_loss_highest']:.6f} (relative "
                         f"{part['relative_difference_highest']:.1e}), default {part['device_loss_default']:.6f}: "
                         f"{'passed' if part['passed'] else 'FAILED'}")
        if name == "predict" and "rounds_rows_per_s" in part:
            rates = part["rounds_rows_per_s"]
            lines.append(f"  rows/s ours {rates['ours']:,.0f}, HF pipeline {rates['hf']:,.0f} "
                         f"(batch {part['hf_batch_size']}): {part['ratio_ours_over_hf']:.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, help="the JSON file, rewritten per part")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes: any machine, ~1 min")
    parser.add_argument("--budget_s", type=float, default=None,
                        help="seconds for all parts (default 450; --smoke: 170)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of {','.join(PARTS)}")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; choose from {','.join(PARTS)}")
    # Compile times are measured: nothing may come from a persistent compilation cache.
    jax.config.update("jax_enable_compilation_cache", False)
    settings = SMOKE if args.smoke else Settings()
    budget = args.budget_s or (170.0 if args.smoke else 450.0)
    report = Report(args.output, settings, args.smoke, budget)
    run_check(report, parts)
    print(table(report.data), flush=True)


if __name__ == "__main__":
    main()
