"""Can the grain pipeline feed ALBERT-base pretraining? Streaming vs consumption, seq 512.

  python benchmarks/bench_pipeline.py [--batch=64] [--model_batch=8] [--vocab_size=5000]
  python benchmarks/bench_pipeline.py --bucket_copy [--rounds=7] [--stream_batches=20]

Builds a small dataset from the demo corpus in a temp dir (tokenizer trained on it, seq 512,
dupe_factor 2), times `pipeline.make_iterator` batches of 64 with static and dynamic masking
(in the main process with its read threads, and with grain worker processes), and times a
jitted forward+backward step of `AlbertForPreTraining(albert-base-v2)` with the MLM + SOP loss
(SPEC 5.3-5.5) on whatever JAX runs on here. On CPU the step is measured at --model_batch and
scaled linearly to --batch (the table says so). Prints a table with the ratio streaming /
consumption (>1: the pipeline keeps up), also against SPEC 12.6's derived ALBERT-base rate on
one H100 (a planning bar, not a measurement).

--bucket_copy: does reading from a host's copy of shards in a bucket (data.dir=gs://...,
data/input/shard_copy.py mode (b)) stream as fast as reading the same shards built locally? The same
dataset (4 shards a split) is uploaded to the Cloud Storage emulator of the tests
(tests/storage_emulator.py, on this machine: its copy speed says nothing of GCS's), copied
once by host 0 (of 1, and of 2), then host 0's batches are timed from the local build (the
global stream) and from the copies (of 2 hosts: the host's own stream), in interleaved rounds;
prints the median and spread of examples/s per source.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from etils import epath

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax import pretraining  # noqa: E402
from albert_jax.data import (
    corpus,  # noqa: E402
    tokenizers,  # noqa: E402
)
from albert_jax.data.building import builder, dataset_settings  # noqa: E402
from albert_jax.data.input import pipeline  # noqa: E402
from albert_jax.model import AlbertForPreTraining, get_config  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402
from tests.storage_emulator import StorageEmulator  # noqa: E402

# SPEC 12.6 (DERIVED): ALBERT-base at seq 512 on one H100 at ~40% MFU, sequences per second.
H100_ALBERT_BASE_512 = 1400


def _pretraining_config(directory: str, batch: int, vocab_size: int):
    config = pretrain_config.get_config("size=base")
    config.batch_size = batch
    config.data.corpus = corpus.DEMO
    config.data.tokenizer = os.path.join(directory, "spm.model")
    config.data.vocab_size = vocab_size
    config.data.dir = os.path.join(directory, "data")
    config.data.dupe_factor = 2
    return config


def _streaming_rate(config, masking_mode: str, batches: int, num_workers: int = 0, *,
                    process_count: int = 1) -> float:
    """Examples/s of host 0 of `process_count` (its batch: config.batch_size // process_count)."""
    config.data.masking = masking_mode
    config.data.num_workers = num_workers
    iterator = pipeline.make_iterator(config, process_index=0, process_count=process_count)
    for _ in range(2 + num_workers):  # warm-up: open shards, start threads and workers
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    rate = batches * config.batch_size // process_count / (time.perf_counter() - start)
    iterator.close()
    return rate


def _step_seconds(model_batch: int, seq_len: int, steps: int) -> float:
    """Seconds of one jitted value_and_grad step of ALBERT-base on MLM + SOP (SPEC 5.3-5.5)."""
    model = AlbertForPreTraining(get_config("albert-base-v2"))
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": jnp.asarray(rng.integers(5, 30000, (model_batch, seq_len)), jnp.int32),
        "segment_ids": jnp.zeros((model_batch, seq_len), jnp.int32),
        "input_mask": jnp.ones((model_batch, seq_len), jnp.int32),
        "masked_lm_positions": jnp.asarray(rng.integers(1, seq_len, (model_batch, 20)), jnp.int32),
        "masked_lm_ids": jnp.asarray(rng.integers(5, 30000, (model_batch, 20)), jnp.int32),
        "masked_lm_weights": jnp.ones((model_batch, 20), jnp.float32),
        "next_sentence_labels": jnp.zeros((model_batch, 1), jnp.int32),
    }
    params = model.init(jax.random.key(0), batch["input_ids"], batch["segment_ids"],
                        batch["input_mask"], batch["masked_lm_positions"])

    def loss_fn(params, batch):
        mlm_logits, sop_logits = model.apply(params, batch["input_ids"], batch["segment_ids"],
                                             batch["input_mask"], batch["masked_lm_positions"])
        sums = pretraining.loss_sums(mlm_logits, sop_logits, batch)
        return pretraining.metrics_from_sums(sums, "sop")["loss"]

    step = jax.jit(jax.value_and_grad(loss_fn))
    jax.block_until_ready(step(params, batch))  # compile
    start = time.perf_counter()
    for _ in range(steps):
        jax.block_until_ready(step(params, batch))
    return (time.perf_counter() - start) / steps


def _bucket_copy_table(args: argparse.Namespace) -> None:
    """--bucket_copy (module docstring): examples/s from local shards vs a host's copy."""
    with tempfile.TemporaryDirectory() as directory:
        os.makedirs(os.path.join(directory, "emulator"))
        with StorageEmulator(os.path.join(directory, "emulator")) as emulator:
            os.environ.update(emulator.environment)
            size, copies, rates = _bucket_copy_rates(args, directory, emulator.bucket)
    print(f"\ndataset: {size / 1e6:.0f} MB (seq 512, 4 shards a split); copy from the local "
          "emulator, host 0: " + ", ".join(f"of {hosts} host(s) {seconds:.1f}s"
                                           for hosts, seconds in copies))
    print(f"\n| read from (static masks, main process, {args.stream_batches} batches of "
          f"{args.batch} // hosts, {args.rounds} rounds) | median examples/s | min | max |")
    print("|---|---:|---:|---:|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):,.0f} | {min(values):,.0f} | "
              f"{max(values):,.0f} |")


def _bucket_copy_rates(args: argparse.Namespace, directory: str, bucket: str
                       ) -> tuple[int, list[tuple[int, float]], dict[str, list[float]]]:
    """(dataset bytes, [(hosts, seconds of host 0's copy)], {source: examples/s per round})."""
    config = _pretraining_config(directory, args.batch, args.vocab_size)
    tokenizers.train(itertools.chain.from_iterable(corpus.demo_documents()),
                    config.data.tokenizer, args.vocab_size)
    config.data.shard_bytes = args.shard_bytes  # several train shards: hosts read their own
    builder.build_from_config(config)
    local_dir = epath.Path(dataset_settings.dataset_dir(config))
    bucket_config = config.copy_and_resolve_references()
    bucket_config.data.dir = f"gs://{bucket}/data"
    remote_dir = epath.Path(dataset_settings.dataset_dir(bucket_config))
    remote_dir.mkdir(parents=True, exist_ok=True)
    for path in local_dir.iterdir():
        (remote_dir / path.name).write_bytes(path.read_bytes())
    sources = {"local build, host 0 of 1 (global stream, all shards)": (config, 1),
               "local build, host 0 of 2 (its rows of every global batch)": (config, 2)}
    copies = []
    for hosts in (1, 2):
        host_config = bucket_config.copy_and_resolve_references()
        host_config.data.local_dir = os.path.join(directory, f"copy_of_{hosts}")
        start = time.perf_counter()
        next(pipeline.make_iterator(host_config, process_index=0, process_count=hosts))
        copies.append((hosts, time.perf_counter() - start))
        shards = "all 4 shards" if hosts == 1 else "shards 0 and 2"
        sources[f"copy of host 0 of {hosts} ({shards})"] = (host_config, hosts)
    rates = {name: [] for name in sources}
    for _ in range(args.rounds):  # interleaved: a drift in machine load hits every source
        for name, (source_config, hosts) in sources.items():
            rates[name].append(_streaming_rate(source_config, "static", args.stream_batches,
                                               process_count=hosts))
    return sum(path.stat().length for path in local_dir.iterdir()), copies, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--model_batch", type=int, default=8,
                        help="batch the model step is timed at on CPU (scaled to --batch)")
    parser.add_argument("--stream_batches", type=int, default=20)
    parser.add_argument("--model_steps", type=int, default=1, help="timed after the compile step")
    parser.add_argument("--workers", type=int, default=2, help="grain workers for the last row")
    parser.add_argument("--vocab_size", type=int, default=5000)
    parser.add_argument("--bucket_copy", action="store_true",
                        help="time reading a host's copy of shards in a bucket against the "
                             "same shards built locally (module docstring)")
    parser.add_argument("--rounds", type=int, default=7, help="--bucket_copy: timed rounds")
    parser.add_argument("--shard_bytes", type=int, default=8 << 20,
                        help="--bucket_copy: shard size of the build (several train shards)")
    args = parser.parse_args()
    if args.bucket_copy:
        _bucket_copy_table(args)
        return

    with tempfile.TemporaryDirectory() as directory:
        config = _pretraining_config(directory, args.batch, args.vocab_size)
        start = time.perf_counter()
        tokenizers.train(itertools.chain.from_iterable(corpus.demo_documents()),
                        config.data.tokenizer, args.vocab_size)
        tokenizer_seconds = time.perf_counter() - start
        start = time.perf_counter()
        builder.build_from_config(config)
        build_seconds = time.perf_counter() - start
        examples = len(pipeline.SplitSource(dataset_settings.dataset_dir(config), "train"))
        rates = {
            "static masks, main process": _streaming_rate(config, "static", args.stream_batches),
            "dynamic masks, main process": _streaming_rate(config, "dynamic", args.stream_batches),
            f"dynamic masks, {args.workers} grain workers": _streaming_rate(
                config, "dynamic", args.stream_batches, args.workers),
        }

    on_cpu = jax.default_backend() == "cpu"
    model_batch = args.model_batch if on_cpu else args.batch
    step = _step_seconds(model_batch, config.seq_len, args.model_steps) * args.batch / model_batch
    consumption = args.batch / step
    device = f"{jax.devices()[0].device_kind} x{jax.device_count()}"
    print(f"\nbuild: tokenizer {tokenizer_seconds:.1f}s; {examples} train examples at seq "
          f"{config.seq_len} (dupe_factor 2) in {build_seconds:.1f}s with {os.cpu_count()} CPUs")
    scaled = f", timed at batch {model_batch} and scaled x{args.batch // model_batch}" if (
        model_batch != args.batch) else ""
    print(f"\n| seq {config.seq_len}, batch {args.batch} | examples/s | ratio to the measured "
          f"step | ratio to the SPEC 12.6 H100 bar |")
    print("|---|---:|---:|---:|")
    for name, rate in rates.items():
        print(f"| stream, {name} | {rate:,.0f} | {rate / consumption:,.0f} | "
              f"{rate / H100_ALBERT_BASE_512:.2f} |")
    print(f"| consumption: ALBERT-base fwd+bwd, float32 on {device}{scaled} | "
          f"{consumption:.3g} | 1 | |")
    print(f"| consumption: SPEC 12.6 derived bar, ALBERT-base on one H100 (not measured) | "
          f"{H100_ALBERT_BASE_512:,} | | 1 |")

if __name__ == "__main__":
    main()
