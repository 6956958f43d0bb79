"""Tokenized documents -> sentence-pair instances `[CLS] A [SEP] B [SEP]` (SPEC 1.3).

Pure NumPy; every random choice comes from the one `numpy.random.Generator` passed in (the
reference mixes Python's `random.Random` with NumPy's global RNG, SPEC 1.6.b).

Sentence objectives (config.data.sentence_objective, paper Table 5):
  "sop":  B follows A in the document; half the pairs are swapped, label 1 (SPEC 1.3.5b, 1.3.9).
  "nsp":  BERT's next-sentence prediction: half the B are taken from another document, label 1.
  "none": pairs as in "sop", never swapped, label 0 (MLM-only ablation).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

SENTENCE_OBJECTIVES = ("sop", "nsp", "none")
_RANDOM_DOCUMENT_TRIES = 10  # SPEC 1.3.5a


@dataclasses.dataclass
class Instance:
    """One training pair, unpadded.

    tokens: int32 [n], `[CLS] A [SEP] B [SEP]` (SPEC 1.3.8), n <= max_seq_length.
    segment_ids: int32 [n], 0 for [CLS], A and the first [SEP]; 1 for B and the last [SEP].
    next_sentence_label: 1 = swapped (SOP) or random next (NSP); 0 = in order (SPEC 1.3.9).
    """
    tokens: np.ndarray
    segment_ids: np.ndarray
    next_sentence_label: int


def create_instances(documents: Sequence[Sequence[np.ndarray]], rng: np.random.Generator, *,
                     max_seq_length: int, short_seq_prob: float = 0.1,
                     sentence_objective: str = "sop", reference_compat: bool = False,
                     cls_id: int, sep_id: int) -> list[Instance]:
    """One pass over `documents` (each a list of int32 [num_tokens] sentences), shuffled.

    The caller runs dupe_factor passes, each with its own generator (SPEC 1.1 dupe_factor).

    SPEC 1.3.5a QUIRK, single-segment chunks (a document of one sentence, or one sentence long
    enough to fill the target length alone): with `reference_compat=True` the chunk takes B from
    a random other document and is labelled 1 even in SOP mode, as the released code does. By
    default (our fix) the chunk is split inside its sentence at a uniformly random token
    boundary into A and B, which are then swapped or not exactly like multi-segment chunks: SOP
    stays a pure order task with balanced labels, and a label-1 example never means "B is from
    elsewhere" (google-research/albert#234). A chunk of a single token cannot be split: it gives
    no instance. In "nsp" mode a single-segment chunk takes a random-document B (labelled 1)
    either way, as in BERT.
    """
    if sentence_objective not in SENTENCE_OBJECTIVES:
        raise ValueError(f"sentence_objective={sentence_objective!r}; expected one of "
                         f"{SENTENCE_OBJECTIVES}")
    if max_seq_length < 5:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for two segments "
                         f"and 3 special tokens; use at least 5")
    # SPEC 1.2.2: empty documents are dropped (empty sentences cannot occur in the reference).
    documents = [[np.asarray(sentence, np.int32) for sentence in document if len(sentence)]
                 for document in documents]
    documents = [document for document in documents if document]
    instances = []
    for document_index in range(len(documents)):
        instances.extend(_document_instances(
            documents, document_index, rng, max_seq_length=max_seq_length,
            short_seq_prob=short_seq_prob, sentence_objective=sentence_objective,
            reference_compat=reference_compat, cls_id=cls_id, sep_id=sep_id))
    rng.shuffle(instances)  # SPEC 1.3.10
    return instances


def _document_instances(documents: Sequence[Sequence[np.ndarray]], document_index: int,
                        rng: np.random.Generator, *, max_seq_length: int, short_seq_prob: float,
                        sentence_objective: str, reference_compat: bool, cls_id: int,
                        sep_id: int) -> list[Instance]:
    """SPEC 1.3 `create_instances_from_document`, step by step."""
    document = documents[document_index]
    max_num_tokens = max_seq_length - 3  # SPEC 1.3.1
    # SPEC 1.3.2: the target length is drawn once per document per pass.
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = int(rng.integers(2, max_num_tokens, endpoint=True))
    instances = []
    current_chunk: list[np.ndarray] = []
    current_length = 0
    i = 0
    while i < len(document):
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:  # SPEC 1.3.3
            # SPEC 1.3.4
            a_end = 1 if len(current_chunk) == 1 else int(
                rng.integers(1, len(current_chunk) - 1, endpoint=True))
            tokens_a = np.concatenate(current_chunk[:a_end])
            single_segment = len(current_chunk) == 1
            if sentence_objective == "nsp" or (single_segment and reference_compat):
                random_next = single_segment or rng.random() < 0.5
            else:
                random_next = False
            if random_next:  # SPEC 1.3.5a
                tokens_b = _random_document_tokens(documents, document_index, rng,
                                                   target_seq_length - len(tokens_a))
                i -= len(current_chunk) - a_end  # Put the unused segments back.
                label = 0 if sentence_objective == "none" else 1
            else:
                if single_segment:  # Our fix of the SPEC 1.3.5a quirk (see create_instances).
                    if len(tokens_a) < 2:
                        current_chunk, current_length = [], 0
                        i += 1
                        continue
                    split = int(rng.integers(1, len(tokens_a) - 1, endpoint=True))
                    tokens_a, tokens_b = tokens_a[:split], tokens_a[split:]
                else:
                    tokens_b = np.concatenate(current_chunk[a_end:])
                label = 0
                if sentence_objective == "sop" and rng.random() < 0.5:  # SPEC 1.3.5b
                    tokens_a, tokens_b = tokens_b, tokens_a
                    label = 1
            tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            instances.append(_pack(tokens_a, tokens_b, label, cls_id, sep_id))
            current_chunk, current_length = [], 0
        i += 1
    return instances


def _random_document_tokens(documents: Sequence[Sequence[np.ndarray]], document_index: int,
                            rng: np.random.Generator, target_b_length: int) -> np.ndarray:
    """SPEC 1.3.5a: sentences of another document from a random start, until target length."""
    for _ in range(_RANDOM_DOCUMENT_TRIES):
        random_document_index = int(rng.integers(0, len(documents) - 1, endpoint=True))
        if random_document_index != document_index:
            break
    random_document = documents[random_document_index]
    random_start = int(rng.integers(0, len(random_document) - 1, endpoint=True))
    tokens_b, length = [], 0
    for sentence in random_document[random_start:]:
        tokens_b.append(sentence)
        length += len(sentence)
        if length >= target_b_length:
            break
    return np.concatenate(tokens_b)


def truncate_seq_pair(tokens_a: np.ndarray, tokens_b: np.ndarray, max_num_tokens: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """SPEC 1.3.6: trims the pair to `max_num_tokens`, one token at a time from the longer one
    (B on ties), from its front or its back with probability 1/2 each.

    Computed in closed form rather than token by token: which side loses each token depends only
    on the lengths, and the number of front deletions of a side is Binomial(removed, 1/2), the
    same distribution as the reference's per-token coin flips.
    """
    length_a, length_b = len(tokens_a), len(tokens_b)
    excess = length_a + length_b - max_num_tokens
    if excess <= 0:
        return tokens_a, tokens_b
    removed_a = min(excess, max(0, length_a - length_b))  # The longer one shrinks first ...
    removed_b = min(excess, max(0, length_b - length_a))
    balanced_excess = excess - removed_a - removed_b  # ... then B, A, B, A, ... from equal lengths.
    removed_b += (balanced_excess + 1) // 2
    removed_a += balanced_excess // 2
    trimmed = []
    for tokens, removed in ((tokens_a, removed_a), (tokens_b, removed_b)):
        from_front = int(rng.binomial(removed, 0.5)) if removed else 0
        trimmed.append(tokens[from_front:len(tokens) - (removed - from_front)])
    return trimmed[0], trimmed[1]


def _pack(tokens_a: np.ndarray, tokens_b: np.ndarray, label: int, cls_id: int,
          sep_id: int) -> Instance:
    # SPEC 1.3.7-1.3.8: both segments non-empty; [CLS] A [SEP] B [SEP] with segment ids 0/1.
    assert len(tokens_a) >= 1 and len(tokens_b) >= 1, (len(tokens_a), len(tokens_b))
    tokens = np.concatenate([[cls_id], tokens_a, [sep_id], tokens_b, [sep_id]]).astype(np.int32)
    segment_ids = np.zeros(len(tokens), np.int32)
    segment_ids[len(tokens_a) + 2:] = 1
    return Instance(tokens=tokens, segment_ids=segment_ids, next_sentence_label=label)
