"""SQuAD post-processing (SPEC 8.3): the n-best spans of a question over all its windows, answer
texts cut from the original context by character offsets, the v2.0 null score and threshold,
and the prediction files in the reference formats.

  predictions, nbest = postprocess_v1(examples, infos, start_logits, end_logits)
  predictions, nbest, null_odds = postprocess_v2(examples, infos, outputs)   # model outputs
  with_null = apply_null_threshold(null_odds, predictions, best_f1_thresh)  # from official_eval
  write_prediction_files(directory, predictions, nbest, null_odds, with_null)

A span is a candidate when both ends lie in the context of one window, the window gives its start
token the most context, it is not reversed and has at most max_answer_length tokens (the
reference's rules). Candidates of all windows are ranked by their score, start + end; texts
that repeat a better one, and texts that are empty (a span of lone "▁" tokens), are skipped.
"""
from __future__ import annotations

import collections
import json
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np
from absl import logging

from albert_jax import files
from albert_jax.finetune.squad.data import FeatureInfo, SquadExample

N_BEST_SIZE = 20  # SPEC 8.3
MAX_ANSWER_LENGTH = 30  # tokens, SPEC 8.3

PREDICTIONS_FILE = "predictions.json"  # question id -> best non-null answer text
NBEST_FILE = "nbest_predictions.json"  # question id -> [{text, probability, scores}, ...]
# v2.0: question id -> null score minus best non-null score (the evaluator's na_prob)
NULL_ODDS_FILE = "null_odds.json"
PREDICTIONS_WITH_NULL_FILE = "predictions_with_null.json"  # v2.0: "" where no answer wins

V2_OUTPUT_KEYS = ("start_top_log_probs", "start_top_index", "end_top_log_probs",
                  "end_top_index", "cls_logits")


def _best_indexes(scores: np.ndarray, count: int) -> np.ndarray:
    # Highest first; among equal scores the lower position first (the reference's stable sort).
    return np.argsort(-scores, kind="stable")[:count]


def _window_span(info: FeatureInfo, start: int, end: int, max_answer_length: int
                 ) -> tuple[int, int] | None:
    """Window-relative context tokens of sequence positions start..end, None if not a candidate."""
    start, end = start - info.context_offset, end - info.context_offset
    num_tokens = len(info.char_starts)
    if not (0 <= start < num_tokens and 0 <= end < num_tokens):
        return None
    if not info.is_max_context[start] or end < start or end - start + 1 > max_answer_length:
        return None
    return start, end


def _check_sizes(examples: Sequence[SquadExample], infos: Sequence[FeatureInfo],
                 arrays: Mapping[str, np.ndarray]) -> dict[int, list[int]]:
    for name, array in arrays.items():
        if np.shape(array)[0] != len(infos):
            raise ValueError(f"{name} has {np.shape(array)[0]} rows but there are {len(infos)} "
                             "features; give one row per feature, in the order of build_features")
    by_example: dict[int, list[int]] = collections.defaultdict(list)  # example -> features
    for feature_index, info in enumerate(infos):
        by_example[info.example_index].append(feature_index)
    missing = [example.id for index, example in enumerate(examples) if index not in by_example]
    if missing or (by_example and max(by_example) >= len(examples)):
        raise ValueError(f"the features do not belong to these {len(examples)} examples (no "
                         f"feature for question ids {missing[:5]}); post-process with the "
                         "examples that build_features was given")
    return by_example


def _nbest(example: SquadExample, infos: Sequence[FeatureInfo],
           candidates: list[tuple[float, int, int, int, float, float]], n_best_size: int,
           score_names: tuple[str, str], empty_scores: tuple[float, float]
           ) -> list[dict[str, Any]]:
    """The n best distinct texts among (score, feature, start, end, start_score, end_score)."""
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _, feature_index, start, end, start_score, end_score in sorted(
            candidates, key=lambda candidate: candidate[0], reverse=True):
        if len(entries) == n_best_size:
            break
        text = infos[feature_index].text(example.context, start, end).strip()
        if not text or text in seen:
            continue
        seen.add(text)
        entries.append({"text": text, score_names[0]: start_score, score_names[1]: end_score})
    if not entries:  # No valid span in any window (the reference adds a nonce entry too).
        entries.append({"text": "", score_names[0]: empty_scores[0],
                        score_names[1]: empty_scores[1]})
    totals = np.array([entry[score_names[0]] + entry[score_names[1]] for entry in entries])
    probabilities = np.exp(totals - totals.max())
    probabilities /= probabilities.sum()
    return [{"text": entry["text"], "probability": float(probability),
             score_names[0]: entry[score_names[0]], score_names[1]: entry[score_names[1]]}
            for entry, probability in zip(entries, probabilities)]


def _warn_unanswered(predictions: Mapping[str, str]) -> None:
    unanswered = [qid for qid, text in predictions.items() if not text]
    if unanswered:
        logging.warning("SQuAD post-processing: %d questions have no valid span in any window "
                        "(their prediction is \"\"), e.g. %s", len(unanswered), unanswered[:5])


def postprocess_v1(examples: Sequence[SquadExample], infos: Sequence[FeatureInfo],
                   start_logits: np.ndarray, end_logits: np.ndarray, *,
                   n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH
                   ) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]]]:
    """SQuAD v1.1 predictions from start_logits, end_logits [num_features, seq].

    Each window proposes its n_best_size best starts x n_best_size best ends (reference
    `_get_best_indexes`); the score of a span is start_logit + end_logit.

    Returns (predictions: question id -> text, nbest: question id -> [{"text", "probability",
    "start_logit", "end_logit"}, ...] best first; probability = softmax over the n-best scores).
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    by_example = _check_sizes(examples, infos, {"start_logits": start_logits,
                                                "end_logits": end_logits})
    predictions, nbest = {}, {}
    for example_index, example in enumerate(examples):
        candidates = []
        for feature_index in by_example[example_index]:
            info = infos[feature_index]
            feature_start, feature_end = start_logits[feature_index], end_logits[feature_index]
            for start in _best_indexes(feature_start, n_best_size):
                for end in _best_indexes(feature_end, n_best_size):
                    span = _window_span(info, start, end, max_answer_length)
                    if span is not None:
                        start_score, end_score = float(feature_start[start]), float(
                            feature_end[end])
                        candidates.append((start_score + end_score, feature_index, *span,
                                           start_score, end_score))
        nbest[example.id] = _nbest(example, infos, candidates, n_best_size,
                                    ("start_logit", "end_logit"), (0.0, 0.0))
        predictions[example.id] = nbest[example.id][0]["text"]
    _warn_unanswered(predictions)
    return predictions, nbest


def postprocess_v2(examples: Sequence[SquadExample], infos: Sequence[FeatureInfo],
                   outputs: Mapping[str, np.ndarray], *, n_best_size: int = N_BEST_SIZE,
                   max_answer_length: int = MAX_ANSWER_LENGTH
                   ) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]], dict[str, float]]:
    """SQuAD v2.0 predictions from the inference outputs of the v2 head, one row per feature:
    start_top_log_probs, start_top_index [num_features, start_n_top], end_top_log_probs,
    end_top_index [num_features, start_n_top * end_n_top] (row i * end_n_top + j: the j-th end
    for the i-th start), cls_logits [num_features].

    Returns (predictions: question id -> best non-null text, nbest: question id ->
    [{"text", "probability", "start_log_prob", "end_log_prob"}, ...], null_odds: question id ->
    null score MINUS the best non-null score). The null score is the reference's
    (`write_predictions_v2`): the smallest cls_logits over the question's windows, the log-odds
    of "no answer" the XLNet-style head is trained for (SPEC 8.3). The best non-null score is
    start_log_prob + end_log_prob of nbest[0] (-2e6 when no span is valid, so that question
    says "no answer" at any threshold). The reference writes the null score alone; subtracting
    the best span's score, as BERT's null_odds.json does, also weighs how sure the model is of
    its best span, and keeps one meaning for the file: larger = "no answer" more likely.
    """
    missing = [key for key in V2_OUTPUT_KEYS if key not in outputs]
    if missing:
        raise ValueError(f"v2.0 post-processing needs the model outputs {V2_OUTPUT_KEYS}; "
                         f"missing {missing} (run the v2 model without start_positions)")
    arrays = {key: np.asarray(outputs[key]) for key in V2_OUTPUT_KEYS}
    by_example = _check_sizes(examples, infos, arrays)
    start_n_top = arrays["start_top_index"].shape[1]
    end_n_top = arrays["end_top_index"].shape[1] // start_n_top
    predictions, nbest, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        candidates = []
        null_score = math.inf
        for feature_index in by_example[example_index]:
            info = infos[feature_index]
            null_score = min(null_score, float(arrays["cls_logits"][feature_index]))
            for i in range(start_n_top):
                start = int(arrays["start_top_index"][feature_index, i])
                start_score = float(arrays["start_top_log_probs"][feature_index, i])
                for j in range(end_n_top):
                    end = int(arrays["end_top_index"][feature_index, i * end_n_top + j])
                    span = _window_span(info, start, end, max_answer_length)
                    if span is not None:
                        end_score = float(arrays["end_top_log_probs"][feature_index,
                                                                      i * end_n_top + j])
                        candidates.append((start_score + end_score, feature_index, *span,
                                           start_score, end_score))
        nbest[example.id] = _nbest(example, infos, candidates, n_best_size,
                                    ("start_log_prob", "end_log_prob"), (-1e6, -1e6))
        best = nbest[example.id][0]
        predictions[example.id] = best["text"]
        null_odds[example.id] = null_score - (best["start_log_prob"] + best["end_log_prob"])
    _warn_unanswered(predictions)
    return predictions, nbest, null_odds


def apply_null_threshold(null_odds: Mapping[str, float], predictions: Mapping[str, str],
                         threshold: float) -> dict[str, str]:
    """predictions with "" where null_odds > threshold (no answer).

    Strictly greater, as the official evaluator's `apply_no_ans_threshold` and `find_best_thresh`
    count it, so these predictions score exactly its best_f1 at threshold=best_f1_thresh. (The
    reference's `write_predictions_v2` answers only below the threshold, which differs at a
    question whose null score equals the threshold.)
    """
    missing = [qid for qid in predictions if qid not in null_odds]
    if missing:
        raise ValueError(f"no null score for question ids {missing[:5]}; give the null_odds "
                         "that postprocess_v2 returned with these predictions")
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in predictions.items()}


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Writes `obj` as indented UTF-8 JSON, atomically (a temporary file, then a rename)."""
    files.write_atomically(path, json.dumps(obj, indent=4, ensure_ascii=False) + "\n")


def write_prediction_files(directory: str | os.PathLike, predictions: Mapping[str, str],
                           nbest: Mapping[str, Any], null_odds: Mapping[str, float] | None = None,
                           predictions_with_null: Mapping[str, str] | None = None
                           ) -> dict[str, str]:
    """Writes predictions.json, nbest_predictions.json and, when given (v2.0), null_odds.json
    and predictions_with_null.json into `directory`; returns file name -> path."""
    contents = {PREDICTIONS_FILE: predictions, NBEST_FILE: nbest, NULL_ODDS_FILE: null_odds,
                PREDICTIONS_WITH_NULL_FILE: predictions_with_null}
    written = {}
    for name, obj in contents.items():
        if obj is not None:
            written[name] = os.path.join(os.fspath(directory), name)
            write_json(written[name], obj)
    return written
