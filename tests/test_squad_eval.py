"""SQuAD evaluation: hand-computed numbers for the behaviour of the official v1.1 / v2.0 scripts."""
import json
import logging
import re
import subprocess
import sys

import pytest

from albert_jax.finetune.squad import official_eval as squad_eval


def squad_file(*questions):
    """A minimal SQuAD JSON: questions are (id, [gold answer texts]); [] is unanswerable."""
    qas = [{"id": question_id, "question": "?", "answers": [{"text": text, "answer_start": 0}
                                                             for text in answers],
            "is_impossible": not answers} for question_id, answers in questions]
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower", "eiffel tower"),
    ("  eiffel\t TOWER.  ", "eiffel tower"),
    ("An apple a day", "apple day"),
    ("theater and anthem", "theater and anthem"),  # articles only as whole words
    ("the-end", "theend"),  # punctuation goes first, so no article is left to remove
    ("(1,889)!?", "1889"),
    ("a the an", ""),
])
def test_normalize_answer(text, expected):
    assert squad_eval.normalize_answer(text) == expected


# q2: gold "paris" shares nothing with "in city"; gold "city of paris" shares "city":
#     precision 1/2, recall 1/3, F1 = 2·(1/6) / (5/6) = 0.4.
# q3: "eiffel gustave eiffel" vs "gustave eiffel": 2 shared, precision 2/3, recall 1, F1 = 0.8.
DATASET = squad_file(("q1", ["The Eiffel Tower"]), ("q2", ["Paris", "the city of Paris"]),
                     ("q3", ["Gustave Eiffel"]), ("q4", []), ("q5", []), ("q6", ["1889"]))
PREDICTIONS = {"q1": "eiffel   tower.", "q2": "in the city", "q3": "Eiffel Gustave Eiffel",
               "q4": "", "q5": "1889"}  # q6 has no prediction


def test_evaluate_hand_computed(caplog):
    with caplog.at_level(logging.WARNING):
        result = squad_eval.evaluate_v2(DATASET, PREDICTIONS)
    # exact: q1, q4 right; F1: 1 + 0.4 + 0.8 + 1 + 0 + 0 = 3.2.
    assert result == pytest.approx({
        "exact": 100 * 2 / 6, "f1": 100 * 3.2 / 6, "total": 6,
        "HasAns_exact": 100 * 1 / 4, "HasAns_f1": 100 * 2.2 / 4, "HasAns_total": 4,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})
    assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                            "NoAns_exact", "NoAns_f1", "NoAns_total"]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == ["1 of 6 questions have no prediction and score 0: q6"]


def test_several_gold_answers_take_the_max():
    dataset = squad_file(("q", ["Denver", "the Denver Broncos", "Broncos team"]))
    # vs "denver broncos": 2 shared of 3 predicted -> F1 = 2·(2/3)·1 / (5/3) = 0.8;
    # vs "broncos team": 1 shared -> F1 = 2·(1/3)·(1/2) / (5/6) = 0.4; vs "denver": 0.5.
    result = squad_eval.evaluate_v2(dataset, {"q": "Denver Broncos fans"})
    assert result["exact"] == 0.0 and result["f1"] == pytest.approx(80.0)
    assert squad_eval.evaluate_v2(dataset, {"q": "DENVER broncos!"})["exact"] == 100.0


def test_repeated_tokens_count_once_per_match():
    # "the the cat" normalises to "cat"; "cat cat dog" vs gold "cat": 1 shared, precision 1/3,
    # recall 1, F1 = 0.5.
    result = squad_eval.evaluate_v2(squad_file(("q", ["the the cat"])), {"q": "cat cat dog"})
    assert result["f1"] == pytest.approx(50.0)


def test_gold_that_normalises_to_empty_is_dropped():
    # The question has an answer list (so it is HasAns), but "The" normalises to "": gold is [""].
    dataset = squad_file(("q1", ["The"]), ("q2", ["The", "cat"]))
    result = squad_eval.evaluate_v2(dataset, {"q1": "", "q2": ""})
    # q1: "" vs [""] is right (F1 of empty vs empty is 1); q2: "" vs ["cat"] is wrong.
    assert result == {"exact": 50.0, "f1": 50.0, "total": 2,
                      "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2}


def test_unanswerable_questions():
    dataset = squad_file(("q1", []), ("q2", []), ("q3", []))
    # "" right; "the" normalises to "" so it is right too; "1889" is wrong.
    result = squad_eval.evaluate_v2(dataset, {"q1": "", "q2": "the", "q3": "1889"})
    assert result == pytest.approx({"exact": 200 / 3, "f1": 200 / 3, "total": 3,
                                    "NoAns_exact": 200 / 3, "NoAns_f1": 200 / 3, "NoAns_total": 3})


# The threshold case. na_probs in this insertion order; b and c tie at 0.3.
#   id  answerable  prediction         raw exact  raw F1  na_prob
#   a   yes         right              1          1       0.1
#   b   no          "something"        0          0       0.3
#   c   yes         half right         0          0.5     0.3   ("red glass" vs "red wine")
#   d   no          ""                 1          1       0.6
#   e   yes         wrong              0          0       0.8
#   f   yes         right              1          1       0.9
THRESHOLD_DATASET = squad_file(("a", ["Paris"]), ("b", []), ("c", ["red wine"]), ("d", []),
                               ("e", ["1889"]), ("f", ["Eiffel"]))
THRESHOLD_PREDICTIONS = {"a": "Paris", "b": "something", "c": "red glass", "d": "", "e": "1900",
                         "f": "Eiffel"}
NA_PROBS = {"a": 0.1, "b": 0.3, "c": 0.3, "d": 0.6, "e": 0.8, "f": 0.9}


def test_best_threshold_sweep_hand_computed():
    # Start: every question predicts no answer -> b, d right: score 2, threshold 0.0.
    # exact, passing a, b, c, d, e, f: 3 (new best, 0.1), 2, 2, 2, 2, 3 (a tie: the best stays 0.1).
    # F1: 3 (0.1), 2, 2.5, 2.5, 2.5, 3.5 (new best, 0.9).
    result = squad_eval.evaluate_v2(THRESHOLD_DATASET, THRESHOLD_PREDICTIONS, NA_PROBS)
    assert result["best_exact"] == pytest.approx(100 * 3 / 6)
    assert result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(100 * 3.5 / 6)
    assert result["best_f1_thresh"] == 0.9
    assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    # The default na_prob_thresh 1.0 applies no threshold: the raw scores.
    assert result["exact"] == pytest.approx(100 * 3 / 6) and result["f1"] == pytest.approx(100 * 3.5 / 6)


def test_best_threshold_ties_in_na_prob_keep_the_na_probs_order():
    # c before b (same 0.3): F1 passes a 3 (0.1), c 3.5 (new best, 0.3), b 2.5, d, e 2.5, f 3.5
    # (tie, kept): the sweep gives 0.3 where the b-first order gave 0.9.
    reordered = {"a": 0.1, "c": 0.3, "b": 0.3, "d": 0.6, "e": 0.8, "f": 0.9}
    result = squad_eval.evaluate_v2(THRESHOLD_DATASET, THRESHOLD_PREDICTIONS, reordered)
    assert (result["best_f1"], result["best_f1_thresh"]) == (pytest.approx(100 * 3.5 / 6), 0.3)
    assert (result["best_exact"], result["best_exact_thresh"]) == (pytest.approx(50.0), 0.1)


def test_best_threshold_stays_zero_when_answering_nothing_is_best():
    dataset = squad_file(("a", []), ("b", ["cat"]))
    result = squad_eval.evaluate_v2(dataset, {"a": "dog", "b": "mouse"}, {"a": 0.2, "b": 0.7})
    # Start 1 (a right as no-answer); pass a: 0; pass b: 0. Never better than the start.
    assert (result["best_exact"], result["best_exact_thresh"]) == (50.0, 0.0)
    assert (result["best_f1"], result["best_f1_thresh"]) == (50.0, 0.0)


@pytest.mark.parametrize("na_prob_thresh, exact, f1, has_exact, has_f1, no_exact", [
    # 0.5: d, e, f (0.6, 0.8, 0.9) count as "no answer": d stays right, e stays wrong, f turns wrong.
    # exact a, d; F1 a 1 + c 0.5 + d 1. HasAns (a, c, e, f): exact 1, F1 1.5; NoAns (b, d): d.
    (0.5, 2 / 6, 2.5 / 6, 1 / 4, 1.5 / 4, 1 / 2),
    # 0.2: everything but a counts as "no answer": b turns right, c turns wrong (F1 0).
    (0.2, 3 / 6, 3 / 6, 1 / 4, 1 / 4, 2 / 2),
])
def test_na_prob_thresh_turns_predictions_into_no_answer(na_prob_thresh, exact, f1, has_exact,
                                                           has_f1, no_exact):
    result = squad_eval.evaluate_v2(THRESHOLD_DATASET, THRESHOLD_PREDICTIONS, NA_PROBS, na_prob_thresh)
    assert result["exact"] == pytest.approx(100 * exact)
    assert result["f1"] == pytest.approx(100 * f1)
    assert result["HasAns_exact"] == pytest.approx(100 * has_exact)
    assert result["HasAns_f1"] == pytest.approx(100 * has_f1)
    assert result["NoAns_exact"] == result["NoAns_f1"] == pytest.approx(100 * no_exact)
    # The sweep uses the raw scores: the threshold does not change it.
    assert result["best_f1_thresh"] == 0.9


def test_missing_prediction_scores_zero_everywhere():
    dataset = squad_file(("a", []), ("b", ["cat"]), ("c", []))
    result = squad_eval.evaluate_v2(dataset, {"b": "cat"}, {"b": 0.5, "a": 0.1, "c": 0.9})
    # a, c (unanswerable) have no prediction: 0 even though "no answer" would be right.
    assert result == pytest.approx({
        "exact": 100 / 3, "f1": 100 / 3, "total": 3, "HasAns_exact": 100.0, "HasAns_f1": 100.0,
        "HasAns_total": 1, "NoAns_exact": 0.0, "NoAns_f1": 0.0, "NoAns_total": 2,
        # Sweep: start 0 (no predicted unanswerable question), pass b: 1 (new best, 0.5).
        "best_exact": 100 / 3, "best_exact_thresh": 0.5, "best_f1": 100 / 3, "best_f1_thresh": 0.5})


def test_na_probs_must_cover_every_prediction():
    with pytest.raises(ValueError, match=r"no null probability for 1 predicted question\(s\): b"):
        squad_eval.evaluate_v2(squad_file(("a", []), ("b", ["x"])), {"a": "", "b": "x"}, {"a": 0.5})


def test_evaluate_v1_hand_computed(caplog):
    dataset = squad_file(("q1", ["Denver Broncos", "The Denver Broncos"]), ("q2", ["1889"]),
                         ("q3", ["Paris"]), ("q4", ["Lyon"]))
    predictions = {"q1": "Broncos", "q2": "in 1889 .", "q3": "Paris!"}
    # q1: 1 of 2 gold tokens, F1 = 2·1·(1/2) / (3/2) = 2/3; q2: "in 1889", F1 = 2/3; q3 right;
    # q4 missing: 0.
    with caplog.at_level(logging.WARNING):
        result = squad_eval.evaluate_v1(dataset, predictions)
    assert result == pytest.approx({"exact_match": 25.0, "f1": 100 * (2 / 3 + 2 / 3 + 1) / 4})
    assert any("1 of 4 questions have no prediction" in record.getMessage() for record in caplog.records)


def test_evaluate_v1_keeps_empty_gold_and_scores_empty_f1_zero():
    # v1.1 does not drop the gold "The": exact compares "" with "" (right), but its F1 has no
    # shared token, so 0 -- where v2.0 gives 1.
    dataset = squad_file(("q", ["The"]))
    assert squad_eval.evaluate_v1(dataset, {"q": "a"}) == {"exact_match": 100.0, "f1": 0.0}
    assert squad_eval.evaluate_v2(dataset, {"q": "a"})["f1"] == 100.0


def test_evaluate_v1_rejects_v2_data():
    with pytest.raises(ValueError, match=r"'q2' has no gold answer.*evaluate_v2\(\)"):
        squad_eval.evaluate_v1(squad_file(("q1", ["x"]), ("q2", [])), {"q1": "x", "q2": ""})


@pytest.mark.parametrize("dataset, predictions, message", [
    ({"version": "v2.0"}, {}, '"data" key'),
    (DATASET["data"], {}, '"data" key'),
    ({"data": [{"paragraphs": [{"qas": [{"id": "q"}]}]}]}, {}, "no key 'answers'"),
    ({"data": [{"paragraphs": []}]}, {}, "no questions"),
    (DATASET, {"q1": None}, r"prediction for 'q1' is None, not a string"),
    (DATASET, ["q1"], "must be a JSON object"),
])
def test_evaluate_bad_input(dataset, predictions, message):
    with pytest.raises(ValueError, match=message):
        squad_eval.evaluate_v2(dataset, predictions)


def write_json(path, value):
    path.write_text(json.dumps(value))
    return str(path)


def test_main_prints_the_evaluation(tmp_path, capsys):
    data_file = write_json(tmp_path / "dev.json", THRESHOLD_DATASET)
    prediction_file = write_json(tmp_path / "predictions.json", THRESHOLD_PREDICTIONS)
    na_prob_file = write_json(tmp_path / "na_probs.json", NA_PROBS)
    assert squad_eval.main([data_file, prediction_file]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed) == squad_eval.evaluate_v2(THRESHOLD_DATASET, THRESHOLD_PREDICTIONS)
    assert printed.startswith('{\n  "exact": ')  # indent=2
    assert squad_eval.main([data_file, prediction_file, f"--na-prob-file={na_prob_file}",
                            "--na-prob-thresh=0.5"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exact"] == pytest.approx(100 * 2 / 6)
    assert (result["best_f1"], result["best_f1_thresh"]) == (pytest.approx(100 * 3.5 / 6), 0.9)


def test_main_runs_as_a_module(tmp_path):
    data_file = write_json(tmp_path / "dev.json", squad_file(("q", ["cat"])))
    prediction_file = write_json(tmp_path / "predictions.json", {"q": "The cat"})
    completed = subprocess.run([sys.executable, "-m", "albert_jax.finetune.squad.official_eval",
                                data_file, prediction_file], capture_output=True, text=True,
                               check=True)
    assert json.loads(completed.stdout) == {"exact": 100.0, "f1": 100.0, "total": 1,
                                            "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 1}


@pytest.mark.parametrize("broken, content, message", [
    ("dev.json", None, r"cannot read .*dev\.json"),
    ("dev.json", "{not json", r"dev\.json is not valid JSON"),
    ("dev.json", json.dumps({"version": "v2.0"}), r"dev\.json: no \"data\" key"),
    ("predictions.json", None, r"cannot read .*predictions\.json"),
    ("predictions.json", json.dumps(["q"]), r"predictions\.json: predictions must be a JSON object"),
    ("predictions.json", json.dumps({"q": 3}), r"predictions\.json: the prediction for 'q' is 3"),
    ("na_probs.json", json.dumps({"q": "high"}), r"na_probs\.json: the null probability of 'q'"),
    ("na_probs.json", json.dumps({"other": 0.5}), r"na_probs\.json: no null probability .*: q$"),
])
def test_main_errors_are_one_line_naming_the_file(tmp_path, capsys, broken, content, message):
    files = {"dev.json": json.dumps(squad_file(("q", ["cat"]))),
             "predictions.json": json.dumps({"q": "cat"}), "na_probs.json": json.dumps({"q": 0.5})}
    files[broken] = content
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    return_code = squad_eval.main([str(tmp_path / "dev.json"), str(tmp_path / "predictions.json"),
                                   f"--na-prob-file={tmp_path / 'na_probs.json'}"])
    captured = capsys.readouterr()
    assert return_code == 2
    assert captured.out == ""
    error_lines = captured.err.strip().splitlines()
    assert len(error_lines) == 1
    assert error_lines[0].startswith("albert-jax squad-eval: error: ")
    assert re.search(message, error_lines[0]), error_lines[0]
