"""GLUE / RACE / own-data metrics: equal to scikit-learn and SciPy, 0.0 (never NaN) when
undefined."""
import math
import warnings

import numpy as np
import pytest
import scipy.stats
from sklearn import metrics as sklearn_metrics

from albert_jax.finetune.core import registry, scores
from albert_jax.finetune.core.scores import (
    classification_metrics,
    multiple_choice_metrics,
    regression_metrics,
)
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.race import data as race

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax")
glue_metrics = glue.score  # a GLUE task's (or AX's) metrics, from its spec row


def race_metrics(predictions, labels, levels):
    return scores.race_metrics(predictions, labels, levels, num_choices=4,
                               level_names=("middle", "high"))

NUM_CLASSES = {"cola": 2, "sst2": 2, "mrpc": 2, "qqp": 2, "mnli": 3, "qnli": 2, "rte": 2, "wnli": 2,
               "ax": 3}
EXPECTED_KEYS = {"cola": {"mcc", "accuracy"}, "sst2": {"accuracy"}, "mrpc": {"accuracy", "f1"},
                 "stsb": {"pearson", "spearman"}, "qqp": {"accuracy", "f1"}, "mnli": {"accuracy"},
                 "qnli": {"accuracy"}, "rte": {"accuracy"}, "wnli": {"accuracy"}, "ax": {"mcc"}}


def sklearn_reference(task, predictions, labels):
    """The metrics as scikit-learn / SciPy compute them (argument order: y_true, y_pred)."""
    if task == "stsb":
        return {"pearson": scipy.stats.pearsonr(predictions, labels).statistic,
                "spearman": scipy.stats.spearmanr(predictions, labels).statistic}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # UndefinedMetricWarning in the degenerate cases
        reference = {"accuracy": sklearn_metrics.accuracy_score(labels, predictions),
                     "mcc": sklearn_metrics.matthews_corrcoef(labels, predictions)}
        if task in ("mrpc", "qqp"):
            reference["f1"] = sklearn_metrics.f1_score(labels, predictions)
    return {key: reference[key] for key in EXPECTED_KEYS[task]}


@pytest.mark.parametrize("task", GLUE_TASKS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_predictions_equal_sklearn_and_scipy(task, seed):
    rng = np.random.default_rng(seed)
    num_examples = int(rng.integers(20, 300))
    if task == "stsb":
        labels = rng.uniform(0, 5, num_examples)
        predictions = labels + rng.normal(0, 1.5, num_examples)
        predictions[:5] = predictions[5]  # ties, so that Spearman's ranks average
    else:
        labels = rng.integers(0, NUM_CLASSES[task], num_examples)
        # Correlated with the labels, so the correlations are not all near zero.
        predictions = np.where(rng.random(num_examples) < 0.6, labels,
                               rng.integers(0, NUM_CLASSES[task], num_examples))
    result = glue_metrics(task, predictions, labels)
    assert set(result) == EXPECTED_KEYS[task]
    reference = sklearn_reference(task, predictions, labels)
    for key, value in result.items():
        assert type(value) is float
        assert value == pytest.approx(reference[key], abs=1e-12), key


def test_lists_of_python_ints_work():
    assert glue_metrics("sst2", [1, 0, 1, 1], [1, 1, 1, 0]) == {"accuracy": 0.5}


def test_hand_computed_binary():
    # TP: examples 0 and 4; FP: 1; FN: 3; TN: 2.
    predictions, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    # MCC = (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2).
    assert glue_metrics("cola", predictions, labels) == pytest.approx({"mcc": 1 / 6, "accuracy": 3 / 5})
    # F1 = 2TP / (2TP + FP + FN) = 4 / 6.
    assert glue_metrics("mrpc", predictions, labels) == pytest.approx({"accuracy": 3 / 5, "f1": 2 / 3})


def test_hand_computed_multiclass_matthews_for_ax():
    # confusion[label, prediction]: (0,0), (1,1), (1,2), (2,0). Label counts [1, 2, 1],
    # prediction counts [2, 1, 1], 2 correct of 4: cov = 2·4 − (2 + 2 + 1) = 3,
    # var_pred = 16 − (4 + 1 + 1) = 10, var_label = 16 − (1 + 4 + 1) = 10, MCC = 3 / 10.
    assert glue_metrics("ax", [0, 1, 2, 0], [0, 1, 1, 2]) == pytest.approx({"mcc": 0.3})


def test_hand_computed_stsb():
    # Deviations from the means: predictions (−1, 0, 1), labels (−4/3, −1/3, 5/3):
    # r = 3 / sqrt(2 · 42/9) = 9 / sqrt(84); the ranks agree, so Spearman is 1.
    result = glue_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
    assert result == pytest.approx({"pearson": 9 / math.sqrt(84), "spearman": 1.0}, abs=1e-12)


@pytest.mark.parametrize("task", ["cola", "mrpc", "qqp"])
@pytest.mark.parametrize("name, predictions, labels", [
    ("labels one class only", [0, 1, 0, 1], [1, 1, 1, 1]),
    ("constant predictions", [1, 1, 1, 1], [0, 1, 0, 1]),
    ("no positive anywhere", [0, 0, 0], [0, 0, 0]),
    ("all wrong", [1, 0, 1, 0], [0, 1, 0, 1]),
    ("perfect", [1, 0, 0, 1], [1, 0, 0, 1]),
])
def test_degenerate_binary_cases_follow_sklearn(task, name, predictions, labels):
    result = glue_metrics(task, predictions, labels)
    assert result == pytest.approx(sklearn_reference(task, predictions, labels), abs=1e-12), name
    assert not any(math.isnan(value) for value in result.values())


def test_degenerate_binary_values():
    assert glue_metrics("cola", [1, 1, 1, 1], [0, 1, 0, 1]) == {"mcc": 0.0, "accuracy": 0.5}
    assert glue_metrics("mrpc", [0, 0, 0], [0, 0, 0]) == {"accuracy": 1.0, "f1": 0.0}
    assert glue_metrics("cola", [1, 0, 1, 0], [0, 1, 0, 1]) == {"mcc": -1.0, "accuracy": 0.0}
    assert glue_metrics("qqp", [1, 0, 1, 0], [0, 1, 0, 1]) == {"accuracy": 0.0, "f1": 0.0}
    assert glue_metrics("mrpc", [1, 0, 0, 1], [1, 0, 0, 1]) == {"accuracy": 1.0, "f1": 1.0}
    assert glue_metrics("ax", [2, 2, 2], [0, 1, 2]) == {"mcc": 0.0}
    assert glue_metrics("ax", [0, 1, 2, 1], [0, 1, 2, 1]) == {"mcc": 1.0}


def test_constant_stsb_side_gives_zero_not_nan():
    assert glue_metrics("stsb", [2.5, 2.5, 2.5], [1.0, 2.0, 4.0]) == {"pearson": 0.0, "spearman": 0.0}
    assert glue_metrics("stsb", [1.0, 2.0, 4.0], [3.0, 3.0, 3.0]) == {"pearson": 0.0, "spearman": 0.0}
    assert glue_metrics("stsb", [1.0], [3.0]) == {"pearson": 0.0, "spearman": 0.0}


def test_matthews_does_not_overflow_on_a_large_split():
    # 200k examples: the int64 products of the counts (~n^4) would overflow.
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200_000)
    predictions = np.where(rng.random(200_000) < 0.7, labels, rng.integers(0, 3, 200_000))
    expected = sklearn_metrics.matthews_corrcoef(labels, predictions)
    assert glue_metrics("ax", predictions, labels)["mcc"] == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.7, abs=0.01)  # (0.8 − 1/3) / (2/3) for 70% kept labels


def test_race_accuracy_per_level():
    predictions, labels = [0, 1, 2, 3, 0], [0, 1, 0, 3, 1]
    levels = ["middle", "high", "middle", "high", "high"]
    # middle: examples 0 (right), 2 (wrong); high: 1, 3 (right), 4 (wrong).
    assert race_metrics(predictions, labels, levels) == pytest.approx(
        {"accuracy": 3 / 5, "accuracy_middle": 1 / 2, "accuracy_high": 2 / 3})


def test_race_absent_level_has_no_key():
    assert race_metrics([0, 1, 2], [0, 1, 3], ["high"] * 3) == pytest.approx(
        {"accuracy": 2 / 3, "accuracy_high": 2 / 3})


def test_best_metric_is_a_key_of_each_task_metrics():
    best_metric = {name: registry.get(name).selection_metric(None) for name in glue.TASKS}
    assert best_metric["cola"] == "mcc"
    assert best_metric["stsb"] == "pearson"
    assert registry.get("race").selection_metric(None) == "accuracy"
    assert set(best_metric) == set(GLUE_TASKS) - {"ax"}
    assert race.LEVELS == ("middle", "high")  # the levels race_metrics above scores
    for task in set(GLUE_TASKS) - {"ax"}:
        assert best_metric[task] in EXPECTED_KEYS[task]
        assert set(glue.spec(task).metrics) == EXPECTED_KEYS[task]
        if task not in ("cola", "stsb"):
            assert best_metric[task] == "accuracy"


@pytest.mark.parametrize("call, message", [
    (lambda: glue_metrics("sst-2", [1], [1]), r"unknown GLUE task 'sst-2'.*cola.*sst2.*ax"),
    (lambda: glue_metrics("sst2", [], []), "empty"),
    (lambda: glue_metrics("sst2", [1, 0, 1], [1, 0]), "3 predictions but 2 labels"),
    (lambda: race_metrics([1, 0], [1, 0, 1], ["high"] * 2), "2 predictions but 3 labels"),
    (lambda: race_metrics([], [], []), "empty"),
    (lambda: glue_metrics("mnli", np.zeros((4, 3)), [0, 1, 2, 0]), r"1-D.*\(4, 3\).*argmax"),
    (lambda: glue_metrics("mnli", [0, 3], [0, 1]), r"mnli: predictions .* 0\.\.2, got 3"),
    (lambda: glue_metrics("cola", [0, 1], [-1, 1]), r"cola: labels .* 0\.\.1, got -1"),
    (lambda: glue_metrics("cola", [0.0, 1.0], [0, 1]), "integer class ids.*float64"),
    (lambda: glue_metrics("stsb", [1.0, float("nan")], [1.0, 2.0]), "NaN"),
    (lambda: glue_metrics("stsb", ["a", "b"], [1.0, 2.0]), "numbers"),
    (lambda: race_metrics([0, 1], [0, 1], ["middle", "hard"]), r"unknown RACE level.*'hard'"),
    (lambda: race_metrics([0, 1], [0, 1], ["middle"]), "levels"),
    (lambda: race_metrics([0, 4], [0, 1], ["middle", "high"]), r"race: predictions .* 0\.\.3, got 4"),
])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- Own data -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_custom_metrics_equal_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    num_classes = int(rng.integers(2, 7))
    num_examples = int(rng.integers(5, 200))
    # Some seeds leave the last class out of both sides: macro F1 then averages the others.
    drawn = num_classes - 1 if seed % 2 else num_classes
    labels = rng.integers(0, drawn, num_examples)
    predictions = np.where(rng.random(num_examples) < 0.6, labels,
                           rng.integers(0, drawn, num_examples))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = {"accuracy": sklearn_metrics.accuracy_score(labels, predictions),
                    "macro_f1": sklearn_metrics.f1_score(labels, predictions, average="macro"),
                    "mcc": sklearn_metrics.matthews_corrcoef(labels, predictions)}
    assert classification_metrics(predictions, labels, num_classes) == pytest.approx(expected)
    assert multiple_choice_metrics(predictions, labels, num_classes) == pytest.approx(
        {"accuracy": expected["accuracy"]})

    scores = rng.normal(0, 2, num_examples)
    predicted_scores = scores + rng.normal(0, 1, num_examples)
    assert regression_metrics(predicted_scores, scores) == pytest.approx({
        "pearson": scipy.stats.pearsonr(predicted_scores, scores).statistic,
        "spearman": scipy.stats.spearmanr(predicted_scores, scores).statistic,
        "mse": sklearn_metrics.mean_squared_error(scores, predicted_scores)})


def test_custom_metrics_hand_computed():
    # Per-class F1 2TP/(2TP+FP+FN): class 0 2/(2+0+1), class 1 4/(4+1+1), class 2 0/(0+1+0).
    predictions, labels = [0, 1, 1, 2, 1], [0, 1, 1, 1, 0]
    metrics = classification_metrics(predictions, labels, 3)
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert regression_metrics([1.0, 2.0, 4.0], [1.0, 3.0, 2.0])["mse"] == pytest.approx(5 / 3)
    # Constant predictions: no correlation is 0.0, not NaN.
    assert classification_metrics([1, 1, 1], [0, 1, 2], 3)["mcc"] == 0.0
    assert regression_metrics([2.0, 2.0], [1.0, 3.0])["pearson"] == 0.0


def test_custom_metric_names():
    outputs = {"classification": classification_metrics([0, 1], [0, 1], 2),
               "regression": regression_metrics([0.0, 1.0], [0.0, 1.0]),
               "multiple_choice": multiple_choice_metrics([0, 1], [0, 1], 2)}
    expected = {"classification": ("accuracy", "macro_f1", "mcc"),
                "regression": ("pearson", "spearman", "mse"), "multiple_choice": ("accuracy",)}
    for kind, metrics in outputs.items():
        task_class = registry.get(kind)
        assert tuple(metrics) == expected[kind] == task_class.metric_names(None)
        assert set(task_class.selectable_metrics) <= set(expected[kind])
    assert "mse" not in registry.get("regression").selectable_metrics  # smaller is better


@pytest.mark.parametrize("call, message", [
    (lambda: classification_metrics([0, 3], [0, 1], 3),
     r"classification: predictions .* 0\.\.2, got 3"),
    (lambda: regression_metrics([1.0, float("inf")], [1.0, 2.0]),
     "regression: predictions contain NaN"),
    (lambda: multiple_choice_metrics([0, 1], [0, 5], 5),
     r"multiple_choice: labels .* 0\.\.4, got 5"),
])
def test_custom_metrics_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
