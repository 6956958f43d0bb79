"""`albert-jax predict` throughput beside HuggingFace's text-classification pipeline (PyTorch, CPU)
on the same exported model: rows/s, peak memory, and that both give the same labels.

  nice -n 10 .venv/bin/python benchmarks/bench_predict.py [--rows=100000] [--round_rows=10000]
      [--rounds=5] [--workdir=W] [--hf_batch_sizes=8,32,64,128] [--json]
  nice -n 10 .venv/bin/python benchmarks/bench_predict.py --commands --model=albert-base-v2 \
      --rows=1000 [--rounds=3] [--workdir=W]

With --commands, the comparison is of whole commands instead (6. below).

1. The model: a fine-tuned classification workdir of the `demo` preset (E64 H128 L4), trained
   from scratch for `--train_steps` steps (throughput does not depend on quality) by
   `albert-jax finetune --config=configs/custom.py:kind=classification` on pairs of real
   sentences (label: whether the second holds the word "the"), with a SentencePiece model of
   the demo corpus and `data.comma_rule=hf`, so
   both sides cut the same pieces (SPEC 2.3). `--workdir=W` reuses W (or makes the run there).
   Exported by `albert-jax convert --from=orbax --to=huggingface` (AlbertForSequenceClassification
   + spiece.model).
2. The data: a CSV of `--rows` pairs (id, text, text_b) of demo-corpus sentences of 4..40 words.
   Sentences holding `` or '' are left out: HuggingFace's AlbertTokenizer rewrites them to ",
   the reference's preprocessing (and ours, SPEC 2.2) does not, so the token ids would differ.
3. Rounds, in this one process, interleaved (ours, HF, ours, HF ...) on the same first
   `--round_rows` rows of the file, after one untimed warm-up pass each: ours is the predict
   path of `albert_jax.finetune.run` (`load_finished_run`, then per chunk of PREDICT_CHUNK_ROWS
   rows the task's `read_inputs`, `FinishedRun.prediction_records` (the chunk's rows shortest
   first, back in input order, at predict's lengths) and json.dumps of each record); HF is
   `transformers.pipeline("text-classification", tokenizer=AlbertTokenizer(spiece.model),
   device=-1, batch_size=B, top_k=None)` on the rows
   read by csv.DictReader in the same chunks, with the same records and json.dumps. The table
   gives the median over rounds of each side's rows/s and of the per-round ratio. HF's batch
   size is the fastest of `--hf_batch_sizes` on a short probe before the rounds.
4. The headline: one full pass over all `--rows` rows per side, each in a subprocess of its
   own: ours is `albert_jax.finetune.run.predict` itself (what `albert-jax predict` runs:
   checkpoint load and compile included), HF builds its pipeline and writes the same JSON
   lines. Peak memory: the subprocess's resident high-water mark (VmHWM of /proc/self/status,
   which counts XLA's and torch's own allocations, unlike tracemalloc) at the end, and its
   delta over the resident size after the imports, before the model is loaded.
6. --commands: `albert-jax predict --workdir=W --input=rows.csv --output=...` against a script
   that imports transformers, builds the same pipeline (batch size: the first of
   `--hf_batch_sizes`) and writes the same lines, each a fresh process timed from outside
   (start-up, imports, load and compile included), interleaved ours, HF, ours, HF ... for
   `--rounds` rounds; medians of each side and of the per-round ratio. Ours runs with its
   persistent compilation cache in a folder of its own that starts empty, so the first round
   compiles (shown apart) and the later ones load the compiled programs, as a user's second
   predict does.
5. Agreement: the two full passes' output files, row by row: the same predicted label on more
   than 99.9% of the rows (else the exit status is 1), the largest difference of a probability
   (the tight check: a few steps from scratch may leave a model that predicts mostly one
   class, so the table gives the share of each predicted label too).
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
# Only what imports neither jax nor torch at the top: the HF subprocess's memory has no jax in it.
from albert_jax.train import workdir as workdir_names  # noqa: E402

LABELS = ("no", "yes")
MIN_LABEL_AGREEMENT = 0.999


# --- The model and the data ---------------------------------------------------------------------

def _sentences() -> list[str]:
    """Demo-corpus sentences of 4..40 words, without the `` '' quotes HuggingFace rewrites."""
    from albert_jax.finetune.demo import demo_sentences

    return [sentence for sentence in demo_sentences(min_words=4, max_words=40)
            if "``" not in sentence and "''" not in sentence]


def pair_rows(count: int, seed: int) -> Iterator[dict[str, str]]:
    """`count` rows {id, text, text_b, label} of two random sentences; the label says whether
    text_b holds the word "the" (58% of the sentences)."""
    sentences = _sentences()
    rng = random.Random(seed)
    for index in range(count):
        text, text_b = rng.choice(sentences), rng.choice(sentences)
        label = LABELS[1] if "the" in text_b.lower().split() else LABELS[0]
        yield {"id": f"row-{index}", "text": text, "text_b": text_b, "label": label}


def write_csv(path: str, rows: Iterator[dict[str, str]], columns: tuple[str, ...]) -> str:
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _cli(*args: str) -> None:
    command = [sys.executable, "-m", "albert_jax.cli", *args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")


def make_run(workdir: str, train_steps: int, model: str = "demo") -> None:
    """A fine-tuned classification run of the `model` preset (its vocabulary the demo corpus's
    4,000 pieces) in `workdir`, from scratch on pairs of the demo corpus (module docstring,
    1)."""
    from albert_jax.data import tokenizers as tokenizer_lib
    from albert_jax.finetune.demo import demo_sentences

    data = f"{workdir}-data"
    os.makedirs(data, exist_ok=True)
    spm = tokenizer_lib.train(demo_sentences(min_words=1, max_words=200),
                              os.path.join(data, "spm.model"), vocab_size=4000)  # demo preset
    train = write_csv(os.path.join(data, "train.csv"), pair_rows(4000, seed=1),
                      ("id", "text", "text_b", "label"))
    dev = write_csv(os.path.join(data, "dev.csv"), pair_rows(256, seed=2),
                    ("id", "text", "text_b", "label"))
    every = str(max(train_steps // 2, 1))
    _cli("finetune", "--config=configs/custom.py:kind=classification", f"--config.model={model}",
         "--config.model_overrides.vocab_size=4000",
         f"--config.tokenizer={spm}", "--config.data.comma_rule=hf",
         f"--config.data.train_file={train}", f"--config.data.dev_file={dev}",
         "--config.data.text_b=text_b", "--config.data.id=id", "--config.seq_len=128",
         f"--config.total_steps={train_steps}", f"--config.optim.warmup_steps={every}",
         "--config.optim.lr=1e-3", f"--config.eval_every_steps={every}",
         f"--config.checkpoint_every_steps={every}", f"--config.log_every_steps={every}",
         f"--workdir={workdir}")


# --- The two sides ------------------------------------------------------------------------------

def finetune_run() -> Any:
    """albert_jax.finetune.run, imported when first needed (it imports jax)."""
    from albert_jax.finetune import run

    return run


def _json_lines(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(record, ensure_ascii=False) + "\n" for record in records]


class Ours:
    """The predict path of albert_jax.finetune.run on a loaded workdir."""

    def __init__(self, workdir: str):
        self.run = finetune_run().load_finished_run(workdir)

    def lines(self, input_path: str) -> Iterator[str]:
        for examples in self.run.task.read_inputs(input_path, finetune_run().PREDICT_CHUNK_ROWS):
            yield from _json_lines(self.run.prediction_records(examples))


class HuggingFace:
    """transformers' text-classification pipeline (PyTorch; `device` -1: the CPU, 0: the first
    GPU) on the exported model, with AlbertTokenizer on its spiece.model; the same records as
    ours."""

    def __init__(self, model_dir: str, batch_size: int, seq_len: int, chunk_rows: int,
                 device: int = -1):
        import transformers

        transformers.logging.set_verbosity_error()  # a truncation notice on every chunk
        tokenizer = transformers.AlbertTokenizer(
            os.path.join(model_dir, workdir_names.TOKENIZER_FILE))
        self.pipeline = transformers.pipeline("text-classification", model=model_dir,
                                              tokenizer=tokenizer, device=device,
                                              batch_size=batch_size)
        self.seq_len = seq_len
        self.chunk_rows = chunk_rows

    def lines(self, input_path: str) -> Iterator[str]:
        with open(input_path, encoding="utf-8", newline="") as file:
            reader = csv.DictReader(file)
            while chunk := list(itertools.islice(reader, self.chunk_rows)):
                outputs = self.pipeline(
                    [{"text": row["text"], "text_pair": row["text_b"]} for row in chunk],
                    top_k=None, truncation=True, max_length=self.seq_len)
                yield from _json_lines([
                    {"id": row["id"], "prediction": scores[0]["label"],  # sorted by score
                     "probabilities": {score["label"]: score["score"] for score in scores}}
                    for row, scores in zip(chunk, outputs)])


def _rows_per_second(side: Any, input_path: str) -> float:
    started = time.perf_counter()
    rows = sum(1 for _ in side.lines(input_path))
    return rows / (time.perf_counter() - started)


def _memory_mib(field: str) -> float:
    """VmRSS (resident now) or VmHWM (the resident high-water mark) of this process, MiB.

    Not getrusage's ru_maxrss: Linux carries the parent's high-water mark across fork and exec
    into it, so a child of a big parent reports the parent's peak."""
    with open("/proc/self/status") as file:
        kib = next(line.split()[1] for line in file if line.startswith(f"{field}:"))
    return int(kib) / 1024


def full_pass(side: str, args: argparse.Namespace, input_path: str, output: str) -> dict[str, Any]:
    """One side on the whole file in a subprocess of its own (`_full_pass_child`): seconds from
    loading the model to the last line written, peak RSS and its delta over the imports."""
    result_path = f"{output}.result.json"
    command = [sys.executable, os.path.abspath(__file__), f"--_side={side}",
               f"--_input={input_path}", f"--_output={output}", f"--_result={result_path}",
               f"--workdir={args.workdir}", f"--_hf_model={args._hf_model}",
               f"--_hf_batch_size={args._hf_batch_size}", f"--_seq_len={args._seq_len}",
               f"--_chunk_rows={args._chunk_rows}"]
    process = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if process.returncode != 0:
        raise RuntimeError(f"the {side} full pass failed:\n{process.stderr[-3000:]}")
    with open(result_path) as file:
        return json.load(file)


def _full_pass_child(args: argparse.Namespace) -> None:
    if args._side == "hf":
        import torch  # noqa: F401  (imports before the baseline, as jax is for ours)
        import transformers  # noqa: F401
    else:
        finetune_run()  # jax, before the baseline
    baseline = _memory_mib("VmRSS")
    started = time.perf_counter()
    if args._side == "ours":
        finetune_run().predict(args.workdir, args._input, args._output)
    else:
        side = HuggingFace(args._hf_model, args._hf_batch_size, args._seq_len, args._chunk_rows)
        with open(args._output, "w", encoding="utf-8") as file:
            file.writelines(side.lines(args._input))
    seconds = time.perf_counter() - started
    with open(args._output, encoding="utf-8") as file:
        rows = sum(1 for _ in file)
    peak = _memory_mib("VmHWM")
    with open(args._result, "w") as file:
        json.dump({"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
                   "peak_rss_mib": peak, "baseline_rss_mib": baseline,
                   "peak_delta_mib": peak - baseline}, file)


def agreement(ours_path: str, hf_path: str) -> dict[str, Any]:
    """Row-by-row comparison of two prediction files of the same input."""
    rows = same_label = 0
    max_difference = 0.0
    predicted: dict[str, int] = {}
    with open(ours_path, encoding="utf-8") as ours, open(hf_path, encoding="utf-8") as hf:
        for ours_line, hf_line in zip(ours, hf, strict=True):
            mine, theirs = json.loads(ours_line), json.loads(hf_line)
            if mine["id"] != theirs["id"]:
                raise RuntimeError(f"row {rows}: ids {mine['id']!r} and {theirs['id']!r} differ")
            rows += 1
            same_label += mine["prediction"] == theirs["prediction"]
            predicted[mine["prediction"]] = predicted.get(mine["prediction"], 0) + 1
            max_difference = max(max_difference, *(
                abs(p - theirs["probabilities"][label])
                for label, p in mine["probabilities"].items()))
    return {"rows": rows, "label_agreement": same_label / rows,
            "max_probability_difference": max_difference,
            "our_label_shares": {label: count / rows for label, count in sorted(predicted.items())}}


# --- The benchmark ------------------------------------------------------------------------------

def _interleaved_rounds(sides: dict[str, Any], input_path: str, rounds: int
                        ) -> dict[str, list[float]]:
    """rows/s of each side on `input_path`, side after side in each of `rounds` rounds."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for round_index in range(rounds):
        for name, side in sides.items():
            rates[name].append(_rows_per_second(side, input_path))
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{name} {values[-1]:.0f} rows/s" for name, values in rates.items()),
            file=sys.stderr, flush=True)
    return rates


def _machine() -> dict[str, Any]:
    import jax
    import torch
    import transformers

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": os.getloadavg(),
            "jax": jax.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "transformers": transformers.__version__,
            "python": platform.python_version()}


def prepare_models(workdir: str, scratch: str, train_steps: int, model: str = "demo"
                   ) -> dict[str, Any]:
    """The fine-tuned run in `workdir` (made there if absent, module docstring 1) and its
    HuggingFace export in `scratch`/hf: {hf_model, seq_len, eval_batch_size, chunk_rows}."""
    if not os.path.exists(os.path.join(workdir, workdir_names.CONFIG_FILE)):
        print(f"fine-tuning the {model} model in {workdir} ...", file=sys.stderr, flush=True)
        make_run(workdir, train_steps, model)
    hf_model = os.path.join(scratch, "hf")
    _cli("convert", "--from=orbax", f"--path={workdir}", "--to=huggingface",
         f"--output={hf_model}")
    with open(os.path.join(workdir, workdir_names.CONFIG_FILE)) as file:
        saved_config = json.load(file)
    return {"hf_model": hf_model, "seq_len": saved_config["seq_len"],
            "eval_batch_size": saved_config["eval_batch_size"],
            "chunk_rows": finetune_run().PREDICT_CHUNK_ROWS}


def compare_rounds(workdir: str, models: dict[str, Any], round_input: str, probe_input: str,
                   rounds: int, hf_batch_sizes: list[int], hf_device: int = -1) -> dict[str, Any]:
    """Module docstring 3: ours (the predict path on `workdir`) and HF's pipeline at the fastest
    of `hf_batch_sizes` on `probe_input`, interleaved for `rounds` rounds on `round_input`."""
    ours = Ours(workdir)
    _rows_per_second(ours, probe_input)  # warm-up: compiles the length buckets
    probe = {}
    for batch_size in hf_batch_sizes:
        side = HuggingFace(models["hf_model"], batch_size, models["seq_len"],
                           models["chunk_rows"], hf_device)
        if not probe:
            _rows_per_second(side, probe_input)  # warm-up: torch's first allocations
        probe[batch_size] = _rows_per_second(side, probe_input)
        print(f"HF batch size {batch_size}: {probe[batch_size]:.0f} rows/s", file=sys.stderr,
              flush=True)
    hf_batch_size = max(probe, key=probe.get)
    sides = {"ours": ours, "hf": HuggingFace(models["hf_model"], hf_batch_size,
                                             models["seq_len"], models["chunk_rows"], hf_device)}
    rates = _interleaved_rounds(sides, round_input, rounds)
    return {
        "hf_batch_size": hf_batch_size,
        "hf_batch_probe": {str(size): rate for size, rate in probe.items()},
        "rounds_rows_per_s": {side: statistics.median(values) for side, values in rates.items()},
        "rounds_all": rates,
        "ratio_ours_over_hf": statistics.median(
            mine / theirs for mine, theirs in zip(rates["ours"], rates["hf"])),
    }


def benchmark(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    started = time.perf_counter()
    models = prepare_models(args.workdir, scratch, args.train_steps)
    args._hf_model, args._seq_len = models["hf_model"], models["seq_len"]
    args._chunk_rows = models["chunk_rows"]
    columns = ("id", "text", "text_b")
    full_input = write_csv(os.path.join(scratch, "rows.csv"), pair_rows(args.rows, seed=3),
                           columns)
    round_input = write_csv(os.path.join(scratch, "round.csv"),
                            pair_rows(args.round_rows, seed=3), columns)  # the first rows
    probe_input = write_csv(os.path.join(scratch, "probe.csv"),
                            pair_rows(args.probe_rows, seed=4), columns)
    machine_before = _machine()
    compared = compare_rounds(args.workdir, models, round_input, probe_input, args.rounds,
                              args.hf_batch_sizes)
    args._hf_batch_size = compared["hf_batch_size"]
    full = {side: full_pass(side, args, full_input, os.path.join(scratch, f"{side}.jsonl"))
            for side in ("ours", "hf")}
    return {
        "rows": args.rows, "round_rows": args.round_rows, "rounds": args.rounds,
        "seq_len": args._seq_len, "eval_batch_size": models["eval_batch_size"],
        **compared,
        "full": full,
        "agreement": agreement(os.path.join(scratch, "ours.jsonl"),
                               os.path.join(scratch, "hf.jsonl")),
        "machine": machine_before, "load_average_after": os.getloadavg(),
        "total_seconds": time.perf_counter() - started,
    }


def _wall_seconds(command: list[str], environment: dict[str, str]) -> float:
    started = time.perf_counter()
    process = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=environment)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{process.stderr[-3000:]}")
    return time.perf_counter() - started


def whole_commands(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    """Module docstring 6: `albert-jax predict` and HF's pipeline as whole commands."""
    started = time.perf_counter()
    models = prepare_models(args.workdir, scratch, args.train_steps, args.model)
    input_path = write_csv(os.path.join(scratch, "rows.csv"), pair_rows(args.rows, seed=3),
                           ("id", "text", "text_b"))
    environment = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(scratch, "jax_cache"))
    hf_batch_size = args.hf_batch_sizes[0]
    commands = {
        "ours": [sys.executable, "-m", "albert_jax.cli", "predict", f"--workdir={args.workdir}",
                 f"--input={input_path}", f"--output={os.path.join(scratch, 'ours.jsonl')}"],
        "hf": [sys.executable, os.path.abspath(__file__), "--_side=hf", f"--_input={input_path}",
               f"--_output={os.path.join(scratch, 'hf.jsonl')}",
               f"--_result={os.path.join(scratch, 'hf.result.json')}",
               f"--_hf_model={models['hf_model']}", f"--_hf_batch_size={hf_batch_size}",
               f"--_seq_len={models['seq_len']}", f"--_chunk_rows={models['chunk_rows']}"]}
    machine_before = _machine()
    seconds: dict[str, list[float]] = {side: [] for side in commands}
    for round_index in range(args.rounds):
        for side, command in commands.items():
            seconds[side].append(_wall_seconds(command, environment))
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
            f"{side} {values[-1]:.1f} s" for side, values in seconds.items()),
            file=sys.stderr, flush=True)
    return {"rows": args.rows, "rounds": args.rounds, "model": args.model,
            "seq_len": models["seq_len"], "eval_batch_size": models["eval_batch_size"],
            "hf_batch_size": hf_batch_size, "seconds": seconds,
            "median_seconds": {side: statistics.median(values) for side, values in seconds.items()},
            "ratio_hf_over_ours": statistics.median(
                theirs / mine for mine, theirs in zip(seconds["ours"], seconds["hf"])),
            "agreement": agreement(os.path.join(scratch, "ours.jsonl"),
                                   os.path.join(scratch, "hf.jsonl")),
            "machine": machine_before, "load_average_after": os.getloadavg(),
            "total_seconds": time.perf_counter() - started}


def commands_table(result: dict[str, Any]) -> str:
    machine, seconds = result["machine"], result["seconds"]
    median = result["median_seconds"]
    return "\n".join([
        f"predict as whole commands, {result['model']} preset (2 labels), {result['rows']:,} "
        f"pairs of 4..40-word sentences, seq_len {result['seq_len']}, {result['rounds']} "
        "interleaved rounds",
        f"machine: {machine['cpu']}, {machine['cores']} cores, load average "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average'])} before, "
        f"{' '.join(f'{x:.1f}' for x in result['load_average_after'])} after; jax "
        f"{machine['jax']}, torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"transformers {machine['transformers']}",
        f"ours eval_batch_size {result['eval_batch_size']} at length buckets; HF batch size "
        f"{result['hf_batch_size']}",
        "",
        "| | albert-jax predict | HF pipeline script | HF / ours |",
        "|---|---|---|---|",
        f"| seconds per command, median | {median['ours']:.1f} | {median['hf']:.1f} | "
        f"**{result['ratio_hf_over_ours']:.2f}x** (median of per-round ratios) |",
        f"| every round, s | {', '.join(f'{x:.1f}' for x in seconds['ours'])} (the first "
        f"compiles) | {', '.join(f'{x:.1f}' for x in seconds['hf'])} | |",
        "",
        f"agreement of the last round's files: same label "
        f"{100 * result['agreement']['label_agreement']:.3f}%, largest probability difference "
        f"{result['agreement']['max_probability_difference']:.2e}",
        f"total {result['total_seconds']:.0f} s",
    ])


def table(result: dict[str, Any]) -> str:
    machine, full, rounds = result["machine"], result["full"], result["rounds_rows_per_s"]
    lines = [
        f"predict throughput, demo model (E64 H128 L4, 2 labels), pairs of 4..40-word sentences, "
        f"seq_len {result['seq_len']}",
        f"machine: {machine['cpu']}, {machine['cores']} cores, load average "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average'])} before, "
        f"{' '.join(f'{x:.1f}' for x in result['load_average_after'])} after; jax "
        f"{machine['jax']}, torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"transformers {machine['transformers']}",
        f"HF batch size {result['hf_batch_size']} (probe rows/s: " + ", ".join(
            f"{size}: {rate:.0f}" for size, rate in result["hf_batch_probe"].items())
        + f"); ours eval_batch_size {result['eval_batch_size']} at length buckets",
        "",
        "| | ours (albert-jax predict) | HF pipeline (torch CPU) | ours / HF |",
        "|---|---|---|---|",
        f"| rounds: median rows/s ({result['rounds']} interleaved rounds of "
        f"{result['round_rows']:,} rows) | {rounds['ours']:.0f} | {rounds['hf']:.0f} | "
        f"{result['ratio_ours_over_hf']:.2f}x |",
        f"| full pass of {result['rows']:,} rows: rows/s (load + compile included) | "
        f"{full['ours']['rows_per_s']:.0f} ({full['ours']['seconds']:.0f} s) | "
        f"{full['hf']['rows_per_s']:.0f} ({full['hf']['seconds']:.0f} s) | "
        f"{full['ours']['rows_per_s'] / full['hf']['rows_per_s']:.2f}x |",
        f"| full pass: peak RSS, MiB (delta over the imports) | "
        f"{full['ours']['peak_rss_mib']:.0f} (+{full['ours']['peak_delta_mib']:.0f}) | "
        f"{full['hf']['peak_rss_mib']:.0f} (+{full['hf']['peak_delta_mib']:.0f}) | |",
        "",
        f"agreement on the {result['agreement']['rows']:,} rows of the full passes: same label "
        f"{100 * result['agreement']['label_agreement']:.3f}%, largest probability difference "
        f"{result['agreement']['max_probability_difference']:.2e} (our predicted labels: "
        + ", ".join(f"{label} {100 * share:.1f}%"
                    for label, share in result["agreement"]["our_label_shares"].items()) + ")",
        f"total {result['total_seconds']:.0f} s",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the full passes")
    parser.add_argument("--round_rows", type=int, default=10_000, help="rows of each round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--probe_rows", type=int, default=1000,
                        help="rows of the warm-ups and of the HF batch-size probe")
    parser.add_argument("--hf_batch_sizes", default="8,32,64,128",
                        type=lambda text: [int(size) for size in text.split(",")])
    parser.add_argument("--train_steps", type=int, default=40,
                        help="fine-tuning steps of a new run")
    parser.add_argument("--workdir", default="",
                        help="a fine-tuned classification workdir to reuse (made there if absent)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--commands", action="store_true",
                        help="whole commands, interleaved (module docstring 6)")
    parser.add_argument("--model", default="demo",
                        help="the preset of a new run (demo, albert-base-v2)")
    for hidden in ("_side", "_input", "_output", "_result", "_hf_model"):
        parser.add_argument(f"--{hidden}", default="", help=argparse.SUPPRESS)
    for hidden in ("_hf_batch_size", "_seq_len", "_chunk_rows"):
        parser.add_argument(f"--{hidden}", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._side:
        _full_pass_child(args)
        return
    if args.round_rows > args.rows and not args.commands:
        parser.error(f"--round_rows={args.round_rows} exceeds --rows={args.rows}")
    with tempfile.TemporaryDirectory(prefix="bench_predict-") as scratch:
        args.workdir = args.workdir or os.path.join(scratch, "run")
        result = (whole_commands if args.commands else benchmark)(args, scratch)
    print(json.dumps(result, indent=2) if args.json
          else (commands_table if args.commands else table)(result))
    if result["agreement"]["label_agreement"] < MIN_LABEL_AGREEMENT:
        sys.exit(f"the two sides agree on {result['agreement']['label_agreement']:.4%} of the "
                 f"labels, under {MIN_LABEL_AGREEMENT:.1%}: they do not compute the same thing")


if __name__ == "__main__":
    main()
