"""Sliding windows over a token sequence longer than the model's: SQuAD's contexts (the
reference's doc spans, SPEC 8.3) and token classification's long sentences are cut the same way.

  windows = sliding_windows(num_tokens, window_tokens, doc_stride)  # [(start, length), ...]
  best = max_context_windows(windows, num_tokens)  # int [num_tokens]: each token's window
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def sliding_windows(num_tokens: int, window_tokens: int,
                    doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the sliding windows over `num_tokens` tokens (reference doc_spans)."""
    windows = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, window_tokens)
        windows.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return windows


def max_context_windows(windows: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """int [num_tokens]: the window that gives each token its most context (reference
    `_check_is_max_context`: min(left, right) + 0.01 * length, the first window on ties)."""
    scores = np.full((len(windows), num_tokens), -np.inf)
    for index, (start, length) in enumerate(windows):
        positions = np.arange(start, start + length)
        scores[index, start:start + length] = (
            np.minimum(positions - start, start + length - 1 - positions) + 0.01 * length)
    return np.argmax(scores, axis=0)
