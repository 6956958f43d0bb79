"""Training a tokenizer: a SentencePiece unigram model with the ALBERT settings (SPEC 2.1) or a
WordPiece vocabulary, from the corpus of a config.

  albert-jax tokenizer train --config=configs/pretrain.py:runlocal     # train_from_config
  train(sentences, "spiece.model", vocab_size=30000)                  # from any sentences

The only place the tokenizers read a corpus: a vocabulary is trained on a sample of it
(`corpus.sample_sentences`), documents and sentences made as the build makes them.
"""
from __future__ import annotations

import io
import os
import random
import re
import time
from typing import Iterable, Iterator

import ml_collections
import sentencepiece as spm
from etils import epath

from albert_jax import files
from albert_jax.data import corpus
from albert_jax.data.tokenizers import text_damage, wordpiece
from albert_jax.data.tokenizers.preprocessing import preprocess_text
from albert_jax.data.tokenizers.text_settings import TextSettings, check_kind
from albert_jax.data.tokenizers.tokenizer import (
    CONTROL_SYMBOLS,
    USER_DEFINED_SYMBOLS,
    SentencePieceTokenizer,
    Tokenizer,
    WordPieceTokenizer,
)
from albert_jax.errors import ConfigError

# Sentences a tokenizer is trained on at most (SentencePiece's input_sentence_size):
# `train_from_config` reads no more of the corpus than that.
INPUT_SENTENCE_SIZE = 10_000_000
# SPEC 2.1: the characters of the text a SentencePiece model covers (the rest become <unk>,
# or bytes with byte_fallback).
CHARACTER_COVERAGE = 0.99995


def train(sentences: Iterable[str], model_path: str, vocab_size: int, *,
          input_sentence_size: int = INPUT_SENTENCE_SIZE, seed: int = 0,
          settings: TextSettings = TextSettings(),
          character_coverage: float = CHARACTER_COVERAGE, byte_fallback: bool = False) -> str:
    """Trains a unigram SentencePiece model with the ALBERT settings (SPEC 2.1); returns model_path.

    Sentences are preprocessed (SPEC 2.2, as `settings` say) first. `character_coverage`: the
    share of the text's characters the model covers as pieces of their own (SPEC 2.1's 0.99995;
    less for a script with thousands of rare characters). `byte_fallback`: a character outside
    the vocabulary becomes its UTF-8 bytes (256 pieces `<0x00>`..`<0xFF>` after the special
    ids 0-4) instead of <unk>, so no text is lost. `model_path`
    (local or gs://) and its `.vocab` are written atomically (temp file, then rename). Training
    is deterministic for a given input: SentencePiece's sampling generator is seeded with `seed`
    and it runs one thread. A `vocab_size` the corpus cannot support raises ValueError with the largest size
    that works (rather than `hard_vocab_limit=False`, which would silently change the size that
    the model config and the data depend on).
    """
    model_path = os.fspath(model_path)

    def preprocessed() -> Iterator[str]:
        for sentence in sentences:
            text = preprocess_text(sentence, settings.do_lower_case, settings.keep_accents)
            if text:
                yield text

    spm.set_random_generator_seed(seed)
    model_file = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=preprocessed(), model_writer=model_file, model_type="unigram",
            vocab_size=vocab_size, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            control_symbols=list(CONTROL_SYMBOLS), user_defined_symbols=list(USER_DEFINED_SYMBOLS),
            shuffle_input_sentence=True, input_sentence_size=input_sentence_size,
            character_coverage=character_coverage, byte_fallback=byte_fallback, num_threads=1,
            minloglevel=2)
    except RuntimeError as error:
        limit = re.search(r"value <= (\d+)", str(error))
        if limit:
            raise ValueError(
                f"vocab_size={vocab_size} is too large for this corpus: lower it to at most "
                f"{limit.group(1)} (e.g. --config.data.vocab_size={limit.group(1)}) or use more "
                f"text") from None
        required = re.search(r"smaller than required_chars. \d+ vs (\d+)", str(error))
        if required:
            lower = next((value for value in (0.9995, 0.999, 0.995, 0.99)
                          if value < character_coverage), None)
            example = (f" (e.g. {lower}: the rarest characters become <unk>, or bytes with "
                       f"byte_fallback)" if lower else "")
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {required.group(1)} pieces this "
                f"corpus's characters need (character_coverage={character_coverage}): raise "
                f"--config.data.vocab_size or lower --config.data.character_coverage"
                f"{example}") from None
        raise ValueError(f"SentencePiece training for {model_path} failed: {error}") from None
    model_proto = model_file.getvalue()
    # Validates the special ids (SPEC 2.1).
    tokenizer = SentencePieceTokenizer(model_proto, settings=settings, path=model_path)
    vocab_lines = "".join(f"{tokenizer.id_to_piece([i])[0]}\t{tokenizer._sp.get_score(i):g}\n"
                          for i in range(tokenizer.vocab_size))
    # Local or in a bucket (gs://): each file through a temporary one and a rename (on a
    # bucket one object upload, atomic anyway); the model last, as its presence means "trained".
    vocab_path = os.path.splitext(model_path)[0] + ".vocab"
    files.write_atomically(vocab_path, vocab_lines.encode("utf-8"))
    files.write_atomically(model_path, model_proto)
    return model_path


def train_from_config(config: ml_collections.ConfigDict) -> None:
    """`albert-jax tokenizer train`: trains config.data.tokenizer on config.data.corpus, a
    SentencePiece model or, with config.data.tokenizer_kind="wordpiece", a WordPiece vocabulary.

    Trains on at most config.data.input_sentence_size sentences (default INPUT_SENTENCE_SIZE),
    read from the corpus's sources in an order drawn from config.seed until there are that many
    (`corpus.sample_sentences`), documents and sentences made as the build makes them
    (data.documents, data.sentences, data.language, ...): a corpus of any size, in any format,
    is read only that far. A mixture (`corpus.mixture`) is read whole once to weigh its groups
    (on every core, in parts of data.unit_bytes), then gives q_i of the sentences from group i
    (`corpus.sample_mixture`), as the build weighs them (data.mixture_alpha). Skips (and says
    so) when the file already exists, so the demo can be rerun.
    """
    model_path = config.data.tokenizer
    settings = TextSettings.from_config(config.data)
    check_kind(model_path, settings.kind)
    coverage = float(config.data.get("character_coverage", CHARACTER_COVERAGE))
    if not 0.0 < coverage <= 1.0:
        raise ConfigError(f"config data.character_coverage={coverage} is not a share of the "
                          f"characters; use 0 < coverage <= 1 (SPEC 2.1: {CHARACTER_COVERAGE})")
    if epath.Path(model_path).exists():
        print(f"tokenizer {model_path} exists; skipping training (delete it to retrain)")
        return
    sample_size = int(config.data.get("input_sentence_size", INPUT_SENTENCE_SIZE))
    reading = corpus.ReadSettings.from_config(config.data)
    alpha = float(config.data.get("mixture_alpha", corpus.MIXTURE_ALPHA))
    corpus.check_alpha(alpha)
    groups = corpus.corpus_groups(config.data.corpus, reading)
    sources = [source for source, _ in corpus.flat_sources(groups)]
    stats = corpus.CorpusStats()
    num_sentences = 0
    # Sentences drawn evenly from all read (a reservoir: a mixture's sample comes group by
    # group), to say what the reference settings do to the text.
    damage_sample: list[str] = []
    damage_rng = random.Random(config.seed)
    shares: list[float] = []  # a mixture's q_i
    if corpus.is_mixture(groups):
        # All of it read once, on every core where there is more than a part's worth of it.
        part_bytes = int(config.data.get("unit_bytes", 32 << 20))  # the build's units' size
        text_bytes = sum(size or 0 for _, size in corpus.flat_sources(groups))
        processes = (os.cpu_count() or 1) if text_bytes > part_bytes else 1
        sizes = corpus.count_groups(groups, part_bytes, processes, stats)
        sample = corpus.sample_mixture(groups, sizes, alpha, sample_size, config.seed)
        _, shares = corpus.sampling_shares([size.characters for size in sizes], alpha)
    else:
        sample = corpus.sample_sentences(sources, sample_size, config.seed, stats, reading)

    def sentences() -> Iterator[str]:
        nonlocal num_sentences
        for sentence in sample:
            num_sentences += 1
            if len(damage_sample) < text_damage.SAMPLE_SENTENCES:
                damage_sample.append(sentence)
            else:
                slot = damage_rng.randrange(num_sentences)
                if slot < text_damage.SAMPLE_SENTENCES:
                    damage_sample[slot] = sentence
            yield sentence

    start = time.time()
    if settings.kind == "wordpiece":
        train_wordpiece(sentences(), model_path, config.data.vocab_size, settings=settings)
        what = "WordPiece vocabulary (HuggingFace tokenizers' trainer on BasicTokenizer words)"
    else:
        train(sentences(), model_path, config.data.vocab_size, seed=config.seed,
              settings=settings, input_sentence_size=sample_size,
              character_coverage=coverage,
              byte_fallback=bool(config.data.get("byte_fallback", False)))
        what = "SentencePiece unigram tokenizer"
    read = ("the whole corpus" if num_sentences < sample_size
            else f"reading stopped at data.input_sentence_size={sample_size:,} sentences")
    drawn = (f"{len(sources)} sources read to weigh the groups, then q_i of the sentences from "
             f"group i at data.mixture_alpha={alpha} (" + ", ".join(
                 f"{group.name} {share:.1%}" for group, share in zip(groups, shares)) + ")"
             if shares else f"{stats.sources} of {len(sources)} sources, visited in an order "
                            f"drawn from seed {config.seed}")
    print(f"trained {what}: {num_sentences} sentences from {config.data.corpus!r} ({drawn}; "
          f"{read}), vocab_size {config.data.vocab_size}, wrote {model_path} in "
          f"{time.time() - start:.1f}s\n{stats.report()}")
    for line in text_damage.warnings(Tokenizer.load(model_path, settings), damage_sample):
        print(line)


def train_wordpiece(sentences: Iterable[str], vocab_path: str, vocab_size: int, *,
                    settings: TextSettings = TextSettings(kind="wordpiece")) -> str:
    """Trains a WordPiece vocabulary of `vocab_size` pieces (`wordpiece.train_vocab`: [PAD]
    [UNK] [CLS] [SEP] [MASK] first) and writes it to `vocab_path` (local or gs://) atomically,
    one piece per line; returns vocab_path."""
    pieces = wordpiece.train_vocab(sentences, vocab_size, lower=settings.do_lower_case,
                                   keep_accents=settings.keep_accents)
    content = "".join(f"{piece}\n" for piece in pieces).encode("utf-8")
    WordPieceTokenizer(content, settings=settings, path=vocab_path)  # Validates the special pieces.
    files.write_atomically(os.fspath(vocab_path), content)
    return os.fspath(vocab_path)
