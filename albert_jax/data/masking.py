"""Whole-word n-gram masking (SPEC 1.4) and the padded example features (SPEC 1.5).

Pure NumPy and a pure function of its inputs: static masking calls `mask_sequence` once per
instance and dupe pass at build time; dynamic masking calls it per example and epoch with a
generator derived from (seed, epoch, index), after `unmask_features` recovered the tokens.
"""
from __future__ import annotations

import bisect
from typing import Collection, NamedTuple

import numpy as np

from albert_jax.data.instances import Instance

# SPEC 1.4.7: [MASK] 80%, the original token 10%, a random vocabulary id 10%.
MASK_PROB = 0.8
KEEP_PROB = 0.1


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

    word_start: bool [vocab_size], `Tokenizer.word_start` (SPEC 1.4.2 start-piece test).
    """
    tokens = np.asarray(tokens)
    return (word_start[tokens] | np.isin(tokens, list(special_ids))).astype(np.int32)


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


def mask_sequence(tokens: np.ndarray, boundary: np.ndarray, rng: np.random.Generator, *,
                  max_predictions: int, masked_lm_prob: float = 0.15, max_ngram: int = 3,
                  favor_shorter_ngram: bool = True, vocab_size: int, mask_id: int,
                  special_ids: Collection[int]) -> MaskedSequence:
    """Masks whole-word n-grams of one unpadded sequence (SPEC 1.4).

    tokens: int32 [n] unpadded `[CLS] A [SEP] B [SEP]`; boundary: int32 [n] from `token_boundary`.
    special_ids: never masked ([CLS], [SEP], and <pad> should padding be present).

    A word is a start piece plus the continuation pieces after it (SPEC 1.4.1); an n-gram is n
    consecutive words. As the reference: word n-grams are visited in random order, n is drawn
    with p ∝ 1/n over the lengths that fit before the sequence end (SPEC 1.4.5), shortened while
    it would overshoot num_to_predict, skipped if it still does or overlaps an earlier n-gram
    (SPEC 1.4.6); each chosen token is replaced 80/10/10 (SPEC 1.4.7), the random id drawn from
    the whole vocabulary (SPEC 1.2.3). Two deliberate differences: a word never continues across
    a special token (the reference appends a continuation piece at the start of B, left there by
    front truncation, to the last word of A), and the 80/10/10 draw uses one uniform per token
    instead of two (same probabilities).
    """
    tokens = np.asarray(tokens, np.int32)
    num_tokens = len(tokens)
    is_special = np.isin(tokens, list(special_ids))
    previous_special = np.concatenate([[True], is_special[:-1]])
    starts_word = ~is_special & ((np.asarray(boundary) == 1) | previous_special)
    word_starts = np.flatnonzero(starts_word)
    # A word ends at the next word start or special token.
    word_breaks = np.concatenate([np.flatnonzero(starts_word | is_special), [num_tokens]])
    word_ends = word_breaks[np.searchsorted(word_breaks, word_starts, side="right")]

    budget = num_to_predict(num_tokens, max_predictions=max_predictions,
                            masked_lm_prob=masked_lm_prob)
    probabilities = ngram_probabilities(max_ngram, favor_shorter_ngram)
    # Cumulative distributions of n over the first k lengths, renormalised (SPEC 1.4.6).
    cumulative = [np.cumsum(probabilities[:k] / probabilities[:k].sum()).tolist()
                  for k in range(1, max_ngram + 1)]
    num_words = len(word_starts)
    order = rng.permutation(num_words).tolist()  # SPEC 1.4.5: shuffled n-gram start words
    ngram_draws = rng.random(num_words).tolist()
    starts, ends = word_starts.tolist(), word_ends.tolist()
    covered = [False] * num_words
    selected: list[int] = []
    for first_word, draw in zip(order, ngram_draws):
        if len(selected) >= budget:
            break
        available = min(max_ngram, num_words - first_word)
        n = min(bisect.bisect_right(cumulative[available - 1], draw) + 1, available)
        # Shorter n-grams while this one would overshoot the budget (SPEC 1.4.6).
        while n > 1 and len(selected) + ends[first_word + n - 1] - starts[first_word] > budget:
            n -= 1
        if len(selected) + ends[first_word + n - 1] - starts[first_word] > budget:
            continue
        if any(covered[first_word:first_word + n]):
            continue
        covered[first_word:first_word + n] = [True] * n
        selected.extend(range(starts[first_word], ends[first_word + n - 1]))

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

    def padded(values: np.ndarray, length: int, dtype: type = np.int32) -> np.ndarray:
        result = np.zeros(length, dtype)
        result[:len(values)] = values
        return result

    return {
        "input_ids": padded(masked.input_ids, seq_len),
        "input_mask": padded(np.ones(num_tokens), seq_len),
        "segment_ids": padded(instance.segment_ids, seq_len),
        "token_boundary": padded(boundary, seq_len),
        "masked_lm_positions": padded(masked.masked_lm_positions, max_predictions),
        "masked_lm_ids": padded(masked.masked_lm_ids, max_predictions),
        "masked_lm_weights": padded(np.ones(num_masked), max_predictions, np.float32),
        "next_sentence_labels": np.array([instance.next_sentence_label], np.int32),
    }


def unmask_features(features: dict[str, np.ndarray]) -> np.ndarray:
    """int32 [n]: the original tokens of an example (masks undone, padding dropped)."""
    num_tokens = int(np.count_nonzero(features["input_mask"]))
    tokens = np.asarray(features["input_ids"][:num_tokens], np.int32).copy()
    real = np.asarray(features["masked_lm_weights"]) > 0
    tokens[np.asarray(features["masked_lm_positions"])[real]] = \
        np.asarray(features["masked_lm_ids"])[real]
    return tokens
