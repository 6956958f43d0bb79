"""Whole-word n-gram masking (SPEC 1.4) and the padded example features (SPEC 1.5).

Pure NumPy and a pure function of its inputs. Static masking (builder.py) calls `mask_instance`
once per instance and dupe pass at build time; dynamic masking (pipeline.py) calls
`remask_features` per example and epoch with a generator derived from (seed, epoch, index). Both
take their `MaskingSettings` from the dataset's metadata, so they mask alike.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any, Collection, Mapping, NamedTuple

import numpy as np

from albert_jax.data.building.instances import Instance

# SPEC 1.4.7: [MASK] 80%, the original token 10%, a random vocabulary id 10%.
MASK_PROB = 0.8
KEEP_PROB = 0.1


@dataclasses.dataclass(frozen=True)
class MaskingSettings:
    """What masking one example and padding its features take (small and picklable).

    seq_len, max_predictions: the padded lengths (SPEC 1.5); masked_lm_prob, max_ngram,
    favor_shorter_ngram: SPEC 1.4.3-1.4.4; vocab_size, mask_id: the 80/10/10 replacements
    (SPEC 1.4.7); special_ids: [CLS], [SEP], <pad>, never masked.
    """
    seq_len: int
    max_predictions: int
    masked_lm_prob: float
    max_ngram: int
    favor_shorter_ngram: bool
    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> "MaskingSettings":
        """The masking a built dataset was made with, from its metadata (`builder.py` writes
        the tokenizer's ids and, under `settings`, the `dataset_settings.DatasetSettings`)."""
        settings = metadata["settings"]
        return cls(seq_len=int(settings["seq_len"]),
                   max_predictions=int(settings["max_predictions"]),
                   masked_lm_prob=float(settings["masked_lm_prob"]),
                   max_ngram=int(settings["max_ngram"]),
                   favor_shorter_ngram=bool(settings["favor_shorter_ngram"]),
                   vocab_size=int(metadata["vocab_size"]), mask_id=int(metadata["mask_id"]),
                   special_ids=(int(metadata["cls_id"]), int(metadata["sep_id"]),
                                int(metadata["pad_id"])))


class MaskedSequence(NamedTuple):
    """input_ids: int32 [n], the tokens after masking.
    masked_lm_positions: int32 [k], sorted positions of the predictions (k <= max_predictions).
    masked_lm_ids: int32 [k], the ORIGINAL tokens at those positions (SPEC 1.4.9)."""
    input_ids: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray


def token_boundary(tokens: np.ndarray, word_start: np.ndarray,
                   special_ids: Collection[int]) -> np.ndarray:
    """SPEC 1.4.1: int32 [n], 1 at special tokens and at pieces that start a word.

    word_start: bool [vocab_size], `Tokenizer.word_start` (SPEC 1.4.2 start-piece test, or
      where the text has spaces: data.word_boundaries).
    """
    tokens = np.asarray(tokens)
    return (word_start[tokens] | _is_special(tokens, special_ids)).astype(np.int32)


def _is_special(tokens: np.ndarray, special_ids: Collection[int]) -> np.ndarray:
    # bool [n]; a few comparisons beat np.isin's sort for the 2-3 special ids.
    if not special_ids:
        return np.zeros(len(tokens), bool)
    first, *others = special_ids
    is_special = tokens == first
    for special_id in others:
        is_special |= tokens == special_id
    return is_special


def ngram_probabilities(max_ngram: int, favor_shorter_ngram: bool = True) -> np.ndarray:
    """SPEC 1.4.4: float64 [max_ngram], p(n) ∝ 1/n (6/11, 3/11, 2/11 for 3); reversed if not
    favor_shorter_ngram."""
    probabilities = 1.0 / np.arange(1, max_ngram + 1)
    probabilities /= probabilities.sum()
    return probabilities if favor_shorter_ngram else probabilities[::-1].copy()


def num_to_predict(num_tokens: int, *, max_predictions: int, masked_lm_prob: float) -> int:
    """SPEC 1.4.3: min(max_predictions, max(1, round(num_tokens * prob))), Python's round.

    num_tokens counts [CLS]/[SEP]: 20 at seq 512 with the defaults, not 15% of the tokens."""
    return min(max_predictions, max(1, int(round(num_tokens * masked_lm_prob))))


def whole_words(tokens: np.ndarray, boundary: np.ndarray,
                special_ids: Collection[int]) -> tuple[np.ndarray, np.ndarray]:
    """The maskable words of a sequence (SPEC 1.4.1): int64 [num_words] starts and ends.

    Word w covers tokens[starts[w]:ends[w]]: a start piece (boundary 1) and the continuation
    pieces after it. Special tokens belong to no word and end the word before them.
    """
    is_special = _is_special(tokens, special_ids)
    previous_special = np.empty_like(is_special)
    previous_special[:1] = True
    previous_special[1:] = is_special[:-1]
    starts_word = ~is_special & ((np.asarray(boundary) == 1) | previous_special)
    # A word ends where the next word or special token starts, or at the end.
    word_breaks = np.flatnonzero(starts_word | is_special)
    next_breaks = np.empty_like(word_breaks)
    next_breaks[:-1] = word_breaks[1:]
    next_breaks[-1:] = len(tokens)
    starts_at_break = starts_word[word_breaks]
    return word_breaks[starts_at_break], next_breaks[starts_at_break]


def choose_ngrams(word_starts: np.ndarray, word_ends: np.ndarray, rng: np.random.Generator, *,
                  budget: int, max_ngram: int = 3,
                  favor_shorter_ngram: bool = True) -> list[tuple[int, int]]:
    """SPEC 1.4.5-1.4.6: disjoint word n-grams, (first word, n) in the order chosen, covering
    at most `budget` tokens.

    Word n-grams are visited in random order; n is drawn with p ∝ 1/n (as in the released code,
    an n-gram that would run past the last word is cut there), shortened while it would overshoot
    the budget, skipped if it still does or overlaps an earlier n-gram.
    """
    cumulative = _cumulative_ngram_probabilities(max_ngram, favor_shorter_ngram)
    num_words = len(word_starts)
    order = rng.permutation(num_words)
    ngram_draws = rng.random(num_words)
    word_lengths = (word_ends - word_starts).tolist()
    covered = [False] * num_words
    chosen: list[tuple[int, int]] = []
    num_selected = 0
    # The loop ends once the budget is spent, usually after a few dozen of the words: they are
    # made Python numbers a chunk at a time.
    for chunk in range(0, num_words, _CHUNK_WORDS):
        for first_word, draw in zip(order[chunk:chunk + _CHUNK_WORDS].tolist(),
                                    ngram_draws[chunk:chunk + _CHUNK_WORDS].tolist()):
            if num_selected >= budget:
                return chosen
            # The reference's `cand_indexes[idx:idx + n]` stops at the last word.
            n = min(bisect.bisect_right(cumulative, draw) + 1, max_ngram, num_words - first_word)
            size = sum(word_lengths[first_word:first_word + n])
            while n > 1 and num_selected + size > budget:
                n -= 1
                size -= word_lengths[first_word + n]
            if num_selected + size > budget or any(covered[first_word:first_word + n]):
                continue
            covered[first_word:first_word + n] = [True] * n
            chosen.append((first_word, n))
            num_selected += size
    return chosen


_CHUNK_WORDS = 32


@functools.cache
def _cumulative_ngram_probabilities(max_ngram: int, favor_shorter_ngram: bool) -> list[float]:
    return np.cumsum(ngram_probabilities(max_ngram, favor_shorter_ngram)).tolist()


def mask_sequence(tokens: np.ndarray, boundary: np.ndarray, rng: np.random.Generator, *,
                  max_predictions: int, masked_lm_prob: float = 0.15, max_ngram: int = 3,
                  favor_shorter_ngram: bool = True, vocab_size: int, mask_id: int,
                  special_ids: Collection[int]) -> MaskedSequence:
    """Masks whole-word n-grams of one unpadded sequence (SPEC 1.4).

    tokens: int32 [n] unpadded `[CLS] A [SEP] B [SEP]`; boundary: int32 [n] from `token_boundary`.
    special_ids: never masked ([CLS], [SEP], and <pad> should padding be present).

    A word is a start piece plus the continuation pieces after it (`whole_words`, SPEC 1.4.1);
    n-grams of words are chosen as the reference does (`choose_ngrams`, SPEC 1.4.4-1.4.6) until
    num_to_predict tokens (SPEC 1.4.3) are covered; each chosen token is replaced 80/10/10
    (SPEC 1.4.7), the random id drawn from the whole vocabulary (SPEC 1.2.3). Two deliberate
    differences: a word never continues across a special token (the reference appends a
    continuation piece at the start of B, left there by front truncation, to the last word of
    A), and the 80/10/10 draw uses one uniform per token instead of two (same probabilities).
    """
    tokens = np.asarray(tokens, np.int32)
    word_starts, word_ends = whole_words(tokens, boundary, special_ids)
    budget = num_to_predict(len(tokens), max_predictions=max_predictions,
                            masked_lm_prob=masked_lm_prob)
    ngrams = choose_ngrams(word_starts, word_ends, rng, budget=budget, max_ngram=max_ngram,
                           favor_shorter_ngram=favor_shorter_ngram)
    # An n-gram is the tokens of its words: a [SEP] between two of them stays unmasked.
    selected = [position for first_word, n in ngrams for word in range(first_word, first_word + n)
                for position in range(word_starts[word], word_ends[word])]
    positions = np.array(sorted(selected), np.int32)
    original_ids = tokens[positions]
    input_ids = tokens.copy()
    replacement_draws = rng.random(len(positions))
    random_ids = rng.integers(0, vocab_size, len(positions)).astype(np.int32)
    input_ids[positions] = np.where(
        replacement_draws < MASK_PROB, mask_id,
        np.where(replacement_draws < MASK_PROB + KEEP_PROB, original_ids, random_ids))
    return MaskedSequence(input_ids=input_ids, masked_lm_positions=positions,
                          masked_lm_ids=original_ids)


def to_features(instance: Instance, masked: MaskedSequence, boundary: np.ndarray, *,
                seq_len: int, max_predictions: int) -> dict[str, np.ndarray]:
    """SPEC 1.5 features of one example, padded with 0 (`<pad>` is id 0, SPEC 2.1).

    input_ids, input_mask, segment_ids, token_boundary: int32 [seq_len];
    masked_lm_positions, masked_lm_ids: int32 [max_predictions]; masked_lm_weights: float32
    [max_predictions] (1.0 real, 0.0 padding); next_sentence_labels: int32 [1].
    """
    num_tokens, num_masked = len(masked.input_ids), len(masked.masked_lm_positions)
    if num_tokens > seq_len:
        raise ValueError(f"example has {num_tokens} tokens, more than seq_len={seq_len}")
    if num_masked > max_predictions:
        raise ValueError(f"example has {num_masked} predictions, more than "
                         f"max_predictions={max_predictions}")

    def padded(values: np.ndarray | int, length: int, size: int, dtype: type = np.int32
               ) -> np.ndarray:
        result: np.ndarray = np.zeros(length, dtype)
        result[:size] = values
        return result

    return {
        "input_ids": padded(masked.input_ids, seq_len, num_tokens),
        "input_mask": padded(1, seq_len, num_tokens),
        "segment_ids": padded(instance.segment_ids, seq_len, num_tokens),
        "token_boundary": padded(boundary, seq_len, num_tokens),
        "masked_lm_positions": padded(masked.masked_lm_positions, max_predictions, num_masked),
        "masked_lm_ids": padded(masked.masked_lm_ids, max_predictions, num_masked),
        "masked_lm_weights": padded(1, max_predictions, num_masked, np.float32),
        "next_sentence_labels": np.array([instance.next_sentence_label], np.int32),
    }


def mask_instance(instance: Instance, boundary: np.ndarray, rng: np.random.Generator,
                  settings: MaskingSettings) -> dict[str, np.ndarray]:
    """The SPEC 1.5 features of `instance` with new SPEC 1.4 masks (`mask_sequence`).

    boundary: int32 [n] from `token_boundary`; the features are those of `to_features`.
    """
    masked = mask_sequence(
        instance.tokens, boundary, rng, max_predictions=settings.max_predictions,
        masked_lm_prob=settings.masked_lm_prob, max_ngram=settings.max_ngram,
        favor_shorter_ngram=settings.favor_shorter_ngram, vocab_size=settings.vocab_size,
        mask_id=settings.mask_id, special_ids=settings.special_ids)
    return to_features(instance, masked, boundary, seq_len=settings.seq_len,
                       max_predictions=settings.max_predictions)


def remask_features(features: dict[str, np.ndarray], rng: np.random.Generator,
                    settings: MaskingSettings) -> dict[str, np.ndarray]:
    """Dynamic masking: the features of a stored example with its masks drawn anew.

    The original tokens come back by `unmask_features`; segments, label and word boundaries
    are kept. In and out: the SPEC 1.5 features of one example (unbatched).
    """
    tokens = unmask_features(features)
    length = tokens.size
    instance = Instance(tokens=tokens, segment_ids=features["segment_ids"][:length],
                        next_sentence_label=int(features["next_sentence_labels"][0]))
    return mask_instance(instance, features["token_boundary"][:length], rng, settings)


def unmask_features(features: dict[str, np.ndarray]) -> np.ndarray:
    """int32 [n]: the original tokens of an example (masks undone, padding dropped)."""
    num_tokens = int(np.count_nonzero(features["input_mask"]))
    tokens = np.asarray(features["input_ids"][:num_tokens], np.int32).copy()
    real = np.asarray(features["masked_lm_weights"]) > 0
    tokens[np.asarray(features["masked_lm_positions"])[real]] = \
        np.asarray(features["masked_lm_ids"])[real]
    return tokens
