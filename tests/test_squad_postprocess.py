"""SQuAD post-processing on hand-made logits whose best spans are known; the prediction files."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import squad_fixtures
from albert_jax.finetune.squad import data as squad
from albert_jax.finetune.squad import postprocess as squad_postprocess
from albert_jax.finetune.squad.data import Answer, FeatureInfo, SquadExample

# Two windows over "Le  café Procope was founded in 1686 in Paris" (two spaces after "Le"), made
# by hand: [CLS] q q [SEP] + 5 context tokens + [SEP], so sequence position 4 + i holds the i-th
# token of the window. Window A holds tokens 0-4, window B tokens 4-8; token 4 ("founded") has
# its most context in A (the reference's tie rule), so B may not start a span there.
CONTEXT = "Le  café Procope was founded in 1686 in Paris"
WORD_STARTS = [0, 4, 9, 17, 21, 29, 32, 37, 40]
WORD_ENDS = [2, 8, 16, 20, 28, 31, 36, 39, 45]
SEQ = 10


def _info(example_index: int, window_index: int, token_start: int, is_max_context) -> FeatureInfo:
    return FeatureInfo(example_index=example_index, window_index=window_index, context_offset=4,
                       token_start=token_start,
                       char_starts=np.array(WORD_STARTS[token_start:token_start + 5]),
                       char_ends=np.array(WORD_ENDS[token_start:token_start + 5]),
                       is_max_context=np.array(is_max_context))


EXAMPLES = [SquadExample("two_windows", "When?", CONTEXT, (Answer("1686", 32),), False),
            SquadExample("nothing_valid", "Who?", CONTEXT, (), True)]
INFOS = [_info(0, 0, 0, [True] * 5), _info(0, 1, 4, [False] + [True] * 4),
         _info(1, 0, 0, [True] * 5)]


def _v1_logits():
    start, end = np.full((3, SEQ), -10.0), np.full((3, SEQ), -10.0)
    start[0, 1] = end[0, 1] = 9.0  # a span in the question: never a candidate
    start[0, 5], end[0, 6] = 5.0, 4.0  # "café Procope" = 9
    start[0, 4], end[0, 5] = 2.0, 1.2  # "café" = 5 + 1.2, "Le  café Procope" = 2 + 4
    start[1, 4] = end[1, 4] = 8.0  # "founded" in B, whose context is better in A: skipped
    start[1, 6], end[1, 6] = 6.0, 5.0  # "1686" = 11; "in 1686" = 3 + 5; "1686 in" = 6 + 2.5
    start[1, 5], end[1, 5] = 3.0, 3.5  # "in" = 6.5
    start[1, 7] = end[1, 7] = 2.5  # the second "in" = 5: a repeated text, skipped
    start[2, 1] = end[2, 8] = 20.0  # the other question: only question-start spans score
    start[2, 4:9] = -50.0
    return start, end


def test_v1_best_spans_over_windows():
    start, end = _v1_logits()
    predictions, nbest = squad_postprocess.postprocess_v1(EXAMPLES, INFOS, start, end,
                                                          n_best_size=7)
    entries = nbest["two_windows"]
    assert [entry["text"] for entry in entries] == [
        "1686", "café Procope", "1686 in", "in 1686", "in", "café", "Le  café Procope"]
    scores = np.array([11, 9, 8.5, 8, 6.5, 6.2, 6])
    assert [entry["start_logit"] + entry["end_logit"] for entry in entries] == pytest.approx(
        scores)
    np.testing.assert_allclose([entry["probability"] for entry in entries],
                               np.exp(scores) / np.exp(scores).sum())
    assert predictions["two_windows"] == "1686"
    assert set(entries[0]) == {"text", "probability", "start_logit", "end_logit"}
    # At most one token: the two-token spans go; n_best_size caps the list.
    _, nbest = squad_postprocess.postprocess_v1(EXAMPLES, INFOS, start, end, n_best_size=3,
                                                max_answer_length=1)
    assert [entry["text"] for entry in nbest["two_windows"]] == ["1686", "in", "café"]


def test_v1_candidates_are_each_windows_top_n(caplog):
    """Each window proposes only its n_best_size best starts x ends (reference
    `_get_best_indexes`). With n_best_size 1: A's best start and end are in the question, B's
    best start lacks most context, the other question's best start is in the question: no valid
    span, so the prediction is "" with a nonce n-best entry, and a warning says so."""
    start, end = _v1_logits()
    predictions, nbest = squad_postprocess.postprocess_v1(EXAMPLES, INFOS, start, end,
                                                          n_best_size=1)
    assert predictions == {"two_windows": "", "nothing_valid": ""}
    assert nbest["nothing_valid"] == [{"text": "", "probability": 1.0, "start_logit": 0.0,
                                       "end_logit": 0.0}]
    assert "2 questions have no valid span" in caplog.text


def _v2_outputs():
    # start_n_top = end_n_top = 2: row i * 2 + j of the ends belongs to the i-th start.
    return {
        "start_top_index": np.array([[5, 1], [6, 4], [1, 2]]),
        "start_top_log_probs": np.array([[-0.5, -1.0], [-0.1, -0.3], [-0.1, -0.2]]),
        "end_top_index": np.array([[6, 5, 1, 6], [6, 7, 4, 6], [1, 2, 2, 3]]),
        "end_top_log_probs": np.array([[-0.2, -1.5, -0.1, -0.1], [-0.3, -0.9, -0.1, -0.1],
                                       [-0.1, -0.1, -0.1, -0.1]]),
        "cls_logits": np.array([2.0, -1.5, 3.0]),
    }


def test_v2_beam_spans_and_null_odds():
    predictions, nbest, null_odds = squad_postprocess.postprocess_v2(EXAMPLES, INFOS,
                                                                     _v2_outputs())
    entries = nbest["two_windows"]
    # Starts in the question (1) or without most context (4 in B) are skipped.
    assert [(entry["text"], entry["start_log_prob"], entry["end_log_prob"]) for entry in
            entries] == [("1686", -0.1, -0.3), ("café Procope", -0.5, -0.2),
                         ("1686 in", -0.1, -0.9), ("café", -0.5, -1.5)]
    scores = np.array([-0.4, -0.7, -1.0, -2.0])
    np.testing.assert_allclose([entry["probability"] for entry in entries],
                               np.exp(scores) / np.exp(scores).sum())
    assert predictions == {"two_windows": "1686", "nothing_valid": ""}
    assert nbest["nothing_valid"] == [{"text": "", "probability": 1.0, "start_log_prob": -1e6,
                                       "end_log_prob": -1e6}]
    # null_odds: the null score (the smallest cls_logits over the windows, as the reference)
    # minus the best non-null score; with no valid span that score is -2e6.
    assert null_odds == pytest.approx({"two_windows": -1.5 - (-0.1 - 0.3),
                                       "nothing_valid": 3.0 + 2e6})


def test_apply_null_threshold():
    null_odds = {"a": -1.5, "b": 0.3, "c": 0.7}
    predictions = {"a": "1686", "b": "Paris", "c": "café"}
    # "No answer" when the null score is above the threshold, as the official evaluator counts.
    assert squad_postprocess.apply_null_threshold(null_odds, predictions, 0.3) == {
        "a": "1686", "b": "Paris", "c": ""}
    assert squad_postprocess.apply_null_threshold(null_odds, predictions, 0.29) == {
        "a": "1686", "b": "", "c": ""}
    with pytest.raises(ValueError, match=r"no null score for question ids \['d'\]"):
        squad_postprocess.apply_null_threshold(null_odds, {"d": "x"}, 0.0)


def test_input_errors():
    start, end = _v1_logits()
    with pytest.raises(ValueError, match="start_logits has 2 rows but there are 3 features"):
        squad_postprocess.postprocess_v1(EXAMPLES, INFOS, start[:2], end)
    with pytest.raises(ValueError, match=r"no feature for question ids \['nothing_valid'\]"):
        squad_postprocess.postprocess_v1(EXAMPLES, INFOS[:2], start[:2], end[:2])
    outputs = _v2_outputs()
    del outputs["cls_logits"]
    with pytest.raises(ValueError, match=r"missing \['cls_logits'\]"):
        squad_postprocess.postprocess_v2(EXAMPLES, INFOS, outputs)


def test_write_prediction_files(tmp_path):
    predictions = {"q1": "café", "q2": "서울"}
    nbest = {"q1": [{"text": "café", "probability": 1.0, "start_log_prob": -0.1,
                     "end_log_prob": -0.2}], "q2": []}
    null_odds = {"q1": -2.0, "q2": 1.5}
    with_null = squad_postprocess.apply_null_threshold(null_odds, predictions, 0.0)
    written = squad_postprocess.write_prediction_files(tmp_path / "out", predictions, nbest,
                                                       null_odds, with_null)
    assert sorted(written) == ["nbest_predictions.json", "null_odds.json", "predictions.json",
                               "predictions_with_null.json"]
    for name, obj in [("predictions.json", predictions), ("nbest_predictions.json", nbest),
                      ("null_odds.json", null_odds),
                      ("predictions_with_null.json", {"q1": "café", "q2": ""})]:
        with open(written[name], encoding="utf-8") as file:
            assert json.load(file) == obj
    assert "서울" in (tmp_path / "out" / "predictions.json").read_text(encoding="utf-8")
    assert sorted(os.listdir(tmp_path / "out")) == sorted(written)  # no temporary files left
    # v1.1: only the first two files.
    assert sorted(squad_postprocess.write_prediction_files(tmp_path / "v1", predictions, nbest)
                  ) == ["nbest_predictions.json", "predictions.json"]


# ----------------------------------------------------------------------------------------------
# Features -> model outputs -> predictions, on the fixture files (accents, Korean, Chinese,
# several windows).
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return squad_fixtures.train_tokenizer(tmp_path_factory.mktemp("spm") / "squad.model")


def _gold_features(examples, infos, tokenizer):
    """feature index -> (start, end) sequence positions of the first gold answer, for windows
    that hold the whole answer and give its start the most context."""
    gold = {}
    for feature_index, info in enumerate(infos):
        example = examples[info.example_index]
        if example.is_impossible:
            continue
        _, char_starts, char_ends = tokenizer.encode_with_offsets(example.context)
        first, last = squad.answer_token_span(char_starts, char_ends, example.answers[0])
        start, end = first - info.token_start, last - info.token_start
        if 0 <= start and end < len(info.char_starts) and info.is_max_context[start]:
            gold[feature_index] = (start + info.context_offset, end + info.context_offset)
    return gold


@pytest.mark.parametrize("version", squad.VERSIONS)
def test_gold_logits_give_gold_texts(tmp_path, tokenizer, version):
    examples = squad.read_squad(squad_fixtures.write_squad_file(tmp_path, version, "dev"), version)
    arrays, infos, stats = squad.build_features(examples, tokenizer, version=version,
                                                max_seq_length=48, max_query_length=12,
                                                doc_stride=12, training=False)
    assert stats.split_contexts >= 4
    gold = _gold_features(examples, infos, tokenizer)
    answered = {infos[feature_index].example_index for feature_index in gold}
    assert answered == {index for index, example in enumerate(examples)
                        if not example.is_impossible}
    num_features = len(infos)
    if version == "v1.1":
        start_logits = np.zeros((num_features, 48))
        end_logits = np.zeros((num_features, 48))
        for feature_index, (start, end) in gold.items():
            start_logits[feature_index, start] = end_logits[feature_index, end] = 10.0
        predictions, _ = squad_postprocess.postprocess_v1(examples, infos, start_logits,
                                                          end_logits)
        null_odds = None
    else:
        outputs = {"start_top_index": np.tile([4, 5], (num_features, 1)),
                   "start_top_log_probs": np.full((num_features, 2), -5.0),
                   "end_top_index": np.tile([4, 5, 5, 6], (num_features, 1)),
                   "end_top_log_probs": np.full((num_features, 4), -5.0),
                   "cls_logits": np.where([examples[info.example_index].is_impossible
                                           for info in infos], 4.0, -4.0)}
        for feature_index, (start, end) in gold.items():
            outputs["start_top_index"][feature_index, 0] = start
            outputs["start_top_log_probs"][feature_index, 0] = -0.1
            outputs["end_top_index"][feature_index, 0] = end
            outputs["end_top_log_probs"][feature_index, 0] = -0.1
        predictions, nbest, null_odds = squad_postprocess.postprocess_v2(examples, infos,
                                                                         outputs)
        for example in examples:
            best = nbest[example.id][0]
            null_score = 4.0 if example.is_impossible else -4.0
            assert null_odds[example.id] == pytest.approx(
                null_score - best["start_log_prob"] - best["end_log_prob"])
            if not example.is_impossible:  # the gold span, -0.1 - 0.1
                assert null_odds[example.id] == pytest.approx(-3.8)
    for example in examples:
        if example.is_impossible:
            continue
        # The text comes from the original context, accents and all: "São Paulo", "ＡＢＣ１２３".
        expected = example.answers[0].text if example.answers[0].text != "한강" else "한강은"
        assert predictions[example.id] == expected
    if null_odds is not None:
        with_null = squad_postprocess.apply_null_threshold(null_odds, predictions, 0.0)
        assert [qid for qid, text in with_null.items() if not text] == [
            example.id for example in examples if example.is_impossible]


def test_v1_never_answers_cls_question_or_sep(tmp_path, tokenizer):
    """A v1.1 model trained on windows labelled [CLS] (SPEC 8.3) puts its largest start and end
    logits at [CLS] wherever it sees no answer; here at [CLS] in every window, then the
    question and both [SEP]s, then the gold span. The prediction is still the gold span of the
    context: a span starts and ends on context tokens only."""
    examples = squad.read_squad(squad_fixtures.write_squad_file(tmp_path, "v1.1", "dev"), "v1.1")
    arrays, infos, stats = squad.build_features(examples, tokenizer, version="v1.1",
                                                max_seq_length=48, max_query_length=12,
                                                doc_stride=12, training=False)
    assert stats.split_contexts >= 4
    real = arrays["input_mask"] == 1
    not_context = real & (arrays["p_mask"] == 1)  # the question and both [SEP]s
    start_logits = np.where(not_context, 20.0, np.where(real, 0.0, -10.0))
    start_logits[:, 0] = 30.0  # [CLS]
    end_logits = start_logits.copy()
    for feature_index, (start, end) in _gold_features(examples, infos, tokenizer).items():
        start_logits[feature_index, start] = end_logits[feature_index, end] = 5.0
    assert (start_logits.argmax(axis=1) == 0).all() and (end_logits.argmax(axis=1) == 0).all()
    predictions, nbest = squad_postprocess.postprocess_v1(examples, infos, start_logits,
                                                          end_logits)
    for example in examples:
        expected = example.answers[0].text if example.answers[0].text != "한강" else "한강은"
        assert predictions[example.id] == expected
        assert nbest[example.id][0]["start_logit"] == nbest[example.id][0]["end_logit"] == 5.0
        assert all(entry["start_logit"] <= 5.0 for entry in nbest[example.id])
