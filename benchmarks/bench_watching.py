"""What watching a run costs a step with the default report_to=tensorboard.

  python benchmarks/bench_watching.py [--before=/path/to/a/checkout/of/main] [--rounds=3]

1. The host time the loop adds to every step (train/reporting/profiler.py, profile.num_steps=0: a
   StepTraceAnnotation while no trace runs), in microseconds, beside nothing.
2. With --before: tiny fine-tunes (40 steps, logged every 10) of this checkout and of
   `--before`, interleaved `--rounds` times; the median logged steps_per_second of each (the
   first interval, with compilation, left out).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import ml_collections

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune.demo import demo_sentences
from albert_jax.train import reporting

HERE = Path(__file__).resolve().parents[1]
CALLS = 200_000


def _per_call_us(body) -> float:
    start = time.perf_counter()
    for step in range(CALLS):
        body(step)
    return (time.perf_counter() - start) / CALLS * 1e6


def host_overhead() -> list[tuple[str, float]]:
    config = ml_collections.ConfigDict({"profile": {"start_step": 10**9, "num_steps": 0,
                                                    "all_processes": False}})
    profiler = reporting.StepProfiler(config, Path(tempfile.mkdtemp()), start_step=0)

    def nothing(step):
        with contextlib.nullcontext():
            pass

    def profiler_off(step):
        with profiler.annotate(step + 1):
            pass
        profiler.step_done(step + 1, None)

    def annotation(step):
        with jax.profiler.StepTraceAnnotation("train", step_num=step + 1):
            pass
    return [("nothing (a nullcontext)", _per_call_us(nothing)),
            ("StepTraceAnnotation alone, no trace running", _per_call_us(annotation)),
            ("StepProfiler, profile off (the loop now)", _per_call_us(profiler_off))]


def _task(root: Path) -> list[str]:
    spm = tokenizer_lib.train(demo_sentences(), str(root / "spm.model"), vocab_size=200)
    sentences = demo_sentences()
    for name, count in (("train", 64), ("dev", 16)):
        with (root / f"{name}.csv").open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["text", "label"])
            writer.writerows([sentences[(index * 7) % len(sentences)], "abc"[index % 3]]
                             for index in range(count))
    return [f"--config.tokenizer={spm}", f"--config.data.train_file={root / 'train.csv'}",
            f"--config.data.dev_file={root / 'dev.csv'}", "--config.seq_len=32",
            "--config.batch_size=8", "--config.eval_batch_size=8", "--config.total_steps=40",
            "--config.eval_every_steps=40", "--config.checkpoint_every_steps=40",
            "--config.log_every_steps=10"]


def steps_per_second(checkout: Path, flags: list[str], workdir: Path) -> list[float]:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run([sys.executable, "-m", "albert_jax.cli", "finetune",
                    "--config=configs/custom.py:kind=classification,runlocal",
                    f"--workdir={workdir}", *flags], cwd=checkout, env=environment, check=True,
                   capture_output=True)
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [record["steps_per_second"] for record in records
            if "steps_per_second" in record][1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"| per-step host work ({CALLS} calls) | us per step |\n|---|---|")
    for name, value in host_overhead():
        print(f"| {name} | {value:.2f} |")
    if args.before is None:
        return
    root = Path(tempfile.mkdtemp())
    flags = _task(root)
    speeds: dict[str, list[float]] = {"before": [], "this checkout": []}
    for round_index in range(args.rounds):
        order = (("before", args.before), ("this checkout", HERE))
        for name, checkout in order[::1 if round_index % 2 == 0 else -1]:
            speeds[name] += steps_per_second(checkout, flags, root / f"{name}-{round_index}")
    print("\n| tiny fine-tune, report_to=tensorboard | median steps/s | intervals |\n|---|---|---|")
    for name, values in speeds.items():
        print(f"| {name} | {statistics.median(values):.1f} | {len(values)} |")


if __name__ == "__main__":
    main()
