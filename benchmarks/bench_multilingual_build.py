"""A build with the multilingual text settings against the default build, on the same text:
instances per CPU-second.

  PYTHONPATH=$PWD python benchmarks/bench_multilingual_build.py [--copies=40] [--repeats=5]
      [--seq_len=128] [--dupe_factor=5] [--workdir=DIR]

The text: the documents of tests/multilingual_text.py (Hindi, Thai, Japanese, Russian, Korean,
Vietnamese, French, English), `--copies` times over, each copy in an order drawn from its index,
one text file. Two rows, each with a SentencePiece model trained on that text with its own
settings (not timed):
  default       the defaults: lower-cased, SPEC 2.2's accent step, SPEC 1.4.2's word starts,
                character_coverage 0.99995, 560 pieces (near the most this text supports);
  multilingual  data.do_lower_case False, keep_accents True, word_boundaries "spaces",
                character_coverage 0.9995, byte_fallback True, 800 pieces (544 + 256 bytes).
Each build is what `albert-jax data build` runs on one core (`builder.build_from_config(config,
num_processes=1)`), in this one process, its folder deleted first; the two rows interleaved in
each of --repeats rounds; CPU-seconds of this process (time.process_time) per build, medians.
The multilingual settings make more pieces of the same text (cased, marks kept, bytes), so more
instances: the last column is the text's MB per CPU-second of each build.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from albert_jax.data.building import builder, dataset_settings  # noqa: E402
from albert_jax.data.tokenizers import TextSettings, train  # noqa: E402
from configs import pretrain  # noqa: E402
from tests.multilingual_text import DOCUMENTS  # noqa: E402

ROWS = {
    "default": (dict(), dict(vocab_size=560)),
    "multilingual": (dict(do_lower_case=False, keep_accents=True, word_boundaries="spaces"),
                     dict(vocab_size=800, character_coverage=0.9995, byte_fallback=True)),
}


def write_text(path: str, copies: int) -> list[str]:
    """The corpus file (see the module docstring); returns its sentences."""
    documents = [document for language in DOCUMENTS for document in DOCUMENTS[language]]
    with open(path, "w", encoding="utf-8") as file:
        for copy in range(copies):
            for index in np.random.default_rng(copy).permutation(len(documents)):
                file.write("\n".join(documents[index]) + "\n\n")
    return [sentence for document in documents for sentence in document]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    arguments = parser.parse_args()
    workdir = arguments.workdir or tempfile.mkdtemp(prefix="bench_multilingual_")
    corpus_path = os.path.join(workdir, "corpus.txt")
    sentences = write_text(corpus_path, arguments.copies)
    configs = {}
    for name, (text, training) in ROWS.items():
        model = train(sentences, os.path.join(workdir, f"{name}.model"),
                      settings=TextSettings(**text), **training)
        config = pretrain.get_config()
        config.seq_len = arguments.seq_len
        config.data.update(dict(corpus=corpus_path, tokenizer=model,
                                vocab_size=training["vocab_size"],
                                dir=os.path.join(workdir, "data"),
                                dupe_factor=arguments.dupe_factor, eval_fraction=0.0, **text))
        configs[name] = config
    rates: dict[str, list[float]] = {name: [] for name in ROWS}
    instances: dict[str, int] = {}
    for round_index in range(arguments.repeats):
        for name, config in configs.items():
            shutil.rmtree(dataset_settings.dataset_dir(config), ignore_errors=True)
            with contextlib.redirect_stdout(io.StringIO()):  # the build's report
                start = time.process_time()
                builder.build_from_config(config, num_processes=1)
                seconds = time.process_time() - start
            loaded = builder.make_builder(config).info.splits
            instances[name] = sum(split.num_examples for split in loaded.values())
            rates[name].append(instances[name] / seconds)
            print(f"round {round_index} {name}: {instances[name]} instances in {seconds:.2f} "
                  f"CPU-s", file=sys.stderr, flush=True)
    baseline = statistics.median(rates["default"])
    print(f"\n{os.path.getsize(corpus_path) / 1e6:.2f} MB of text, seq_len {arguments.seq_len}, "
          f"dupe_factor {arguments.dupe_factor}; median of {arguments.repeats} interleaved "
          f"rounds, CPU-seconds of this process\n")
    megabytes = os.path.getsize(corpus_path) / 1e6
    print("| build | instances | CPU s | instances / CPU-s | x default | text MB / CPU-s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in ROWS:
        rate = statistics.median(rates[name])
        seconds = instances[name] / rate
        print(f"| {name} | {instances[name]:,} | {seconds:.2f} | {rate:,.0f} | "
              f"{rate / baseline:.2f}x | {megabytes / seconds:.3f} |")


if __name__ == "__main__":
    main()
