"""Where a step's time goes: a jax.profiler trace of two bench_table contenders, alternating in
one process, each executed op mapped to its HLO instruction and source (the op_name metadata).

  .venv/bin/python -m benchmarks.profile_step [--case=finetune|train|bf16] [--steps=3] [--top=25]

Cases: finetune (ours GlueTask + AdamW vs HF Flax + optax.adamw), train (ours LAMB vs HF Flax
+ optax.lamb), bf16 (our LAMB step in fp32 vs bf16 compute); albert-base, batch 8, seq 128.

Printed per contender, in ms per step: wall time; executed-op time by kind (dot: a dot or
convolution or a YNNPACK/XNNPACK fusion, which also holds some reductions; elementwise,
broadcast, copy, convert, ...); by phase (forward, backward = transpose(jvp), rest = loss,
optimizer, metrics) and part (LayerNorm, matmuls, GELU, softmax); the `--top` instructions;
and the HLO's count of convert instructions and of dots by operand type. Op times are summed
over threads, so they can exceed the wall time when independent ops overlap. The trace and the
HLO text are left in --out.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
from typing import Any

import jax

from benchmarks import bench_table

# Parts of the model, by the source op_name (ours and HF's module names).
PARTS = (("LayerNorm", r"LayerNorm|layer_norm"),
         ("softmax", r"reduce_max|/exp|softmax"),
         ("GELU", r"/tanh|/pow|/integer_pow|FeedForwardBlock/mul|albert_layers/0/mul"),
         ("matmul", r"dot_general|\.\.\.\w*,|einsum"))


def parse_hlo(text: str) -> dict[str, dict[str, Any]]:
    """instruction name -> {op, shape, op_name, body: ops of the computation it calls}."""
    computations: dict[str, list[str]] = {}
    instructions: dict[str, dict[str, Any]] = {}
    current = None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header and not line.startswith(" "):
            current = header.group(1)
            computations[current] = []
            continue
        match = re.match(r"^\s+(?:ROOT )?%([\w.\-]+) = (.+?) ([a-z][\w\-]*)\(", line)
        if match:
            name, shape, op = match.groups()
            if current is not None:
                computations[current].append(op)
            calls = re.search(r"calls=%([\w.\-]+)", line)
            op_name = re.search(r'op_name="([^"]+)"', line)
            instructions[name] = {"op": op, "shape": shape,
                                  "calls": calls.group(1) if calls else None,
                                  "op_name": op_name.group(1) if op_name else ""}
    for info in instructions.values():
        info["body"] = set(computations.get(info["calls"], [])) if info["calls"] else set()
    return instructions


def kind(name: str, info: dict[str, Any]) -> str:
    body = info["body"]
    if info["op"] in ("dot", "convolution") or body & {"dot", "convolution"} \
            or name.startswith(("ynn", "xnn")):
        return "dot"
    if info["op"] != "fusion":
        return info["op"]
    if body <= {"broadcast", "constant", "parameter"}:
        return "broadcast"
    if body & {"gather", "scatter", "dynamic-slice", "dynamic-update-slice"}:
        return "gather/scatter/slice"
    if "convert" in body and body <= {"convert", "parameter", "bitcast", "copy", "transpose"}:
        return "convert"
    return "reduce fusion" if "reduce" in body else "elementwise fusion"


def short_source(op_name: str) -> str:
    op_name = re.sub(r"jit\(\w+\)/", "", op_name)
    op_name = re.sub(r"transpose\(jvp\(\w+\)\)", "bwd", op_name)
    op_name = re.sub(r"jvp\(\w+\)", "fwd", op_name)
    return re.sub(r"albert/encoder/(closed_call/)?(group_0_per_layer/)?"
                  r"(albert_layer_groups/0/albert_layers/0/)?", "enc/", op_name)


def hlo_dtype_counts(text: str) -> dict[str, int]:
    """Converts, and dots by their first operand's element type, in the optimized HLO."""
    counts: collections.Counter = collections.Counter()
    shapes = dict(re.findall(r"%([\w.\-]+) = (\w+)\[", text))
    for line in text.splitlines():
        match = re.match(r"^\s+(?:ROOT )?%[\w.\-]+ = (\w+)\[[^=]*? (dot|convert)\((.*?)\)", line)
        if not match:
            continue
        out_type, op, operands = match.groups()
        first = re.match(r"%([\w.\-]+)", operands)
        in_type = shapes.get(first.group(1), "?") if first else "?"
        counts[f"{op} {in_type}->{out_type}"] += 1
    return dict(counts)


def contenders_of(case: str) -> list[bench_table.Contender]:
    base = bench_table.get_config("albert-base-v2")
    if case == "finetune":
        full = bench_table.full_length_batch(8, base.vocab_size)
        contenders = [bench_table.ours_finetune("ours", base, full),
                      bench_table.hf_finetune("HF", base, full)]
    elif case == "train":
        contenders = [bench_table.ours_train("ours", base, 8), bench_table.hf_train("HF", base, 8)]
    else:
        base = bench_table.get_config("albert-base-v2", dtype="bfloat16")
        contenders = [bench_table.ours_train("ours fp32", bench_table.get_config("albert-base-v2"),
                                             8),
                      bench_table.ours_train("ours bf16", base, 8)]
    return contenders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="finetune", choices=("finetune", "train", "bf16"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="/tmp/albert_jax_profile")
    args = parser.parse_args()

    # Keep each contender's compiled executable: its HLO names the ops of the trace.
    compiled_list = []
    compile_timed = bench_table.compile_timed

    def keep_compiled(jitted: Any, *inputs: Any) -> tuple[Any, float]:
        compiled, seconds = compile_timed(jitted, *inputs)
        compiled_list.append(compiled)
        return compiled, seconds

    bench_table.compile_timed = keep_compiled
    contenders = contenders_of(args.case)
    bench_table.compile_timed = compile_timed
    os.makedirs(args.out, exist_ok=True)
    hlo = {}
    for contender, compiled in zip(contenders, compiled_list):
        text = compiled.as_text()
        with open(os.path.join(args.out, f"{args.case}_{contender.name.replace(' ', '_')}.hlo"),
                  "w") as file:
            file.write(text)
        hlo[contender.name] = (parse_hlo(text), hlo_dtype_counts(text))

    for contender in contenders:
        contender.run()
    trace_dir = os.path.join(args.out, f"trace_{args.case}")
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(args.steps):
            for contender in contenders:
                with jax.profiler.TraceAnnotation(f"CONTENDER {contender.name}"):
                    contender.run()
    trace_file = sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"),
                                  recursive=True))[-1]
    with gzip.open(trace_file) as file:
        events = json.load(file)
    events = [event for event in (events["traceEvents"] if isinstance(events, dict) else events)
              if event.get("ph") == "X"]
    windows = [(event["ts"], event["ts"] + event["dur"], event["name"][len("CONTENDER "):])
               for event in events if event["name"].startswith("CONTENDER ")]

    for contender in contenders:
        instructions, dtype_counts = hlo[contender.name]
        spans = [(start, end) for start, end, name in windows if name == contender.name]
        steps = len(spans)
        by_kind: collections.Counter = collections.Counter()
        by_part: collections.Counter = collections.Counter()
        by_op: collections.Counter = collections.Counter()
        for event in events:
            info = instructions.get(event["name"])
            if info is None or not any(start <= event["ts"] < end for start, end in spans):
                continue
            op_kind = kind(event["name"], info)
            source = short_source(info["op_name"])
            phase = source.split(" ")[0].split("/")[0]
            phase = phase if phase in ("fwd", "bwd") else "rest"
            part = next((label for label, pattern in PARTS
                         if re.search(pattern, info["op_name"])), "other")
            if part == "matmul" and op_kind != "dot":  # a convert or transpose of an operand
                part = f"matmul operands ({op_kind})"
            by_kind[op_kind] += event["dur"]
            by_part[(phase, part)] += event["dur"]
            by_op[(op_kind, source)] += event["dur"]
        total = sum(by_kind.values())
        wall = sum(end - start for start, end in spans)
        def ms(microseconds: float) -> float:
            return microseconds / steps / 1e3

        print(f"== {contender.name}: wall {ms(wall):.0f} ms per step, executed ops "
              f"{ms(total):.0f} ms ({steps} steps)")
        for op_kind, value in by_kind.most_common():
            print(f"  {ms(value):8.1f} ms {100 * value / total:5.1f} %  {op_kind}")
        print("  by phase and part:")
        for (phase, part), value in sorted(by_part.items()):
            print(f"  {ms(value):8.1f} ms  {phase:4s} {part}")
        print(f"  top {args.top} instructions (by source):")
        for (op_kind, source), value in by_op.most_common(args.top):
            print(f"  {ms(value):8.1f} ms  {op_kind:18s} {source[:110]}")
        print("  HLO: " + ", ".join(f"{key}: {value}" for key, value in
                                    sorted(dtype_counts.items())))


if __name__ == "__main__":
    main()
