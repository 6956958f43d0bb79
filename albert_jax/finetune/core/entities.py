"""Entities of tag sequences and their scores: what a tagging task reports on dev.

  spans = entities(["B-PER", "I-PER", "O", "I-LOC"])     # [("PER", 0, 2), ("LOC", 3, 4)]
  scores = entity_scores(gold_sentences, predicted_sentences)
  # {"precision", "recall", "f1", "accuracy", "per_type": {"LOC": {...}, "PER": {...}}}

The numbers are those of seqeval 1.2.2 in its default mode (conlleval's rules), written here so
that seqeval stays a test-only dependency: an entity starts at B-X, or at I-X where the previous
tag is not of type X (an I-X after O starts one, as conlleval reads it), and goes on over the
I-X that follow; micro-averaged precision, recall and F1 over exact (type, start, end) matches;
0.0 where a ratio has no denominator (seqeval's zero_division default); accuracy over words.
Tags are IOB2 (`O`, `B-X`, `I-X`): custom/tagging_data.py converts the other schemes on reading.
"""
from __future__ import annotations

import collections
from typing import Any, Sequence

Entity = tuple[str, int, int]  # (type, start word, end word exclusive)


def entities(tags: Sequence[str]) -> list[Entity]:
    """The entities of one sentence's IOB2 tags, left to right (module docstring's rules)."""
    found: list[Entity] = []
    kind, start = None, 0
    for position, tag in enumerate([*tags, "O"]):
        prefix, tag_kind = (tag[0], tag[2:]) if tag != "O" else ("O", None)
        continues = prefix == "I" and tag_kind == kind
        if kind is not None and not continues:
            found.append((kind, start, position))
            kind = None
        if prefix != "O" and not continues:
            kind, start = tag_kind, position
    return found


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def _prf(correct: int, predicted: int, true: int) -> dict[str, float]:
    precision, recall = _ratio(correct, predicted), _ratio(correct, true)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def entity_scores(gold: Sequence[Sequence[str]],
                  predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall, F1 (micro, and per type under `per_type`, each with its
    `support`: the gold entities of the type) and word accuracy of `predicted` against `gold`
    (lists of sentences, each a list of IOB2 tags, one per word)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    true_counts, predicted_counts, correct_counts = (collections.Counter[str]() for _ in range(3))
    words = right = 0
    for gold_tags, predicted_tags in zip(gold, predicted):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"a sentence of {len(gold_tags)} gold tags has "
                             f"{len(predicted_tags)} predicted")
        words += len(gold_tags)
        right += sum(a == b for a, b in zip(gold_tags, predicted_tags))
        gold_entities, predicted_entities = set(entities(gold_tags)), set(entities(predicted_tags))
        true_counts.update(kind for kind, _, _ in gold_entities)
        predicted_counts.update(kind for kind, _, _ in predicted_entities)
        correct_counts.update(kind for kind, _, _ in gold_entities & predicted_entities)
    scores: dict[str, Any] = dict(_prf(sum(correct_counts.values()),
                                          sum(predicted_counts.values()), sum(true_counts.values())))
    scores["accuracy"] = _ratio(right, words)
    scores["per_type"] = {
        kind: dict(_prf(correct_counts[kind], predicted_counts[kind], true_counts[kind]),
                   support=true_counts[kind])
        for kind in sorted(set(true_counts) | set(predicted_counts))}
    return scores
