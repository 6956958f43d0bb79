"""The SQuAD evaluation: our own code, giving the numbers of the official scripts.

`evaluate` scores as `evaluate-v2.0.py` does (v1.1 data too: every question answerable) and
`evaluate_v1` as `evaluate-v1.1.py`. One departure: a question with no prediction scores 0 and
counts in every total, as v1.1 does, where the v2.0 script crashes.

  python -m albert_jax.finetune.squad.official_eval dev-v2.0.json predictions.json \
      [--na-prob-file=F]
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from typing import Any, Callable, Mapping, Sequence

from absl import logging
from etils import epath

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUM_IDS_SHOWN = 5


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles (a/an/the as words), single spaces.

    The order matters and is the official one: punctuation goes before articles, so "the-end"
    becomes "theend" and keeps its "the".
    """
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def evaluate_v2(dataset: Mapping[str, Any], predictions: Mapping[str, str],
                na_probs: Mapping[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float | int]:
    """Scores predictions as `evaluate-v2.0.py` does.

    Args:
      dataset: the parsed official JSON file, with its "data" key.
      predictions: question id -> answer text ("" predicts no answer).
      na_probs: question id -> probability that there is no answer; enables the best-threshold
        sweep (best_exact, best_exact_thresh, best_f1, best_f1_thresh).
      na_prob_thresh: a question with na_prob > na_prob_thresh counts as predicting no answer.

    Returns:
      exact, f1 (percentages), total; HasAns_* and NoAns_* for each non-empty subset; the
      best-threshold keys when na_probs is given.
    """
    questions = _questions(dataset)
    _check_answer_texts(predictions)
    _warn_missing(questions, predictions)
    has_answer = {question_id: bool(answer_texts) for question_id, answer_texts in questions}
    exact_raw, f1_raw = {}, {}
    for question_id, answer_texts in questions:
        if question_id not in predictions:  # v1.1's rule; the v2.0 script crashes here
            exact_raw[question_id], f1_raw[question_id] = 0.0, 0.0
            continue
        # Gold answers that normalise to nothing are dropped; an unanswerable question's only
        # correct answer is "".
        gold_answers = [text for text in answer_texts if normalize_answer(text)] or [""]
        prediction = predictions[question_id]
        exact_raw[question_id] = max(_exact_match(gold, prediction) for gold in gold_answers)
        f1_raw[question_id] = max(_f1_v2(gold, prediction) for gold in gold_answers)

    predicted_ids = [question_id for question_id in has_answer if question_id in predictions]
    if na_probs is not None:
        _check_na_probs(na_probs, predicted_ids)
    null_probabilities = na_probs if na_probs is not None else dict.fromkeys(predicted_ids, 0.0)

    def apply_threshold(scores: dict[str, float]) -> dict[str, float]:
        # Above the threshold the question counts as answered "no answer": right iff unanswerable.
        return {question_id: float(not has_answer[question_id])
                if question_id in predictions and null_probabilities[question_id] > na_prob_thresh
                else score for question_id, score in scores.items()}

    exact, f1 = apply_threshold(exact_raw), apply_threshold(f1_raw)
    result = _percentages(exact, f1, list(exact))
    for prefix, answerable in (("HasAns", True), ("NoAns", False)):
        subset = [question_id for question_id in has_answer if has_answer[question_id] == answerable]
        if subset:
            subset_result = _percentages(exact, f1, subset)
            result.update({f"{prefix}_{key}": value for key, value in subset_result.items()})
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            exact_raw, predictions, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            f1_raw, predictions, na_probs, has_answer)
    return result


def evaluate_v1(dataset: Mapping[str, Any], predictions: Mapping[str, str]) -> dict[str, float]:
    """Scores predictions as `evaluate-v1.1.py` does: {"exact_match": %, "f1": %}.

    Unlike v2.0, gold answers are not filtered and F1 is 0 whenever no token is shared (an empty
    prediction scores 0 F1 even against an empty gold). Missing predictions score 0.
    """
    questions = _questions(dataset)
    _check_answer_texts(predictions)
    for question_id, answer_texts in questions:
        if not answer_texts:
            raise ValueError(f"question {question_id!r} has no gold answer: that is SQuAD v2.0 "
                             "data; score it with evaluate_v2()")
    _warn_missing(questions, predictions)
    exact_match_sum = f1_sum = 0.0
    for question_id, answer_texts in questions:
        if question_id not in predictions:
            continue
        prediction = predictions[question_id]
        exact_match_sum += max(_exact_match(gold, prediction) for gold in answer_texts)
        f1_sum += max(_token_f1(normalize_answer(gold).split(), normalize_answer(prediction).split())
                      for gold in answer_texts)
    return {"exact_match": 100.0 * exact_match_sum / len(questions),
            "f1": 100.0 * f1_sum / len(questions)}


def main(argv: Sequence[str]) -> int:
    """`albert-jax squad-eval DATA.json PREDICTIONS.json [--na-prob-file=F] [--na-prob-thresh=T]`.

    Prints the result of `evaluate` as indented JSON and returns 0; a file that cannot be read or
    is not what it should be prints one error line to stderr and returns 2. Bad arguments exit
    through argparse (usage on stderr, status 2).
    """
    parser = argparse.ArgumentParser(
        prog="albert-jax squad-eval",
        description="Score SQuAD predictions with the numbers of the official v2.0 script.")
    parser.add_argument("data_file", metavar="DATA.json", help="the official SQuAD JSON (v1.1 or v2.0)")
    parser.add_argument("prediction_file", metavar="PREDICTIONS.json", help="{question id: answer text}")
    parser.add_argument("--na-prob-file", help="{question id: no-answer probability}: adds best_* keys")
    parser.add_argument("--na-prob-thresh", type=float, default=1.0,
                        help="na_prob above this counts as predicting no answer (default 1.0)")
    args = parser.parse_args(argv)
    try:
        dataset = _load_json(args.data_file, _questions)
        predictions = _load_json(args.prediction_file, _check_answer_texts)
        na_probs = None
        if args.na_prob_file:
            predicted_ids = [question_id for question_id, _ in _questions(dataset)
                             if question_id in predictions]
            na_probs = _load_json(args.na_prob_file,
                                  lambda probs: _check_na_probs(probs, predicted_ids))
        result = evaluate_v2(dataset, predictions, na_probs, args.na_prob_thresh)
    except ValueError as error:
        print(f"albert-jax squad-eval: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def _exact_match(gold: str, prediction: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(prediction))


def _f1_v2(gold: str, prediction: str) -> float:
    gold_tokens, predicted_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        # v2.0: "no answer" on either side scores 1 if both are empty, else 0.
        return float(gold_tokens == predicted_tokens)
    return _token_f1(gold_tokens, predicted_tokens)


def _token_f1(gold_tokens: list[str], predicted_tokens: list[str]) -> float:
    """Harmonic mean of token precision and recall, over the multiset of shared tokens."""
    num_shared = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if num_shared == 0:
        return 0.0
    precision = num_shared / len(predicted_tokens)
    recall = num_shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _percentages(exact: Mapping[str, float], f1: Mapping[str, float],
                 question_ids: list[str]) -> dict[str, float | int]:
    total = len(question_ids)
    return {"exact": 100.0 * sum(exact[question_id] for question_id in question_ids) / total,
            "f1": 100.0 * sum(f1[question_id] for question_id in question_ids) / total,
            "total": total}


def _best_threshold(raw_scores: Mapping[str, float], predictions: Mapping[str, str],
                    na_probs: Mapping[str, float],
                    has_answer: Mapping[str, bool]) -> tuple[float, float]:
    """The official sweep over na_prob thresholds: (best score in %, the threshold giving it).

    Starts from "every question answered no-answer" (threshold below all na_probs: each
    unanswerable question scores 1), then raises the threshold past one question at a time in
    increasing na_prob, so that question's own prediction counts. A stable sort: equal na_probs keep
    na_probs' order and are passed one by one. Only a strictly better score moves the best
    threshold, which starts at 0.0. A missing prediction scores 0 at every threshold.
    """
    score = sum(1 for question_id, answerable in has_answer.items()
                if not answerable and question_id in predictions)
    best_score, best_threshold = score, 0.0
    for question_id in sorted(na_probs, key=na_probs.__getitem__):
        if question_id not in raw_scores or question_id not in predictions:
            continue
        if has_answer[question_id]:
            score += raw_scores[question_id]
        elif predictions[question_id]:  # the raw text: a blank " " still counts as an answer here
            score -= 1
        if score > best_score:
            best_score, best_threshold = score, float(na_probs[question_id])
    return 100.0 * best_score / len(raw_scores), best_threshold


def _questions(dataset: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(question id, gold answer texts) for every question of a parsed SQuAD file, in file order.

    The texts are [] for an unanswerable v2.0 question (its "plausible_answers" do not count).
    """
    if not isinstance(dataset, Mapping) or "data" not in dataset:
        raise ValueError('no "data" key: give the whole official SQuAD JSON file '
                         "(e.g. dev-v2.0.json), not a part of it")
    try:
        questions = [(question["id"], [answer["text"] for answer in question["answers"]])
                     for article in dataset["data"] for paragraph in article["paragraphs"]
                     for question in paragraph["qas"]]
    except KeyError as error:
        raise ValueError(f"not SQuAD JSON: no key {error} in data/paragraphs/qas/answers") from None
    except TypeError as error:
        raise ValueError("not SQuAD JSON: data must list articles, each with paragraphs, qas "
                         f"and answers ({error})") from None
    if not questions:
        raise ValueError("the dataset has no questions")
    return questions


def _check_answer_texts(predictions: Mapping[str, str]) -> None:
    if not isinstance(predictions, Mapping):
        raise ValueError("predictions must be a JSON object {question id: answer text}, "
                         f"got a {type(predictions).__name__}")
    for question_id, text in predictions.items():
        if not isinstance(text, str):
            raise ValueError(f"the prediction for {question_id!r} is {text!r}, not a string "
                             '(predict no answer with "")')


def _check_na_probs(na_probs: Mapping[str, float], predicted_ids: Sequence[str]) -> None:
    if not isinstance(na_probs, Mapping):
        raise ValueError("null probabilities must be a JSON object {question id: probability}, "
                         f"got a {type(na_probs).__name__}")
    for question_id, probability in na_probs.items():
        if isinstance(probability, bool) or not isinstance(probability, (int, float)):
            raise ValueError(f"the null probability of {question_id!r} is {probability!r}, not a number")
    lacking = [question_id for question_id in predicted_ids if question_id not in na_probs]
    if lacking:
        raise ValueError(f"no null probability for {len(lacking)} predicted question(s): "
                         f"{_first_ids(lacking)}")


def _warn_missing(questions: Sequence[tuple[str, list[str]]], predictions: Mapping[str, str]) -> None:
    missing = [question_id for question_id, _ in questions if question_id not in predictions]
    if missing:
        logging.warning("%d of %d questions have no prediction and score 0: %s",
                        len(missing), len(questions), _first_ids(missing))


def _first_ids(question_ids: Sequence[str]) -> str:
    shown = ", ".join(question_ids[:_NUM_IDS_SHOWN])
    return shown + (", ..." if len(question_ids) > _NUM_IDS_SHOWN else "")


def _load_json(path: str, check: Callable[[Any], object]) -> Any:
    """Parses a JSON file (local or gs://) and runs `check` on it; any problem is a ValueError
    naming the file."""
    try:
        value = json.loads(epath.Path(path).read_bytes().decode("utf-8"))
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    try:
        check(value)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
