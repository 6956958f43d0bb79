"""The README's "Will it fit?" table: every preset at the paper's batch on four TPU slices.

  python -m benchmarks.plan_table [--presets=base,large,xlarge,xxlarge]
      [--slices=v3-512,v4-128,v5e-256,v5p-128] [--attention=xla,splash]
      [--rows_file=rows.jsonl] [--json]

Each row is one `albert-jax plan --config=configs/pretrain.py:size=<preset> --topology=<slice>
--config.model_overrides.attention_impl=<attention> --json` in its own process (each compile's XLA
memory is freed with its process): the real pretraining step at the paper's batch 4096 x seq 512
(configs/pretrain.py, SPEC 6.6), fp32, as configured (data parallel over every device, no remat, one
microbatch), compiled ahead of time for abstract TPU devices from libtpu (the `[tpu]` extra; no TPU
needed), with the planner's levers on: when a row does not fit, the smallest change that fits is the
planner's `fits_with`. With `--attention=xla` the planner's lever search may answer with the other
kernel (`attention_impl=splash`, tried before remat); a splash row shows what the fused kernel alone
leaves and, when it does not fit, the largest buffers it then keeps. Every number printed comes from
the planner's JSON; a `*` marks a peak above the chip's HBM in a program the TPU compiler accepted
(see `markdown_row`). Prints the markdown table (header included), or with --json one JSON list of
{preset, slice, attention, plan}. Progress goes to stderr. With --rows_file each finished row is
appended there as one JSON line, and a rerun skips the rows already in it (a long sweep survives a
kill). A row takes 1 to 10 minutes on two CPU cores, most where levers run (the xla rows 38
minutes in all on shared cores, the splash rows 69).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from typing import Any

GIB = 1024**3

# Slice names as gcloud's accelerator types -> (libtpu topology, what the slice is). v2-v4 and
# v5p names count TensorCores (two a chip), v5e names count chips; JAX drives a v3 TensorCore as
# one device and a v4 / v5p chip as one (megacore), so v3-512 is 512 devices, v4-128 is 64.
SLICES = {
    "v3-512": ("v3:16x16", "256 chips, 512 cores"),
    "v4-128": ("v4:4x4x4", "64 chips"),
    "v5e-256": ("v5e:16x16", "256 chips"),
    "v5p-128": ("v5p:4x4x4", "64 chips"),
}
PRESETS = ("base", "large", "xlarge", "xxlarge")  # configs/pretrain.py:size=<preset>


ATTENTION = ("xla", "splash")  # model_overrides.attention_impl of a row


def plan_row(preset: str, slice_name: str, attention: str) -> dict[str, Any]:
    """The planner's JSON for `preset` at the paper's batch on `slice_name` with `attention`."""
    topology, _ = SLICES[slice_name]
    command = [sys.executable, "-m", "albert_jax.cli", "plan",
               f"--config=configs/pretrain.py:size={preset}", f"--topology={topology}",
               f"--config.model_overrides.attention_impl={attention}", "--json"]
    # libtpu takes /tmp/libtpu_lockfile for its process (any JAX process with libtpu installed,
    # a test run beside this too); compiling for abstract devices touches no TPU, so share it.
    env = dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    finished = subprocess.run(command, capture_output=True, text=True, env=env)
    if finished.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} failed (status {finished.returncode}):\n"
                         + finished.stderr[-3000:])
    return json.loads(finished.stdout)


def _gib(count: int, digits: int = 1) -> str:
    return f"{count / GIB:.{digits}f}"


def _largest_buffer(plan: dict[str, Any], width: int = 60) -> str:
    """The largest buffer of a program that did not fit: its size and the shapes that share it
    (XLA's memory report), cut to `width` characters."""
    buffer = plan["largest_buffers"][0]
    shapes = buffer["shapes"]
    if len(shapes) > width:
        shapes = shapes[:width - 3] + "..."
    return f"{_gib(buffer['bytes'])} GiB `{shapes}`"


def markdown_row(preset: str, slice_name: str, plan: dict[str, Any]) -> str:
    """One row of the README table from the planner's JSON. A `*` would mark a peak above the
    HBM of the planner's chip table in a program the TPU compiler accepted: the table holds the
    compiler's own "available HBM", so a `*` means libtpu changed it (update plan.CHIPS)."""
    _, what = SLICES[slice_name]
    hbm = plan["hbm_bytes_per_device"]

    def peak(measured: dict[str, Any]) -> str:
        over = "*" if measured["fits"] and measured["peak_bytes_per_device"] > hbm else ""
        return f"{_gib(measured['peak_bytes_per_device'])} GiB{over}"

    fits_with = plan["fits_with"]
    if plan["fits"]:
        change = "-"
    elif fits_with is None:
        change = ("none of the levers (fsdp, attention_impl, remat, microbatches); largest "
                  f"buffer {_largest_buffer(plan)}")
    else:
        flags = fits_with["overrides"].replace("--config.", "")
        change = f"`{flags}` ({peak(fits_with)})"
        if plan["attention_impl"] != "xla":
            # What the fused kernel alone leaves over: the buffers a lever has to take away.
            change += f"; largest buffer as configured {_largest_buffer(plan)}"
    temp = plan["temp_bytes_per_device"]
    cells = [
        preset,
        f"{slice_name} ({what})",
        plan["attention_impl"],
        f"{plan['devices']} x {_gib(hbm, 2)} GiB",
        str(plan["batch_size"] // plan["devices"]),
        f"{_gib(plan['param_bytes_per_device'] + plan['opt_state_bytes_per_device'], 2)} GiB",
        f"{_gib(temp)}, {peak(plan)}",
        "yes" if plan["fits"] else "no",
        change,
        f"{plan['step_seconds']:.2f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def header(mfu: float) -> str:
    columns = ["preset", "slice", "attention", "devices x HBM", "batch/device",
               "params+opt / device",
               "as configured (remat none, fp32): temporaries, peak", "fits?",
               "smallest change that fits (peak)", f"step at {mfu:.0%} MFU"]
    return "| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|"


def _names(text: str, known: tuple[str, ...] | dict[str, Any], flag: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise SystemExit(f"--{flag}={text}: {', '.join(unknown) or 'empty'} not in "
                         f"{', '.join(known)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--slices", default=",".join(SLICES))
    parser.add_argument("--attention", default=",".join(ATTENTION))
    parser.add_argument("--rows_file", help="JSON lines of finished rows: appended, reused")
    parser.add_argument("--json", action="store_true", help="one JSON list of the plans")
    args = parser.parse_args()
    presets = _names(args.presets, PRESETS, "presets")
    slices = _names(args.slices, SLICES, "slices")
    attentions = _names(args.attention, ATTENTION, "attention")

    finished = {}
    if args.rows_file and os.path.exists(args.rows_file):
        with open(args.rows_file) as rows_file:
            for line in rows_file:
                row = json.loads(line)
                finished[row["preset"], row["slice"], row["attention"]] = row
    rows = []
    for key in itertools.product(presets, slices, attentions):
        if key not in finished:
            preset, slice_name, attention = key
            started = time.perf_counter()
            plan = plan_row(*key)
            print(f"{preset} on {slice_name} with {attention}: "
                  f"{time.perf_counter() - started:.0f} s, "
                  f"{len(plan['levers_tried'])} lever settings tried", file=sys.stderr, flush=True)
            finished[key] = {"preset": preset, "slice": slice_name, "attention": attention,
                             "plan": plan}
            if args.rows_file:
                with open(args.rows_file, "a") as rows_file:
                    rows_file.write(json.dumps(finished[key]) + "\n")
        rows.append(finished[key])
    if args.json:
        print(json.dumps(rows))
        return
    print(header(rows[0]["plan"]["mfu"]))
    for row in rows:
        print(markdown_row(row["preset"], row["slice"], row["plan"]))


if __name__ == "__main__":
    main()
