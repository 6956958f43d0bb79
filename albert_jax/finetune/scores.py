"""GLUE, RACE and own-data dev metrics, computed on the host from the gathered predictions of a
split.

The numbers are those of scikit-learn (`accuracy_score`, `f1_score`, `matthews_corrcoef`,
`mean_squared_error`) and SciPy (`pearsonr`, `spearmanr`), written with NumPy/SciPy so that
scikit-learn stays a test-only dependency. Degenerate inputs (one class only, constant
predictions) give 0.0, never NaN, so the checkpoint selection of SPEC 8.1 always has a number to
compare.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import numpy.typing as npt
import scipy.stats

GLUE_TASKS: tuple[str, ...] = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax")

# Classes per classification task, from the label lists of SPEC 8.2 (stsb is a regression).
# ax is the diagnostic set, labelled with the 3 MNLI classes and scored by an MNLI model.
_NUM_CLASSES = {"cola": 2, "sst2": 2, "mrpc": 2, "qqp": 2, "mnli": 3, "qnli": 2, "rte": 2,
                "wnli": 2, "ax": 3}

RACE_LEVELS: tuple[str, ...] = ("middle", "high")
_RACE_NUM_CHOICES = 4  # SPEC 8.4

# The metric that picks the best dev checkpoint (SPEC 8.1: `matthew_corr` for CoLA, `pearson` for
# STS-B, `eval_accuracy` otherwise). ax is absent: it is never trained, only scored with MNLI's
# model, and its one metric (mcc) selects nothing.
BEST_METRIC: dict[str, str] = {
    "cola": "mcc", "sst2": "accuracy", "mrpc": "accuracy", "stsb": "pearson", "qqp": "accuracy",
    "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy",
    "race": "accuracy",
}

# The metrics of a user's own task per kind (finetune/custom_data.py KINDS), in report order.
# `config.selection_metric` picks the largest of one of them, so mse (smaller is better) is
# reported but cannot select.
CUSTOM_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1", "mcc"),
    "regression": ("pearson", "spearman", "mse"),
    "multiple_choice": ("accuracy",),
}
CUSTOM_SELECTABLE_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1", "mcc"),
    "regression": ("pearson", "spearman"),
    "multiple_choice": ("accuracy",),
}


def glue_metrics(task: str, predictions: npt.ArrayLike, labels: npt.ArrayLike) -> dict[str, float]:
    """Scores one GLUE split.

    Args:
      task: one of GLUE_TASKS.
      predictions: [num_examples] class ids, or floats for stsb.
      labels: [num_examples] class ids, or floats for stsb.

    Returns:
      cola: mcc, accuracy; mrpc, qqp: accuracy, f1 (binary F1 of class 1); stsb: pearson,
      spearman; ax: mcc (multi-class, over the 3 MNLI classes); the others: accuracy.
      Fractions, not percentages.
    """
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; use one of {', '.join(GLUE_TASKS)}")
    predictions, labels = _paired_vectors(predictions, labels)
    if task == "stsb":
        predictions = _real_values(predictions, "predictions", task)
        labels = _real_values(labels, "labels", task)
        return {"pearson": _pearson(predictions, labels), "spearman": _spearman(predictions, labels)}
    num_classes = _NUM_CLASSES[task]
    predictions = _class_ids(predictions, "predictions", num_classes, task)
    labels = _class_ids(labels, "labels", num_classes, task)
    if task == "ax":
        return {"mcc": _matthews(predictions, labels, num_classes)}
    metrics = {"accuracy": _accuracy(predictions, labels)}
    if task == "cola":
        metrics["mcc"] = _matthews(predictions, labels, num_classes)
    if task in ("mrpc", "qqp"):
        metrics["f1"] = _binary_f1(predictions, labels)
    return metrics


def race_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike,
                 levels: Sequence[str]) -> dict[str, float]:
    """Scores one RACE split: accuracy overall and per level.

    Args:
      predictions: [num_examples] chosen option, 0..3.
      labels: [num_examples] correct option, 0..3.
      levels: [num_examples] "middle" or "high" (the RACE-M / RACE-H half the question is from).

    Returns:
      accuracy, and accuracy_middle / accuracy_high for each level present.
    """
    predictions, labels = _paired_vectors(predictions, labels)
    levels = np.asarray(levels, dtype=object)
    if levels.shape != predictions.shape:
        raise ValueError(f"{len(predictions)} predictions but levels has shape {levels.shape}: "
                         "give one level per example")
    unknown = sorted({str(level) for level in levels if level not in RACE_LEVELS})
    if unknown:
        raise ValueError(f"unknown RACE level(s) {unknown}; use one of {', '.join(RACE_LEVELS)}")
    predictions = _class_ids(predictions, "predictions", _RACE_NUM_CHOICES, "race")
    labels = _class_ids(labels, "labels", _RACE_NUM_CHOICES, "race")
    metrics = {"accuracy": _accuracy(predictions, labels)}
    for level in RACE_LEVELS:
        in_level = levels == level
        if in_level.any():
            metrics[f"accuracy_{level}"] = _accuracy(predictions[in_level], labels[in_level])
    return metrics


def classification_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike,
                           num_classes: int) -> dict[str, float]:
    """Scores a classification of a user's own data (any number of classes).

    Args:
      predictions: [num_examples] predicted class ids, 0..num_classes-1.
      labels: [num_examples] true class ids, 0..num_classes-1.
      num_classes: the length of the task's label list.

    Returns:
      accuracy; macro_f1, the unweighted mean of the per-class F1 over the classes that occur in
      labels or predictions (scikit-learn's `f1_score(average="macro")`); mcc, the multi-class
      Matthews correlation (`matthews_corrcoef`), 0.0 when undefined.
    """
    predictions, labels = _paired_vectors(predictions, labels)
    predictions = _class_ids(predictions, "predictions", num_classes, "classification")
    labels = _class_ids(labels, "labels", num_classes, "classification")
    return {"accuracy": _accuracy(predictions, labels),
            "macro_f1": _macro_f1(predictions, labels, num_classes),
            "mcc": _matthews(predictions, labels, num_classes)}


def regression_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike) -> dict[str, float]:
    """Scores a regression of a user's own data.

    Args:
      predictions, labels: [num_examples] numbers.

    Returns:
      pearson, spearman (0.0 when a side is constant), mse (mean squared error).
    """
    predictions, labels = _paired_vectors(predictions, labels)
    predictions = _real_values(predictions, "predictions", "regression")
    labels = _real_values(labels, "labels", "regression")
    return {"pearson": _pearson(predictions, labels), "spearman": _spearman(predictions, labels),
            "mse": float(np.mean((predictions - labels) ** 2))}


def multiple_choice_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike,
                            num_choices: int) -> dict[str, float]:
    """Scores a multiple-choice task of a user's own data.

    Args:
      predictions: [num_examples] chosen option, 0..num_choices-1.
      labels: [num_examples] correct option, 0..num_choices-1.
      num_choices: options per question.

    Returns:
      accuracy.
    """
    predictions, labels = _paired_vectors(predictions, labels)
    predictions = _class_ids(predictions, "predictions", num_choices, "multiple_choice")
    labels = _class_ids(labels, "labels", num_choices, "multiple_choice")
    return {"accuracy": _accuracy(predictions, labels)}


def _paired_vectors(predictions: npt.ArrayLike, labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    for name, values in (("predictions", predictions), ("labels", labels)):
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D [num_examples], got shape {values.shape} "
                             "(for logits, take the argmax over classes first)")
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels: "
                         "give one prediction per labelled example")
    if len(predictions) == 0:
        raise ValueError("no predictions to score: the evaluated split is empty")
    return predictions, labels


def _class_ids(values: np.ndarray, name: str, num_classes: int, task: str) -> np.ndarray:
    if values.dtype != bool and not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{task}: {name} must be integer class ids, got dtype {values.dtype}")
    values = values.astype(np.int64)
    outside = values[(values < 0) | (values >= num_classes)]
    if outside.size:
        raise ValueError(f"{task}: {name} must be class ids in 0..{num_classes - 1}, "
                         f"got {int(outside[0])}")
    return values


def _real_values(values: np.ndarray, name: str, task: str) -> np.ndarray:
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"{task}: {name} must be numbers, got dtype {values.dtype}")
    values = values.astype(np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"{task}: {name} contain NaN or infinity (did training diverge?)")
    return values


def _accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predictions == labels))


def _binary_f1(predictions: np.ndarray, labels: np.ndarray) -> float:
    """F1 of class 1, as GLUE reports it for MRPC and QQP; 0.0 when neither side has a 1."""
    true_positives = np.sum((predictions == 1) & (labels == 1))
    predicted_positives = np.sum(predictions == 1)
    actual_positives = np.sum(labels == 1)
    # 2·precision·recall / (precision + recall), simplified as scikit-learn computes it.
    denominator = predicted_positives + actual_positives
    return 0.0 if denominator == 0 else float(2 * true_positives / denominator)


def _macro_f1(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Mean F1 = 2·TP / (2·TP + FP + FN) over the classes present in labels or predictions (a
    class absent from both has no F1; scikit-learn leaves it out of the mean)."""
    true_positives = np.bincount(labels[predictions == labels], minlength=num_classes)
    predicted = np.bincount(predictions, minlength=num_classes)
    actual = np.bincount(labels, minlength=num_classes)
    present = (predicted + actual) > 0
    f1 = 2 * true_positives[present] / (predicted[present] + actual[present])
    return float(f1.mean())


def _matthews(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Matthews correlation in its multi-class form (Gorodkin 2004), as scikit-learn has it.

    0.0 when undefined (labels or predictions all one class). Float64 throughout: the int64
    products of the counts overflow past ~55k examples.
    """
    confusion = np.zeros((num_classes, num_classes), dtype=np.float64)
    np.add.at(confusion, (labels, predictions), 1.0)
    label_counts = confusion.sum(axis=1)
    prediction_counts = confusion.sum(axis=0)
    num_correct = np.trace(confusion)
    num_examples = confusion.sum()
    covariance = num_correct * num_examples - label_counts @ prediction_counts
    prediction_variance = num_examples**2 - prediction_counts @ prediction_counts
    label_variance = num_examples**2 - label_counts @ label_counts
    if prediction_variance * label_variance == 0:
        return 0.0
    return float(covariance / np.sqrt(label_variance * prediction_variance))


def _is_constant(values: np.ndarray) -> bool:
    return bool((values == values[0]).all())


def _pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
    # SciPy returns NaN (with a warning) for a constant side; no correlation is 0.0 here.
    if _is_constant(predictions) or _is_constant(labels):
        return 0.0
    return float(scipy.stats.pearsonr(predictions, labels).statistic)


def _spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    if _is_constant(predictions) or _is_constant(labels):
        return 0.0
    return float(scipy.stats.spearmanr(predictions, labels).statistic)
