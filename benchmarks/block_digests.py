"""The sha256 of the examples `build_unit.block_examples` makes of each block of a corpus, one
line per block: to check that a change keeps the written bytes, run it on the code before and
after.

  PYTHONPATH=/path/to/old/checkout python benchmarks/block_digests.py --corpus='c/*.txt' \
      --tokenizer=spm.model [--blocks=20] [--seq_len=512] [--dupe_factor=5] > old.txt
  PYTHONPATH=$PWD python benchmarks/block_digests.py ... > new.txt && diff old.txt new.txt

The corpus is read whole as one train split (eval_fraction 0) and cut into blocks as a unit's
documents are (`build_unit._blocks`), block b seeded with (seed, 1, b, pass): the seeds of
52b2497's builder (before units), whose digests of the 16 MB corpus of
benchmarks/bench_data_build.py these match (benchmarks/RESULTS.md). tests/test_block_examples.py
pins such digests at small size.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/ (PYTHONPATH first)
from albert_jax.data import corpus  # noqa: E402
from albert_jax.data.building import build_unit, masking  # noqa: E402
from albert_jax.data.building.dataset_settings import DatasetSettings  # noqa: E402
from albert_jax.data.tokenizers import Tokenizer  # noqa: E402
from configs import pretrain  # noqa: E402


def block_work(corpus_glob: str, tokenizer_path: str, seq_len: int, dupe_factor: int
               ) -> tuple[DatasetSettings, Tokenizer, masking.MaskingSettings]:
    """What `block_examples` takes for the corpus (pretrain.py's defaults, seed 12345)."""
    config = pretrain.get_config()
    config.seq_len = seq_len
    config.data.corpus, config.data.tokenizer = corpus_glob, tokenizer_path
    config.data.dupe_factor, config.data.eval_fraction = dupe_factor, 0.0
    settings = DatasetSettings.from_run_config(config)
    tokenizer = Tokenizer.load(tokenizer_path)
    metadata = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                    cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id,
                    settings=settings.as_dict())
    return settings, tokenizer, masking.MaskingSettings.from_metadata(metadata)


def corpus_blocks(corpus_glob: str, blocks: int | None) -> list[list[list[str]]]:
    """The first `blocks` blocks of the whole corpus's documents."""
    return list(itertools.islice(build_unit._blocks(corpus.iter_documents(corpus_glob)), blocks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--blocks", type=int, default=None, help="default: all")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    arguments = parser.parse_args()
    settings, tokenizer, masking_settings = block_work(
        arguments.corpus, arguments.tokenizer, arguments.seq_len, arguments.dupe_factor)
    for block_index, block in enumerate(corpus_blocks(arguments.corpus, arguments.blocks)):
        examples, _ = build_unit.block_examples(settings, tokenizer, masking_settings, block,
                                                seed_prefix=(1, block_index))
        digest = hashlib.sha256()
        for example in examples:
            digest.update(len(example).to_bytes(8, "little") + example)
        print(f"{len(examples)} {digest.hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
