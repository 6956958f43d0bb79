"""Tagged sentences -> model rows: each word tokenised on its own, its tag on its first piece, a
long sentence cut into overlapping windows.

  arrays = token_features.build(sentences, tokenizer, seq_len=128, doc_stride=64,
                                label_ids={"O": 0, "B-PER": 1, "I-PER": 2})
  tags = token_features.word_tags(arrays_predicted, num_sentences, labels)

A row is [CLS] pieces [SEP] (segment 0). `labels` holds the tag id of each word on its first
piece and -100 (HuggingFace's ignored index) on the other pieces, [CLS], [SEP] and padding; with
`label_all_pieces` the other pieces of a word carry its tag too, B-X as I-X (run_ner.py's
label_all_tokens). A sentence of more pieces than a row holds is cut into windows `doc_stride`
pieces apart (SQuAD's doc spans, core/windows.py); every word is predicted from the one
window where its first piece has the most context (max_context_windows), so no word is
dropped or predicted twice. `word_index` says which word a row predicts at each position (-1:
none) and `sentence_index` which sentence a row is of: predictions carry both back, whatever
order the rows ran in.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from albert_jax.data.tokenizers import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune.core.examples import Sentence
from albert_jax.finetune.core.windows import max_context_windows, sliding_windows

IGNORED = -100  # the label of a position that is not in the loss (HuggingFace's convention)


def word_pieces(tokenizer: Tokenizer, tokens: Sequence[str]) -> list[np.ndarray]:
    """The piece ids of each word, tokenised on its own; a word the tokenizer reads as nothing
    (a control character) is one <unk>, so that every word has a first piece to be tagged at."""
    pieces = []
    for token in tokens:
        ids = tokenizer.encode(token)
        pieces.append(ids if ids.size else np.asarray([tokenizer.unk_id], np.int32))
    return pieces


def _continuation_ids(label_ids: Mapping[str, int]) -> dict[int, int]:
    """tag id -> the id the other pieces of a word take under label_all_pieces (B-X -> I-X
    where the label list has I-X)."""
    return {index: label_ids.get("I-" + tag[2:], index) if tag.startswith("B-") else index
            for tag, index in label_ids.items()}


def build(sentences: Sequence[Sentence], tokenizer: Tokenizer, *, seq_len: int, doc_stride: int,
          label_ids: Mapping[str, int] | None = None,
          label_all_pieces: bool = False) -> dict[str, np.ndarray]:
    """The rows of `sentences`: input_ids, segment_ids, input_mask, word_index and (with
    `label_ids`, tag -> class id) labels, int32 [rows, seq_len]; sentence_index int32 [rows]."""
    if seq_len < 3:
        raise ConfigError(f"config seq_len={seq_len}: a row needs [CLS], a piece and [SEP]")
    if doc_stride < 1:
        raise ConfigError(f"config data.doc_stride={doc_stride} must be at least 1")
    continuation = _continuation_ids(label_ids) if label_ids and label_all_pieces else None
    rows: dict[str, list[np.ndarray]] = {key: [] for key in (
        "input_ids", "input_mask", "word_index", "labels", "sentence_index")}
    for number, sentence in enumerate(sentences):
        pieces = word_pieces(tokenizer, sentence.tokens)
        ids = np.concatenate(pieces)
        word_of_piece = np.repeat(np.arange(len(pieces)), [len(p) for p in pieces])
        is_first = np.zeros(len(ids), bool)
        is_first[np.cumsum([0] + [len(p) for p in pieces[:-1]])] = True
        piece_labels = None
        if label_ids is not None:
            word_labels = np.asarray([label_ids[tag] for tag in sentence.known_tags()], np.int32)
            piece_labels = np.where(is_first, word_labels[word_of_piece], IGNORED)
            if continuation is not None:
                piece_labels = np.where(is_first, piece_labels, [
                    continuation[label] for label in word_labels[word_of_piece]])
        windows = sliding_windows(len(ids), seq_len - 2, doc_stride)
        best_window = max_context_windows(windows, len(ids))
        for window, (start, length) in enumerate(windows):
            span = slice(start, start + length)
            row_ids = np.zeros(seq_len, np.int32)
            row_ids[:length + 2] = [tokenizer.cls_id, *ids[span], tokenizer.sep_id]
            mask = np.zeros(seq_len, np.int32)
            mask[:length + 2] = 1
            word_index = np.full(seq_len, -1, np.int32)
            predicts = is_first[span] & (best_window[span] == window)
            word_index[1:length + 1] = np.where(predicts, word_of_piece[span], -1)
            labels = np.full(seq_len, IGNORED, np.int32)
            if piece_labels is not None:
                labels[1:length + 1] = piece_labels[span]
            for key, value in (("input_ids", row_ids), ("input_mask", mask),
                               ("word_index", word_index), ("labels", labels),
                               ("sentence_index", np.asarray(number, np.int32))):
                rows[key].append(value)
    arrays = {key: np.stack(value).astype(np.int32) if value else
              np.zeros((0,) if key == "sentence_index" else (0, seq_len), np.int32)
              for key, value in rows.items()}
    arrays["segment_ids"] = np.zeros_like(arrays["input_ids"])
    if label_ids is None:
        del arrays["labels"]
    return arrays


def word_tags(predictions: Mapping[str, np.ndarray], num_sentences: int,
              labels: Sequence[str]) -> list[list[str]]:
    """Each sentence's predicted tags, one per word, from the rows' `prediction` (class id
    [rows, seq]), `word_index` [rows, seq] and `sentence_index` [rows] (padding rows removed)."""
    tags: list[dict[int, str]] = [{} for _ in range(num_sentences)]
    rows, positions = np.nonzero(predictions["word_index"] >= 0)
    for row, position in zip(rows.tolist(), positions.tolist()):
        tags[int(predictions["sentence_index"][row])][
            int(predictions["word_index"][row, position])] = labels[
            int(predictions["prediction"][row, position])]
    return [[sentence[word] for word in range(len(sentence))] for sentence in tags]
