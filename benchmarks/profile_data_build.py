"""Where a data build's CPU time goes: the split of `build_unit.block_examples` (one block of
documents in, serialized examples out) between tokenizing, instance creation, masking and
serialization.

  python benchmarks/profile_data_build.py --corpus='/tmp/bench_data_build/corpus_16mb/*.txt' \
      --tokenizer=/tmp/bench_data_build/spm8000.model [--blocks=8] [--seq_len=512] \
      [--dupe_factor=5] [--cprofile=30]

Runs the first --blocks blocks of the corpus (`block_digests.corpus_blocks`) in this process,
stage by stage as `block_examples` does (same functions, same generator), timing each with
process CPU time, checks that the examples equal `block_examples`'s own, and prints the split;
--cprofile=N also prints cProfile's N functions of most own time over `block_examples` itself.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import time

import numpy as np
from block_digests import block_work, corpus_blocks  # (this folder)

from albert_jax.data.building import build_unit, instances, masking


def staged(settings, tokenizer, masking_settings, documents: list[list[str]],
           seed_prefix: tuple[int, ...], seconds: collections.Counter) -> list[bytes]:
    """`block_examples(...)[0]`, each stage's CPU time added to `seconds`."""
    clock = time.process_time
    start = clock()
    tokenized = [encoded for document in documents
                 if (encoded := [ids for ids in map(tokenizer.encode, document) if ids.size])]
    seconds["tokenize"] += clock() - start
    serialize = build_unit._example_serializer(settings.seq_len, settings.max_predictions)
    examples = []
    for dupe_pass in range(settings.dupe_factor):
        rng = np.random.default_rng(np.random.SeedSequence(
            [settings.seed, *seed_prefix, dupe_pass]))
        start = clock()
        pairs = instances.create_instances(
            tokenized, rng, max_seq_length=settings.seq_len,
            short_seq_prob=settings.short_seq_prob,
            sentence_objective=settings.sentence_objective,
            reference_compat=settings.reference_compat,
            cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
        seconds["instance creation"] += clock() - start
        for instance in pairs:
            start = clock()
            boundary = masking.token_boundary(instance.tokens, tokenizer.word_start,
                                              masking_settings.special_ids)
            features = masking.mask_instance(instance, boundary, rng, masking_settings)
            middle = clock()
            examples.append(serialize(features))
            seconds["masking"] += middle - start
            seconds["serialization"] += clock() - middle
    return examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--cprofile", type=int, default=0)
    arguments = parser.parse_args()
    work = block_work(arguments.corpus, arguments.tokenizer, arguments.seq_len,
                      arguments.dupe_factor)
    blocks = corpus_blocks(arguments.corpus, arguments.blocks)
    seconds: collections.Counter = collections.Counter()
    examples = [example for index, block in enumerate(blocks)
                for example in staged(*work, block, (1, index), seconds)]
    start = time.process_time()
    expected = [example for index, block in enumerate(blocks)
                for example in build_unit.block_examples(*work, block, seed_prefix=(1, index))[0]]
    whole = time.process_time() - start
    assert examples == expected, "the staged examples differ from block_examples'"
    total = sum(seconds.values())
    print(f"{len(blocks)} blocks, {len(examples)} examples, seq {arguments.seq_len}, dupe "
          f"{arguments.dupe_factor}; block_examples {whole:.2f} CPU s "
          f"({len(examples) / whole:,.0f} examples/CPU-s), stages {total:.2f} CPU s")
    print("| stage | CPU s | share | µs per example |\n|---|---:|---:|---:|")
    for stage in ("tokenize", "instance creation", "masking", "serialization"):
        print(f"| {stage} | {seconds[stage]:.2f} | {seconds[stage] / total:.0%} | "
              f"{seconds[stage] / len(examples) * 1e6:.0f} |")
    if arguments.cprofile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [build_unit.block_examples(*work, block, seed_prefix=(1, index))
                                 for index, block in enumerate(blocks)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(arguments.cprofile)


if __name__ == "__main__":
    main()
