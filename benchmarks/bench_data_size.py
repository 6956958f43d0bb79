"""Does `albert-jax data build` run in memory flat in the corpus size? Peak RSS at three sizes.

  python benchmarks/bench_data_size.py [--sizes_mb=4,16,64] [--seq_len=512] [--dupe_factor=10]
                                       [--processes=2] [--workdir=DIR]

Makes a corpus itself: the embedded demo corpus (real English sentences) repeated, each copy's
documents given a distinct id sentence, over 8 files; trains a tokenizer on the demo corpus
once; then builds the pretraining data of configs/pretrain.py:runlocal at --seq_len and
--dupe_factor for each corpus size, each build in a fresh subprocess (the build's own workers
beneath it). The subprocess reports its own peak RSS (getrusage RUSAGE_SELF: the main process,
which reads the corpus and writes the shards) and its children's (RUSAGE_CHILDREN: the largest
worker, reaped when the pool shuts down). Prints one row per size: corpus MB, examples, output
MB (serialized examples, as TFDS counts a split's bytes, and the compressed shard files),
seconds, peak RSS of the main process and of the largest worker, and the serialized examples
against TFDS's former in-memory shuffle buffer (1 GiB of them: past it, TFDS's writer needed
TensorFlow, and until then its memory grew with the split).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax.data import (
    corpus,  # noqa: E402
    tokenizers,  # noqa: E402
)
from albert_jax.data.building import builder  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402

NUM_FILES = 8
TFDS_SHUFFLE_BUFFER = 1 << 30  # tensorflow_datasets.core.shuffle.MAX_MEM_BUFFER_SIZE


def write_corpus(directory: str, megabytes: float) -> str:
    """About `megabytes` of demo documents over NUM_FILES files; returns their glob."""
    os.makedirs(directory, exist_ok=True)
    demo = ["\n".join(document) for document in corpus.demo_documents()]
    files = [open(os.path.join(directory, f"part{index:02d}.txt"), "w")
             for index in range(NUM_FILES)]
    written, copy = 0, 0
    while written < megabytes * 1e6:
        for index, document in enumerate(demo):
            text = f"Document {copy}-{index} follows.\n{document}\n\n"
            files[index % NUM_FILES].write(text)
            written += len(text)
            if written >= megabytes * 1e6:
                break
        copy += 1
    for file in files:
        file.close()
    return os.path.join(directory, "*.txt")


def build_config(workdir: str, corpus_glob: str, arguments: argparse.Namespace):
    config = pretrain_config.get_config("runlocal")
    config.seq_len = arguments.seq_len
    config.data.corpus = corpus_glob
    config.data.tokenizer = os.path.join(workdir, "spm.model")
    config.data.dir = os.path.join(workdir, f"data_{os.path.basename(os.path.dirname(corpus_glob))}")
    config.data.dupe_factor = arguments.dupe_factor
    config.data.eval_fraction = 0.01
    return config


def measured_build(config_json: str, processes: int) -> dict:
    """One build in this (fresh) process: its numbers and the peak RSS of it and its workers."""
    import ml_collections
    config = ml_collections.ConfigDict(json.loads(config_json))
    start = time.perf_counter()
    folder = builder.build_from_config(config, num_processes=processes)
    seconds = time.perf_counter() - start
    shards = [os.path.join(folder, name) for name in os.listdir(folder) if ".array_record-" in name]
    with open(os.path.join(folder, "dataset_info.json")) as file:
        splits = json.load(file)["splits"]
    return {"seconds": seconds,
            "examples": sum(int(length) for split in splits for length in split["shardLengths"]),
            "serialized_bytes": sum(int(split["numBytes"]) for split in splits),
            "output_bytes": sum(os.path.getsize(path) for path in shards),
            "shards": len(shards),
            "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes_mb", default="4,16,64")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", default=None, help="default: a temp dir, removed after")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # a config, as JSON
    arguments = parser.parse_args()
    if arguments.child:
        print("RESULT " + json.dumps(measured_build(arguments.child, arguments.processes)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        workdir = arguments.workdir or scratch
        os.makedirs(workdir, exist_ok=True)
        tokenizer_path = os.path.join(workdir, "spm.model")
        if not os.path.exists(tokenizer_path):
            tokenizers.train((sentence for document in corpus.demo_documents()
                             for sentence in document), tokenizer_path, vocab_size=4000)
        rows = []
        for megabytes in map(float, arguments.sizes_mb.split(",")):
            corpus_glob = write_corpus(os.path.join(workdir, f"corpus_{megabytes:g}mb"), megabytes)
            config = build_config(workdir, corpus_glob, arguments)
            corpus_bytes = sum(os.path.getsize(path) for path in corpus.list_sources(corpus_glob))
            result = subprocess.run(
                [sys.executable, os.path.abspath(__file__), f"--child={config.to_json()}",
                 f"--processes={arguments.processes}"],
                capture_output=True, text=True, check=False)
            if result.returncode:
                sys.exit(f"build of {corpus_glob} failed:\n{result.stdout[-3000:]}"
                         f"{result.stderr[-3000:]}")
            measured = json.loads(result.stdout.split("RESULT ", 1)[1])
            rows.append((corpus_bytes / 1e6, measured))
            print(f"built {megabytes:g} MB: {measured}", flush=True)
    print(f"\nseq_len {arguments.seq_len}, dupe_factor {arguments.dupe_factor}, "
          f"{arguments.processes} worker processes, {NUM_FILES} corpus files")
    print("| corpus MB | examples | serialized MB | x TFDS 1 GB buffer | output MB (files) | "
          "shards | seconds | examples/s | peak RSS main MB | peak RSS largest worker MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for corpus_mb, measured in rows:
        print(f"| {corpus_mb:.1f} | {measured['examples']} | "
              f"{measured['serialized_bytes'] / 1e6:.0f} | "
              f"{measured['serialized_bytes'] / TFDS_SHUFFLE_BUFFER:.2f} | "
              f"{measured['output_bytes'] / 1e6:.0f} | {measured['shards']} | "
              f"{measured['seconds']:.0f} | {measured['examples'] / measured['seconds']:.0f} | "
              f"{measured['main_rss_mb']:.0f} | {measured['worker_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
