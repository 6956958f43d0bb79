"""ALBERT served on a CPU: file size, batch-1 and batch-32 latency at length 128 and the dev
metric of our predict (JAX), our ONNX exports (plain, fused, int8), HuggingFace's torch model
and HuggingFace's two int8 paths, on one albert-base-shaped fine-tuned classifier.

  nice -n 10 .venv/bin/python benchmarks/bench_onnx_int8.py [--workdir=W] [--train_steps=150]
      [--rounds=5] [--threads=2] [--json]

1. The run: albert-base-v2's shape (E128, H768, 12 heads, 12 uses of the shared layer) with the
   demo corpus's 4,000-piece vocabulary, fine-tuned from scratch (no pretraining) by
   `albert-jax finetune --config=configs/custom.py:kind=classification` for `--train_steps`
   steps: seq_len 64, batch 32, lr 1e-4 with a fifth of the steps as warmup, no dropout in the
   encoder (the config's default). The task: pairs of demo sentences of 4..16 words, labelled by
   whether the second holds the word "the" (about half do); 8,000 training pairs, and 1,000 dev
   pairs drawn from 1,000 sentences the training pairs never use. Easy on purpose: a short CPU
   fine-tune of this depth must learn it for the dev metric to test int8 (150 steps: dev 0.993
   from step 50 on; 100 steps, warmup 20, never left one class); `--workdir=W` reuses W.
2. The files, all made by the command line or from its files: `albert-jax export
   --format=onnx --optimize=none` (the graph torch.onnx traces: HuggingFace's ALBERT under the
   TorchScript exporter, opset 17), `--format=onnx` (fused for ONNX Runtime), `--format=onnx
   --quantize=int8` (whose export prints the cost this table checks); HuggingFace's two int8
   paths start from the plain file: ONNX Runtime's `quantize_dynamic` as documented (int8
   weights), and the transformer optimizer (model_type bert) then `quantize_dynamic` (with
   `DefaultTensorType`, without which it fails on the fused nodes).
3. Latency: one process, ONNX Runtime and torch on `--threads` threads (JAX's XLA on the
   machine's cores), rounds interleaved (every system once per round, batch 1 then batch 32,
   after one untimed warm-up call each), random ids at length 128, no padding; the table gives
   the median over rounds (batch 1: the mean of 10 calls in a round).
4. Dev metric: the run's dev split through the evaluate path (`quantization_cost.dev_score`,
   the task's own batches, predictions and metric) with each system as the model; ours (JAX) is
   `FinishedRun.predict` itself. Agreement: the share of dev predictions equal to our fused
   float32 graph's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench_predict import LABELS, _cli, _sentences, write_csv  # noqa: E402

SEQ_LEN = 128
BATCH_1_CALLS = 10
DEV_ROWS = 1000
MAX_WORDS = 16  # a pair of such sentences fits the run's seq_len 64 but for about 0.2% of pairs


def the_rows(sentences: list[str], count: int, seed: int) -> Iterator[dict[str, str]]:
    """`count` rows {id, text, text_b, label} of two sentences drawn from `sentences`; the label
    says whether text_b holds the word "the" (any case, punctuation aside), as bench_predict's
    pair_rows but read off word characters, so "the," and "(the" count as the word does."""
    rng = random.Random(seed)
    for index in range(count):
        text, text_b = rng.choice(sentences), rng.choice(sentences)
        label = LABELS[1] if "the" in re.findall(r"\w+", text_b.lower()) else LABELS[0]
        yield {"id": f"row-{index}", "text": text, "text_b": text_b, "label": label}


def make_run(workdir: str, train_steps: int) -> None:
    """The fine-tuned albert-base-shaped classifier of the module docstring (1.)."""
    from albert_jax.data import tokenizers as tokenizer_lib
    from albert_jax.finetune.demo import demo_sentences

    data = f"{workdir}-data"
    os.makedirs(data, exist_ok=True)
    spm = tokenizer_lib.train(demo_sentences(min_words=1, max_words=200),
                              os.path.join(data, "spm.model"), vocab_size=4000)
    # Dev pairs come from sentences the training rows never hold, so a dev score is not recall.
    sentences = [sentence for sentence in _sentences() if len(sentence.split()) <= MAX_WORDS]
    columns = ("id", "text", "text_b", "label")
    train = write_csv(os.path.join(data, "train.csv"),
                      the_rows(sentences[DEV_ROWS:], 8000, seed=1), columns)
    dev = write_csv(os.path.join(data, "dev.csv"), the_rows(sentences[:DEV_ROWS], DEV_ROWS, seed=2),
                    columns)
    # lr 1e-4 with a fifth of the steps as warmup: at 3e-4 (and batch 16) the 12-deep shared
    # layer from scratch gave every dev row one class, and so did 100 steps (warmup 20), the
    # rate decaying before the jump out of one class came; dropout is already 0
    # (configs/custom.py). Dev is scored at thirds of the run and the best checkpoint kept.
    every = max(train_steps // 3, 1)
    _cli("finetune", "--config=configs/custom.py:kind=classification",
         "--config.model=albert-base-v2", "--config.model_overrides.vocab_size=4000",
         f"--config.tokenizer={spm}", "--config.data.comma_rule=hf",
         f"--config.data.train_file={train}", f"--config.data.dev_file={dev}",
         "--config.data.text_b=text_b", "--config.data.id=id", "--config.seq_len=64",
         "--config.batch_size=32", f"--config.total_steps={train_steps}",
         f"--config.optim.warmup_steps={max(train_steps // 5, 1)}", "--config.optim.lr=1e-4",
         f"--config.eval_every_steps={every}", f"--config.checkpoint_every_steps={every}",
         f"--config.log_every_steps={max(train_steps // 4, 1)}", f"--workdir={workdir}")


def export_files(workdir: str, folder: str) -> dict[str, str]:
    """{system: model file} of our three exports and HuggingFace's two int8 paths (2.)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    paths = {}
    for name, flags in (("ours ONNX fp32 (plain)", ["--optimize=none"]),
                        ("ours ONNX fp32 (fused)", []),
                        ("ours ONNX int8", ["--quantize=int8"])):
        output = os.path.join(folder, name.split("(")[-1].strip(")").replace(" ", "_"))
        _cli("export", f"--workdir={workdir}", "--format=onnx", *flags, f"--output={output}")
        paths[name] = os.path.join(output, "model.onnx")
    plain = paths["ours ONNX fp32 (plain)"]
    paths["HF torch.onnx -> quantize_dynamic"] = os.path.join(folder, "hf_int8.onnx")
    quantize_dynamic(plain, paths["HF torch.onnx -> quantize_dynamic"],
                     weight_type=QuantType.QInt8)
    optimized = os.path.join(folder, "hf_optimized.onnx")
    optimizer.optimize_model(plain, model_type="bert", num_heads=12,
                             hidden_size=768).save_model_to_file(optimized)
    paths["HF torch.onnx -> ORT optimizer -> quantize_dynamic"] = os.path.join(
        folder, "hf_optimized_int8.onnx")
    quantize_dynamic(optimized, paths["HF torch.onnx -> ORT optimizer -> quantize_dynamic"],
                     weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    paths["HF torch.onnx -> ORT optimizer (fp32)"] = optimized
    return paths


class TorchSession:
    """HuggingFace's torch model behind ONNX Runtime's `run(None, feeds)`."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def run(self, _: Any, feeds: dict[str, Any]) -> list[Any]:
        import numpy as np
        import torch

        with torch.no_grad():  # np.array: a writable copy, which torch.from_numpy wants
            outputs = self.model(*(torch.from_numpy(np.array(feeds[name]))
                                   for name in ("input_ids", "input_mask", "segment_ids")))
        return [output.numpy() for output in outputs]


class JaxSession:
    """Our model's forward, jitted (what predict's eval step runs), as `run(None, feeds)`."""

    def __init__(self, served: Any) -> None:
        import jax

        self.apply = jax.jit(served.apply)

    def run(self, _: Any, feeds: dict[str, Any]) -> list[Any]:
        import numpy as np

        outputs = self.apply(feeds["input_ids"], feeds["input_mask"], feeds["segment_ids"])
        return [np.asarray(output) for output in outputs]


def _feeds(batch: int, vocab_size: int, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(5, vocab_size, (batch, SEQ_LEN)).astype(np.int32),
            "input_mask": np.ones((batch, SEQ_LEN), np.int32),
            "segment_ids": (np.arange(SEQ_LEN) >= SEQ_LEN // 2).astype(np.int32)[None]
            .repeat(batch, 0)}


def _seconds(call: Callable[[], Any], times: int) -> float:
    started = time.perf_counter()
    for _ in range(times):
        call()
    return (time.perf_counter() - started) / times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--train_steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import jax
    import numpy as np
    import onnxruntime
    import torch

    from albert_jax.convert import quantization_cost, serving
    from albert_jax.finetune import run as finetune_run

    torch.set_num_threads(args.threads)
    folder = tempfile.mkdtemp(prefix="bench_onnx_int8-")
    workdir = args.workdir or os.path.join(folder, "run")
    started = time.perf_counter()
    if not os.path.exists(os.path.join(workdir, "best.json")):
        make_run(workdir, args.train_steps)
    train_seconds = time.perf_counter() - started
    paths = export_files(workdir, folder)
    signature = json.load(open(os.path.join(os.path.dirname(paths["ours ONNX int8"]),
                                            serving.SIGNATURE_FILE)))

    run = finetune_run.load_finished_run(workdir)
    task = run.task
    served = serving.ServedModel(task.model_config, task.model,
                                 jax.tree.map(np.asarray, run.params), task.huggingface_head(), {},
                                 task.tokenizer.settings)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions: dict[str, Any] = {"ours predict (JAX)": JaxSession(served),
                                "HF torch": TorchSession(serving.huggingface_model(served))}
    for name, path in paths.items():
        sessions[name] = onnxruntime.InferenceSession(path, options,
                                                      providers=["CPUExecutionProvider"])
    sizes = {name: os.path.getsize(path) / 2**20 for name, path in paths.items()}
    weights = sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(run.params)) / 2**20

    # Dev metric and agreement with our fused float32 graph (4.).
    scores, predictions = {}, {}
    split, metric = task.selection.split, task.selection.metric
    sums, jax_predictions = run.predict(task.eval_batches(split))
    scores["ours predict (JAX)"] = task.eval_metrics(split, sums, jax_predictions)[metric]
    predictions["ours predict (JAX)"] = [
        record["prediction"] for record in task.split_records(split, jax_predictions)]
    for name, session in sessions.items():
        if name != "ours predict (JAX)":
            scores[name], predictions[name] = quantization_cost.dev_score(run, session)
    reference = predictions["ours ONNX fp32 (fused)"]
    agreement = {name: float(np.mean([a == b for a, b in zip(values, reference)]))
                 for name, values in predictions.items()}

    # Latency, interleaved rounds (3.).
    inputs = {batch: _feeds(batch, task.model_config.vocab_size, batch) for batch in (1, 32)}
    for session in sessions.values():
        for feeds in inputs.values():
            session.run(None, feeds)  # warm-up (JAX compiles)
    latency: dict[str, dict[int, list[float]]] = {name: {1: [], 32: []} for name in sessions}
    for _ in range(args.rounds):
        for name, session in sessions.items():
            latency[name][1].append(_seconds(lambda s=session: s.run(None, inputs[1]),
                                             BATCH_1_CALLS))
            latency[name][32].append(_seconds(lambda s=session: s.run(None, inputs[32]), 1))
    medians = {name: {batch: 1000 * statistics.median(values) for batch, values in by.items()}
               for name, by in latency.items()}

    rows = []
    for name in sessions:
        rows.append({"system": name, "file_mib": sizes.get(name), "batch1_ms": medians[name][1],
                     "batch32_ms": medians[name][32], metric: scores[name],
                     "agreement_with_fused_fp32": agreement[name]})
    record = {"rows": rows, "weights_mib": weights, "metric": metric,
              "dev_rows": len(reference), "train_steps": args.train_steps,
              "train_seconds": round(train_seconds), "threads": args.threads,
              "rounds": args.rounds, "export_reported": signature["quantized"],
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "onnxruntime": onnxruntime.__version__, "torch": torch.__version__}
    if args.json:
        print(json.dumps(record, indent=2))
        return
    print(f"float32 weights: {weights:.1f} MiB; dev: {len(reference)} rows; "
          f"{args.threads} threads; {args.rounds} rounds")
    print(f"| system | file MiB | batch 1 ms | batch 32 ms | dev {metric} | agrees with fused "
          "fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        size = "" if row["file_mib"] is None else f"{row['file_mib']:.1f}"
        print(f"| {row['system']} | {size} | {row['batch1_ms']:.1f} | {row['batch32_ms']:.0f} | "
              f"{row[metric]:.4f} | {100 * row['agreement_with_fused_fp32']:.1f}% |")
    print(f"export's own report: {json.dumps(signature['quantized'])}")


if __name__ == "__main__":
    main()
