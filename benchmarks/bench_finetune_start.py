"""`albert-jax finetune`'s time to its first step beside HuggingFace's Trainer, as whole commands.

  nice -n 10 .venv/bin/python benchmarks/bench_finetune_start.py [--model=albert-base-v2]
      [--rounds=3] [--rows=1000] [--steps=1] [--length_buckets=LIST ...] [--json]

The same start on both sides: an AlbertForPreTraining of the `--model` preset with fresh
weights (its vocabulary the demo corpus's 4,000 SentencePiece pieces), written by our
HuggingFace export with its spiece.model; `--rows` pairs of demo-corpus sentences
(bench_predict.pair_rows) as train.csv, 64 as dev.csv; seq_len 128, batch 32 (the
`configs/custom.py:kind=classification` defaults), AdamW.
  ours: `albert-jax finetune --config=configs/custom.py:kind=classification
        --config.init_from=<the HF folder> ...` (a new workdir each round);
  HF:   this script with --_hf: AlbertTokenizer on the rows (truncated to 128), the model by
        AlbertForSequenceClassification.from_pretrained, transformers.Trainer (batch 32, AdamW,
        padding per batch, no saving, no reporting; the Trainer needs `accelerate`).
Each is a fresh process, timed from its start to the line that says its `--steps`-th step is
done (ours: the console's `step N/...` line; HF: a TrainerCallback's line at on_step_end), then
stopped; interleaved ours, HF, ours, HF ... for `--rounds` rounds; medians. `--steps=1` is the
time to the first step; more is a whole short run (with each length bucket the steps meet
compiled once). Each `--length_buckets` (repeatable; "" for the config's default) is one
variant of ours in every round (`--config.length_buckets=LIST`). Each variant of ours runs
with its persistent compilation cache in a folder of its own that starts empty, so its first
round compiles (shown apart) and the later ones load the compiled programs, as a user's second
run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_predict  # noqa: E402  (pair_rows, write_csv, _machine)

SEQ_LEN, BATCH_SIZE = 128, 32


def make_start(folder: str, model: str) -> str:
    """The HuggingFace folder both sides start from (module docstring)."""
    import flax.linen as nn
    import jax
    import numpy as np

    from albert_jax.convert import save_huggingface
    from albert_jax.data import tokenizers as tokenizer_lib
    from albert_jax.finetune.demo import demo_sentences
    from albert_jax.model import AlbertForPreTraining, example_inputs, get_config

    config = get_config(model, vocab_size=4000)
    inputs = (*example_inputs((1, 8)), np.zeros((1, 2), np.int32))
    params = AlbertForPreTraining(config).init(jax.random.key(0), *inputs)["params"]
    hf_folder = os.path.join(folder, "start")
    save_huggingface(config, jax.tree.map(np.asarray, nn.unbox(params)), hf_folder)
    tokenizer_lib.train(demo_sentences(min_words=1, max_words=200),
                        os.path.join(hf_folder, "spiece.model"), vocab_size=4000)
    return hf_folder


def _hf_trainer(args: argparse.Namespace) -> None:
    """The HF side (a process of its own): tokenise, load, train until killed."""
    import csv

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    tokenizer = transformers.AlbertTokenizer(os.path.join(args._start, "spiece.model"))
    with open(args._train, encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    labels = sorted({row["label"] for row in rows})
    encoded = tokenizer([row["text"] for row in rows], [row["text_b"] for row in rows],
                        truncation=True, max_length=SEQ_LEN)
    dataset = [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
                "labels": labels.index(row["label"])}
               for ids, types, mask, row in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                encoded["attention_mask"], rows)]
    model = transformers.AlbertForSequenceClassification.from_pretrained(
        args._start, num_labels=len(labels))

    class StepDone(transformers.TrainerCallback):
        def on_step_end(self, unused_args: Any, state: Any, *unused: Any, **unused_too: Any
                        ) -> None:
            print(f"step {state.global_step} done", flush=True)

    training = transformers.TrainingArguments(
        output_dir=args._output, per_device_train_batch_size=BATCH_SIZE, max_steps=100,
        learning_rate=3e-5, save_strategy="no", report_to=[], logging_steps=1000,
        use_cpu=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=training, train_dataset=dataset,
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer),
                                   callbacks=[StepDone()])
    torch.manual_seed(0)
    trainer.train()


def seconds_to_step(command: list[str], environment: dict[str, str], step: int) -> float:
    """From starting `command` to the line saying its `step`-th step is done (ours: the
    console's `step N/...`; HF: `step N done`); the process is then stopped."""
    step_done = re.compile(rf"^\s*step\s+{step}(/| done)")
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output = []
    for line in process.stdout:
        output.append(line)
        if step_done.search(line):
            seconds = time.perf_counter() - started
            process.kill()
            process.wait()
            return seconds
    process.wait()
    raise RuntimeError(f"{' '.join(command)} ended (status {process.returncode}) before its "
                       f"step {step}:\n{''.join(output)[-3000:]}")


def _variant_name(length_buckets: str) -> str:
    return f"ours {length_buckets}" if length_buckets else "ours"


def benchmark(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    started = time.perf_counter()
    start = make_start(scratch, args.model)
    columns = ("id", "text", "text_b", "label")
    train = bench_predict.write_csv(os.path.join(scratch, "train.csv"),
                                    bench_predict.pair_rows(args.rows, seed=1), columns)
    dev = bench_predict.write_csv(os.path.join(scratch, "dev.csv"),
                                  bench_predict.pair_rows(64, seed=2), columns)
    variants = args.length_buckets or [""]
    environments = [dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(
        scratch, f"jax_cache-{variant_index}")) for variant_index in range(len(variants))]
    seconds: dict[str, list[float]] = {_variant_name(variant): [] for variant in variants}
    seconds["hf"] = []
    loads: list[float] = []
    machine = bench_predict._machine()
    for round_index in range(args.rounds):
        for variant_index, variant in enumerate(variants):
            workdir = os.path.join(scratch, f"ours-{round_index}-{variant_index}")
            ours = [sys.executable, "-m", "albert_jax.cli", "finetune",
                    "--config=configs/custom.py:kind=classification",
                    f"--config.init_from={start}",
                    f"--config.data.train_file={train}", f"--config.data.dev_file={dev}",
                    "--config.data.text_b=text_b", "--config.data.id=id",
                    "--config.data.comma_rule=hf", f"--config.seq_len={SEQ_LEN}",
                    f"--config.batch_size={BATCH_SIZE}", "--config.log_every_steps=1",
                    "--config.report_to=none", f"--workdir={workdir}",
                    *([f"--config.length_buckets={variant}"] if variant else [])]
            seconds[_variant_name(variant)].append(
                seconds_to_step(ours, environments[variant_index], args.steps))
        hf = [sys.executable, os.path.abspath(__file__), "--_hf", f"--_start={start}",
              f"--_train={train}", f"--_output={os.path.join(scratch, f'hf-{round_index}')}"]
        seconds["hf"].append(seconds_to_step(hf, dict(os.environ), args.steps))
        loads.append(os.getloadavg()[0])
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
            f"{side} {values[-1]:.1f} s" for side, values in seconds.items())
            + f" (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
    return {"model": args.model, "rows": args.rows, "rounds": args.rounds, "steps": args.steps,
            "seconds": seconds, "load_after_each_round": loads,
            "median_seconds": {side: statistics.median(values) for side, values in seconds.items()},
            "ratio_hf_over_ours": {
                side: statistics.median(theirs / mine
                                        for mine, theirs in zip(values, seconds["hf"]))
                for side, values in seconds.items() if side != "hf"},
            "machine": machine, "load_average_after": os.getloadavg(),
            "total_seconds": time.perf_counter() - started}


def table(result: dict[str, Any]) -> str:
    machine, seconds, median = result["machine"], result["seconds"], result["median_seconds"]
    until = "the first step" if result["steps"] == 1 else f"step {result['steps']}"
    lines = [
        f"time to {until} of fine-tuning as whole commands, {result['model']} preset, "
        f"{result['rows']:,} training pairs, seq_len {SEQ_LEN}, batch {BATCH_SIZE}, "
        f"{result['rounds']} interleaved rounds",
        f"machine: {machine['cpu']}, {machine['cores']} cores, load average "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average'])} before, "
        f"{' '.join(f'{x:.1f}' for x in result['load_average_after'])} after, "
        f"{', '.join(f'{x:.1f}' for x in result['load_after_each_round'])} after each round; "
        f"jax {machine['jax']}, torch {machine['torch']}, transformers {machine['transformers']}",
        "",
        f"| | seconds to {until}, median | every round, s (ours' first compiles) | HF / ours |",
        "|---|---|---|---|",
    ]
    for side, values in seconds.items():
        ratio = ("" if side == "hf" else
                 f"**{result['ratio_hf_over_ours'][side]:.2f}x** (median of per-round ratios)")
        name = "HF Trainer script" if side == "hf" else side.replace("ours", "albert-jax finetune")
        lines.append(f"| {name} | {median[side]:.1f} | {', '.join(f'{x:.1f}' for x in values)} | "
                     f"{ratio} |")
    lines.append(f"total {result['total_seconds']:.0f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="albert-base-v2", help="the preset of the start")
    parser.add_argument("--rows", type=int, default=1000, help="training pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1,
                        help="time to this step (1: the first step; more: a short run)")
    parser.add_argument("--length_buckets", action="append", default=[],
                        help="a variant of ours with --config.length_buckets=THIS (repeatable; "
                             "\"\": the config's default)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--_hf", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("_start", "_train", "_output"):
        parser.add_argument(f"--{hidden}", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._hf:
        _hf_trainer(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench_finetune_start-") as scratch:
        result = benchmark(args, scratch)
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()
