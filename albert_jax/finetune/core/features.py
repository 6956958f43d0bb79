"""Fine-tuning features: token id arrays of sentence pairs (GLUE, SPEC 8.1) and of multiple-choice
questions (RACE, SPEC 8.4, and a user's own questions with any number of options).

  features = classification_features(examples, tokenizer, 128, glue.labels("mnli"))
  features["input_ids"]      # int32 [num_examples, 128]: [CLS] A [SEP] B [SEP] <pad>...

Whole train sets are tokenised at once: every distinct text is encoded once (MNLI repeats each
premise about three times) into one flat id array, and the [num_examples, seq_len] arrays are
gathered from it with NumPy, so no Python loop runs per token.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from albert_jax.data.tokenizers import Tokenizer

_ROWS_PER_CHUNK = 4096  # Rows gathered at once: bounds the [rows, seq_len] int64 temporaries.


class _TokenPool:
    """The ids of many texts in one flat array; each distinct text is encoded once.

    `add(texts)` returns (starts, lengths), int64 [len(texts)]: text i is
    `flat[starts[i]:starts[i] + lengths[i]]` once `flat` is built.
    """

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._slot_of_text: dict[str, int] = {}
        self._ids: list[np.ndarray] = []

    def add(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        slots = np.empty(len(texts), np.int64)
        for position, text in enumerate(texts):
            slot = self._slot_of_text.get(text)
            if slot is None:
                slot = self._slot_of_text[text] = len(self._ids)
                self._ids.append(self._tokenizer.encode(text))
            slots[position] = slot
        lengths = np.array([len(ids) for ids in self._ids], np.int64)
        starts = np.cumsum(lengths) - lengths
        return starts[slots], lengths[slots]

    def flat(self) -> np.ndarray:
        """All ids, int32 [total + 1]; a final pad id keeps gathers of empty texts in range."""
        return np.concatenate(self._ids + [np.array([self._tokenizer.pad_id], np.int32)])


def _truncated_pair_lengths(length_a: np.ndarray, length_b: np.ndarray,
                            max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """SPEC 8.1, the reference `_truncate_seq_pair` in closed form (all int64 [rows]).

    The reference pops one token at a time from the END of the longer sequence, and from B on a
    tie, until the pair fits. So the longer one alone is cut while that suffices; otherwise both
    end at the shared length, A keeping the odd token: ceil(max/2) and floor(max/2).
    """
    excess = np.maximum(length_a + length_b - max_length, 0)
    cut_a_only = length_a - length_b >= excess
    cut_b_only = ~cut_a_only & (length_b - length_a >= excess)
    both_cut = ~cut_a_only & ~cut_b_only
    new_a = np.where(cut_a_only, length_a - excess, np.where(both_cut, (max_length + 1) // 2,
                                                             length_a))
    new_b = np.where(cut_b_only, length_b - excess, np.where(both_cut, max_length // 2, length_b))
    return new_a, new_b


def _assemble(tokenizer: Tokenizer, flat: np.ndarray, start_a: np.ndarray, length_a: np.ndarray,
              start_b: np.ndarray, length_b: np.ndarray, has_b: np.ndarray,
              seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`[CLS] A [SEP] (B [SEP])` rows from already truncated spans of `flat`.

    Args: int64 [rows] spans (start, length) of A and B in `flat`; bool [rows] `has_b`.
    Returns: input_ids, segment_ids, input_mask, int32 [rows, seq_len]; segment 0 up to the first
      [SEP], 1 for B and its [SEP]; padding has id pad_id, segment 0, mask 0.
    """
    rows = len(start_a)
    input_ids = np.empty((rows, seq_len), np.int32)
    segment_ids = np.empty((rows, seq_len), np.int32)
    input_mask = np.empty((rows, seq_len), np.int32)
    position = np.arange(seq_len)[None, :]
    for first in range(0, rows, _ROWS_PER_CHUNK):
        chunk = slice(first, first + _ROWS_PER_CHUNK)
        len_a, len_b = length_a[chunk, None], length_b[chunk, None]
        b_rows = has_b[chunk, None]
        in_a = (position >= 1) & (position <= len_a)
        in_b = b_rows & (position >= len_a + 2) & (position < len_a + 2 + len_b)
        is_sep = (position == len_a + 1) | (b_rows & (position == len_a + 2 + len_b))
        length = len_a + 2 + np.where(b_rows, len_b + 1, 0)
        source = np.where(in_a, start_a[chunk, None] + position - 1,
                          np.where(in_b, start_b[chunk, None] + position - len_a - 2, -1))
        ids = np.where(is_sep, tokenizer.sep_id, flat[source])  # -1: the final pad id.
        ids[:, 0] = tokenizer.cls_id
        input_ids[chunk] = ids
        input_mask[chunk] = position < length
        segment_ids[chunk] = (position >= len_a + 2) & (position < length)
    return input_ids, segment_ids, input_mask


def _check_seq_len(seq_len: int) -> None:
    if seq_len < 3:
        raise ValueError(f"seq_len={seq_len} is too short: [CLS] A [SEP] B [SEP] needs at least 3")


def _pair_features(tokenizer: Tokenizer, texts_a: Sequence[str],
                   texts_b: Sequence[str | None], seq_len: int) -> tuple[np.ndarray, ...]:
    _check_seq_len(seq_len)
    pool = _TokenPool(tokenizer)
    start_a, length_a = pool.add(texts_a)
    start_b, length_b = pool.add(["" if text is None else text for text in texts_b])
    # As the reference (`if tokens_b:`), a B without tokens makes a single-sentence input.
    has_b = length_b > 0
    pair_a, pair_b = _truncated_pair_lengths(length_a, length_b, seq_len - 3)
    length_a = np.where(has_b, pair_a, np.minimum(length_a, seq_len - 2))
    length_b = np.where(has_b, pair_b, 0)
    return _assemble(tokenizer, pool.flat(), start_a, length_a, start_b, length_b, has_b, seq_len)


def encode_pair(tokenizer: Tokenizer, text_a: str, text_b: str | None,
                seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sentence (pair) as `[CLS] A [SEP] (B [SEP])` padded to `seq_len` (SPEC 8.1).

    A pair that does not fit loses tokens from the end of its longer sentence, one at a time
    (reference `_truncate_seq_pair`); a single sentence is cut to seq_len - 2 tokens.

    Returns:
      input_ids, segment_ids (0 for [CLS] A [SEP], 1 for B [SEP]), input_mask (1 real, 0 pad):
      int32 [seq_len] each.
    """
    input_ids, segment_ids, input_mask = _pair_features(tokenizer, [text_a], [text_b], seq_len)
    return input_ids[0], segment_ids[0], input_mask[0]


def classification_features(examples: Sequence[Any], tokenizer: Tokenizer, seq_len: int,
                            label_list: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    """The model inputs and labels of GLUE examples (objects with text_a, text_b, label, source).

    Returns:
      input_ids, segment_ids, input_mask: int32 [num_examples, seq_len] (see `encode_pair`);
      labels: int32 [num_examples], the label's index in `label_list`, or float32
      [num_examples] scores when `label_list` is None (regression). Unlabelled (test) examples
      get 0 / 0.0.
    """
    if label_list is None:
        labels = np.zeros(len(examples), np.float32)
        for position, example in enumerate(examples):
            if example.label is not None:
                try:
                    labels[position] = float(example.label)
                except ValueError:
                    raise ValueError(f"{example.source}: regression label {example.label!r} is "
                                     f"not a number") from None
    else:
        index_of_label = {label: index for index, label in enumerate(label_list)}
        labels = np.zeros(len(examples), np.int32)
        for position, example in enumerate(examples):
            if example.label is None:
                continue
            if example.label not in index_of_label:
                raise ValueError(f"{example.source}: unknown label {example.label!r}; the labels "
                                 f"are {', '.join(label_list)}")
            labels[position] = index_of_label[example.label]
    input_ids, segment_ids, input_mask = _pair_features(
        tokenizer, [example.text_a for example in examples],
        [example.text_b for example in examples], seq_len)
    return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
            "labels": labels}


def _question_with_option(tokenizer: Tokenizer, question: str, option: str) -> str:
    """SPEC 8.4: the option fills the question's blank "_", or follows the question.

    As the reference (race_utils.py), both are preprocessed before they are joined: with a
    SentencePiece model (SPEC 2.2) "_" is looked for in the lower-cased, whitespace-folded
    question; a WordPiece vocabulary's texts are joined as they are (SPEC 2.5).
    """
    question = tokenizer.preprocess(question)
    option = tokenizer.preprocess(option)
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def _multiple_choice_rows(tokenizer: Tokenizer, articles: Sequence[str],
                          questions: Sequence[str], options: Sequence[Sequence[str]],
                          seq_len: int, max_qa_length: int,
                          num_choices: int) -> tuple[np.ndarray, ...]:
    """input_ids, segment_ids, input_mask, int32 [len(articles), num_choices, seq_len]."""
    _check_seq_len(seq_len)
    if max_qa_length < 1:
        raise ValueError(f"max_qa_length={max_qa_length} must be at least 1")
    for choices in options:
        if len(choices) != num_choices:
            raise ValueError(f"a multiple-choice question needs {num_choices} options, got "
                             f"{len(choices)}: {list(choices)!r}")
    pool = _TokenPool(tokenizer)
    start_article, length_article = pool.add(
        [article for article in articles for _ in range(num_choices)])
    start_qa, length_qa = pool.add(
        [_question_with_option(tokenizer, question, option)
         for question, choices in zip(questions, options) for option in choices])
    # SPEC 8.4: keep the LAST max_qa_length tokens of question + option, then cut the article's
    # end to fit. The reference would fail an assertion when those tokens alone exceed
    # seq_len - 3 (its article slice goes negative); here they are cut to seq_len - 3 as well,
    # leaving no article tokens.
    kept_qa = np.minimum(length_qa, min(max_qa_length, seq_len - 3))
    start_qa += length_qa - kept_qa
    length_article = np.minimum(length_article, seq_len - 3 - kept_qa)
    arrays = _assemble(tokenizer, pool.flat(), start_article, length_article, start_qa, kept_qa,
                       np.ones(len(kept_qa), bool), seq_len)
    return tuple(array.reshape(len(articles), num_choices, seq_len) for array in arrays)


def encode_multiple_choice(tokenizer: Tokenizer, article: str, question: str,
                           options: Sequence[str], seq_len: int, max_qa_length: int = 128, *,
                           num_choices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One question as `num_choices` rows `[CLS] article [SEP] q_opt [SEP]` (SPEC 8.4).

    q_opt is `question.replace("_", option)` when the question has a blank "_", else
    `question + " " + option`, cut to its last `max_qa_length` tokens (and to seq_len - 3); the
    article is cut from its end to fit the rest of `seq_len`.

    Returns:
      input_ids, segment_ids (0 article part, 1 q_opt part), input_mask: int32
      [num_choices, seq_len]. `options` must hold exactly `num_choices` texts (RACE: 4).
    """
    input_ids, segment_ids, input_mask = _multiple_choice_rows(
        tokenizer, [article], [question], [options], seq_len, max_qa_length, num_choices)
    return input_ids[0], segment_ids[0], input_mask[0]


def multiple_choice_features(questions: Sequence[Any], tokenizer: Tokenizer, seq_len: int,
                             max_qa_length: int = 128, *,
                             num_choices: int) -> dict[str, np.ndarray]:
    """The model inputs and labels of multiple-choice questions (objects with article, question,
    options, answer: `examples.ChoiceQuestion`), each with `num_choices` options.

    Returns:
      input_ids, segment_ids, input_mask: int32 [num_questions, num_choices, seq_len] (see
      `encode_multiple_choice`); labels: int32 [num_questions], the answer 0..num_choices-1 (0
      when unknown).
    """
    input_ids, segment_ids, input_mask = _multiple_choice_rows(
        tokenizer, [question.article for question in questions],
        [question.question for question in questions],
        [question.options for question in questions], seq_len, max_qa_length, num_choices)
    labels = np.array([question.answer or 0 for question in questions], np.int32)
    return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
            "labels": labels}
