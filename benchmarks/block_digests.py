"""The sha256 of the examples `builder._BlockTask` makes of each block of a corpus, one line per
block: to check that a change keeps the written bytes, run it on the code before and after.

  PYTHONPATH=/path/to/old/checkout python benchmarks/block_digests.py --corpus='c/*.txt' \
      --tokenizer=spm.model [--blocks=20] [--seq_len=512] [--dupe_factor=5] > old.txt
  PYTHONPATH=$PWD python benchmarks/block_digests.py ... > new.txt && diff old.txt new.txt

Uses only what the builder has had since the block tasks exist (`_BlockTask`, `_document_blocks`,
`_set_worker_tokenizer`), so it runs on older code too. tests/test_block_examples.py pins the
same digests at small size.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/ (PYTHONPATH first)
from albert_jax.data import builder, corpus, masking  # noqa: E402
from albert_jax.data.dataset_settings import DatasetSettings  # noqa: E402
from albert_jax.data.tokenizer import Tokenizer  # noqa: E402
from configs import pretrain  # noqa: E402


def block_task(corpus_glob: str, tokenizer_path: str, seq_len: int, dupe_factor: int,
               ) -> tuple[builder._BlockTask, DatasetSettings]:
    """The `_BlockTask` of the train split of `corpus_glob` (pretrain.py's defaults, seed 12345,
    eval_fraction 0); sets this process's worker tokenizer."""
    config = pretrain.get_config()
    config.seq_len = seq_len
    config.data.corpus, config.data.tokenizer = corpus_glob, tokenizer_path
    config.data.dupe_factor, config.data.eval_fraction = dupe_factor, 0.0
    settings = DatasetSettings.from_run_config(config)
    tokenizer = Tokenizer.load(tokenizer_path)
    metadata = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                    cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id,
                    settings=settings.as_dict())
    builder._set_worker_tokenizer(tokenizer)
    return builder._BlockTask(settings=settings,
                              masking_settings=masking.MaskingSettings.from_metadata(metadata),
                              split_index=builder.SPLITS.index("train")), settings


def block_digests(corpus_glob: str, tokenizer_path: str, *, seq_len: int, dupe_factor: int,
                  blocks: int | None = None) -> list[str]:
    """'<examples> <sha256 of the length-prefixed examples>' of each of the first `blocks`."""
    task, settings = block_task(corpus_glob, tokenizer_path, seq_len, dupe_factor)
    lines = []
    for indexed_block in itertools.islice(
            enumerate(builder._document_blocks(settings, "train", corpus.CorpusStats())), blocks):
        digest = hashlib.sha256()
        examples = task(indexed_block).examples
        for example in examples:
            digest.update(len(example).to_bytes(8, "little") + example)
        lines.append(f"{len(examples)} {digest.hexdigest()}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--blocks", type=int, default=None, help="default: all")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    arguments = parser.parse_args()
    for line in block_digests(arguments.corpus, arguments.tokenizer, seq_len=arguments.seq_len,
                              dupe_factor=arguments.dupe_factor, blocks=arguments.blocks):
        print(line, flush=True)


if __name__ == "__main__":
    main()
