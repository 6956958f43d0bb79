"""Throughput of the data core on one CPU core: tokenization, instance creation, masking.

  python benchmarks/bench_instances.py [--documents=N] [--vocab_size=5000]

Trains a SentencePiece model on the demo corpus (SPEC 2.1 settings), tokenizes it, then times
one pass of `create_instances` (SPEC 1.3) and `token_boundary` + `mask_sequence` + `to_features`
(SPEC 1.4-1.5) per example at seq 512 and 128, and prints a table.
"""
from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time

import numpy as np

from albert_jax.data import corpus, tokenizers
from albert_jax.data.building import instances, masking


def _timed(function):
    start = time.process_time()
    result = function()
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=None, help="demo documents (all)")
    parser.add_argument("--vocab_size", type=int, default=5000)
    args = parser.parse_args()

    documents = list(itertools.islice(corpus.demo_documents(), args.documents))
    sentences = [sentence for document in documents for sentence in document]
    with tempfile.TemporaryDirectory() as directory:
        model_path, train_seconds = _timed(lambda: tokenizers.train(
            sentences, os.path.join(directory, "spm.model"), args.vocab_size))
        spm = tokenizers.Tokenizer.load(model_path)
    tokenized, encode_seconds = _timed(
        lambda: [[spm.encode(sentence) for sentence in document] for document in documents])
    num_tokens = sum(len(ids) for document in tokenized for ids in document)
    rows = [("tokenize (preprocess + spm + SPEC 2.3)", f"{len(sentences) / encode_seconds:,.0f}",
             "sentences/s", f"{num_tokens / encode_seconds:,.0f} tokens/s")]
    special_ids = (spm.cls_id, spm.sep_id, spm.pad_id)
    # Docstrings are short documents; the demo as one long document gives full-length examples.
    one_document = [[sentence for document in tokenized for sentence in document]]
    for seq_len, name, source in ((512, "512", tokenized), (128, "128", tokenized),
                                  (512, "512 full", one_document)):
        rng = np.random.default_rng(0)
        pairs, pair_seconds = _timed(lambda: instances.create_instances(
            source, rng, max_seq_length=seq_len, short_seq_prob=0.0 if len(source) == 1 else 0.1,
            cls_id=spm.cls_id, sep_id=spm.sep_id))

        def mask_all() -> None:
            for instance in pairs:
                boundary = masking.token_boundary(instance.tokens, spm.word_start, special_ids)
                masked = masking.mask_sequence(
                    instance.tokens, boundary, rng, max_predictions=20, vocab_size=spm.vocab_size,
                    mask_id=spm.mask_id, special_ids=special_ids)
                masking.to_features(instance, masked, boundary, seq_len=seq_len,
                                    max_predictions=20)

        _, mask_seconds = _timed(mask_all)
        mean_length = np.mean([len(instance.tokens) for instance in pairs])
        rows.append((f"create_instances, seq {name}", f"{len(pairs) / pair_seconds:,.0f}",
                     "examples/s", f"{len(pairs)} examples, mean {mean_length:.0f} tokens"))
        rows.append((f"boundary + mask + features, seq {name}",
                     f"{len(pairs) / mask_seconds:,.0f}", "examples/s", "20 predictions max"))
        rows.append((f"both, seq {name}", f"{len(pairs) / (pair_seconds + mask_seconds):,.0f}",
                     "examples/s", ""))

    print(f"demo corpus: {len(documents)} documents, {len(sentences)} sentences, {num_tokens} "
          f"tokens; spm vocab {spm.vocab_size} trained in {train_seconds:.1f} s CPU")
    print(f"| {'stage (one core, CPU time)':<44} | {'throughput':>10} | {'unit':<11} | note")
    print(f"|{'-' * 46}|{'-' * 12}|{'-' * 13}|------")
    for stage, value, unit, note in rows:
        print(f"| {stage:<44} | {value:>10} | {unit:<11} | {note}")


if __name__ == "__main__":
    main()
