"""The examples a data build writes stay byte for byte those of the code this speed work started
from (main 52b2497): tokenizing, SPEC 1.3 instances, SPEC 1.4 masks and the tf.Example bytes of
fixed blocks of documents, over every path of the tokenizer (ASCII, accents, CJK, digit-comma
pieces, unknown characters) and of instance creation (short targets, single-sentence documents,
truncation). tests/golden/block_examples.txt holds one line per block, '<examples> <sha256>',
written by that code (its `builder._BlockTask` in place of `build_unit.block_examples` below). The tokenizer is the
committed tests/golden/block_examples.model (2.8 kB: 200 unigram pieces trained on these
documents without "☃", so it has an <unk>, with the ALBERT special pieces plus "0," and "5,",
which the digit-comma rule re-encodes, and identity normalization), so nothing here depends on
training.
For a real corpus, compare benchmarks/block_digests.py before and after a change.
"""
import hashlib
import pathlib

import numpy as np

from albert_jax.data.building import build_unit, masking
from albert_jax.data.building.dataset_settings import DatasetSettings
from albert_jax.data.tokenizers import Tokenizer

GOLDEN = pathlib.Path(__file__).parent / "golden"
_WORDS = ("the", "river", "counts", "naïve", "café", "résumé", "1,000,", "2,500", "東京", "Ωmega",
          "straße", "x0,", "quantitative", "unbelievable", "re-entry", "(see", "above)", "€5",
          "£3", "a", "of", "to", "co-operate", "ﬁne", "Ⅻ", "☃", "data", "builds")


_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "dan", "ing", "er", "qu",
              "ost", "ple", "ra", "tion", "gra", "um", "bel")


def documents() -> list[list[str]]:
    """120 documents of 1-12 sentences of 1-60 words (seeded), some of one sentence."""
    rng = np.random.default_rng(7)
    words = list(_WORDS) + ["".join(rng.choice(_SYLLABLES, rng.integers(1, 5)))
                            for _ in range(300)]
    return [[" ".join(rng.choice(words, rng.integers(1, 61))).capitalize() + "."
             for _ in range(1 if index % 9 == 0 else int(rng.integers(2, 13)))]
            for index in range(120)]


def block_digests(seq_len: int = 64, dupe_factor: int = 3) -> list[str]:
    """'<examples> <sha256 of the length-prefixed examples>' of blocks of 20 documents, block b
    seeded with (seed, 1, b, pass) as 52b2497's `builder._BlockTask` seeded block b of the train
    split."""
    tokenizer = Tokenizer.load(str(GOLDEN / "block_examples.model"))
    settings = DatasetSettings(name="golden", seq_len=seq_len, dupe_factor=dupe_factor,
                               short_seq_prob=0.3)
    metadata = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                    cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id,
                    settings=settings.as_dict())
    masking_settings = masking.MaskingSettings.from_metadata(metadata)
    all_documents = documents()
    lines = []
    for block_index in range(0, len(all_documents) // 20):
        examples, _ = build_unit.block_examples(
            settings, tokenizer, masking_settings,
            all_documents[20 * block_index:20 * (block_index + 1)], seed_prefix=(1, block_index))
        digest = hashlib.sha256()
        for example in examples:
            digest.update(len(example).to_bytes(8, "little") + example)
        lines.append(f"{len(examples)} {digest.hexdigest()}")
    return lines


def test_block_examples_are_those_of_the_reference_commit():
    assert "\n".join(block_digests()) + "\n" == (GOLDEN / "block_examples.txt").read_text()
