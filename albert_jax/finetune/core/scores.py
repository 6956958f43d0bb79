"""Dev scores of GLUE, RACE and custom tasks, computed on the host from the gathered predictions
of a split. A task passes its class count and names its metrics (GLUE: its spec row,
glue/data.py score).

The numbers are those of scikit-learn (`accuracy_score`, `f1_score`, `matthews_corrcoef`,
`mean_squared_error`) and SciPy (`pearsonr`, `spearmanr`), written with NumPy/SciPy so that
scikit-learn stays a test-only dependency; SciPy is imported where a correlation is computed. Degenerate inputs (one class only, constant
predictions) give 0.0, never NaN, so the checkpoint selection of SPEC 8.1 always has a number to
compare.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import numpy.typing as npt

# The metrics of each family, in report order. `class_scores` and `real_scores` compute any of
# them by name; a task's spec row (GLUE) or class (custom tasks) picks its own.
CLASS_METRICS: tuple[str, ...] = ("accuracy", "f1", "macro_f1", "mcc")
REAL_METRICS: tuple[str, ...] = ("pearson", "spearman", "mse")
CLASSIFICATION_METRICS: tuple[str, ...] = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS: tuple[str, ...] = ("pearson", "spearman", "mse")
MULTIPLE_CHOICE_METRICS: tuple[str, ...] = ("accuracy",)


def class_scores(predictions: npt.ArrayLike, labels: npt.ArrayLike, num_classes: int,
                 names: Sequence[str], task: str) -> dict[str, float]:
    """Scores predicted class ids.

    Args:
      predictions: [num_examples] predicted class ids, 0..num_classes-1.
      labels: [num_examples] true class ids, 0..num_classes-1.
      num_classes: the number of classes (options, for multiple choice).
      names: the metrics, in the order returned; each one of CLASS_METRICS: accuracy; f1, the
        binary F1 of class 1 (GLUE's for MRPC and QQP); macro_f1, the unweighted mean of the
        per-class F1 over the classes that occur in labels or predictions (scikit-learn's
        `f1_score(average="macro")`); mcc, the multi-class Matthews correlation
        (`matthews_corrcoef`), 0.0 when undefined.
      task: names the task in error messages.
    """
    _check_names(names, CLASS_METRICS)
    predictions, labels = _paired_vectors(predictions, labels)
    predictions = _class_ids(predictions, "predictions", num_classes, task)
    labels = _class_ids(labels, "labels", num_classes, task)
    metrics = {"accuracy": lambda: _accuracy(predictions, labels),
               "f1": lambda: _binary_f1(predictions, labels),
               "macro_f1": lambda: _macro_f1(predictions, labels, num_classes),
               "mcc": lambda: _matthews(predictions, labels, num_classes)}
    return {name: metrics[name]() for name in names}


def real_scores(predictions: npt.ArrayLike, labels: npt.ArrayLike, names: Sequence[str],
                task: str) -> dict[str, float]:
    """Scores predicted numbers.

    Args:
      predictions, labels: [num_examples] numbers.
      names: the metrics, in the order returned; each one of REAL_METRICS: pearson, spearman
        (0.0 when a side is constant), mse (mean squared error).
      task: names the task in error messages.
    """
    _check_names(names, REAL_METRICS)
    predictions, labels = _paired_vectors(predictions, labels)
    predictions = _real_values(predictions, "predictions", task)
    labels = _real_values(labels, "labels", task)
    metrics = {"pearson": lambda: _pearson(predictions, labels),
               "spearman": lambda: _spearman(predictions, labels),
               "mse": lambda: float(np.mean((predictions - labels) ** 2))}
    return {name: metrics[name]() for name in names}


def race_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike, levels: Sequence[str], *,
                 num_choices: int, level_names: Sequence[str]) -> dict[str, float]:
    """Scores one RACE split: accuracy overall and per level.

    Args:
      predictions: [num_examples] chosen option, 0..num_choices-1.
      labels: [num_examples] correct option, 0..num_choices-1.
      levels: [num_examples] the level of each question, one of `level_names`.
      num_choices: options per question (RACE: 4).
      level_names: the levels, in report order (RACE: middle, high, the RACE-M / RACE-H halves).

    Returns:
      accuracy, and accuracy_<level> for each level present.
    """
    predictions, labels = _paired_vectors(predictions, labels)
    levels = np.asarray(levels, dtype=object)
    if levels.shape != predictions.shape:
        raise ValueError(f"{len(predictions)} predictions but levels has shape {levels.shape}: "
                         "give one level per example")
    unknown = sorted({str(level) for level in levels if level not in level_names})
    if unknown:
        raise ValueError(f"unknown RACE level(s) {unknown}; use one of {', '.join(level_names)}")
    predictions = _class_ids(predictions, "predictions", num_choices, "race")
    labels = _class_ids(labels, "labels", num_choices, "race")
    metrics = {"accuracy": _accuracy(predictions, labels)}
    for level in level_names:
        in_level = levels == level
        if in_level.any():
            metrics[f"accuracy_{level}"] = _accuracy(predictions[in_level], labels[in_level])
    return metrics


def classification_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike,
                           num_classes: int) -> dict[str, float]:
    """Scores a classification of a user's own data (any number of classes):
    CLASSIFICATION_METRICS (accuracy, macro_f1, mcc; see `class_scores`)."""
    return class_scores(predictions, labels, num_classes, CLASSIFICATION_METRICS,
                        "classification")


def regression_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike) -> dict[str, float]:
    """Scores a regression of a user's own data: REGRESSION_METRICS (pearson, spearman, mse)."""
    return real_scores(predictions, labels, REGRESSION_METRICS, "regression")


def multiple_choice_metrics(predictions: npt.ArrayLike, labels: npt.ArrayLike,
                            num_choices: int) -> dict[str, float]:
    """Scores a multiple-choice task of a user's own data: accuracy over `num_choices` options."""
    return class_scores(predictions, labels, num_choices, MULTIPLE_CHOICE_METRICS,
                        "multiple_choice")


def _check_names(names: Sequence[str], known: Sequence[str]) -> None:
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; use {', '.join(known)}")


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
    import scipy.stats  # here: a second of import at every command's start, for regression only
    return float(scipy.stats.pearsonr(predictions, labels).statistic)


def _spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    if _is_constant(predictions) or _is_constant(labels):
        return 0.0
    import scipy.stats
    return float(scipy.stats.spearmanr(predictions, labels).statistic)
