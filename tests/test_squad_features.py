"""SQuAD readers and features (SPEC 8.3): exact character alignment, windows, labels, bad input."""
from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest
import tensorflow_datasets as tfds

import squad_fixtures
from albert_jax.data.tokenizers import preprocess_text
from albert_jax.errors import ConfigError
from albert_jax.finetune.squad import data as squad
from albert_jax.finetune.squad.data import Answer, SquadExample


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return squad_fixtures.train_tokenizer(tmp_path_factory.mktemp("spm") / "squad.model")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("squad")
    for version in squad.VERSIONS:
        for split in ("train", "dev"):
            squad_fixtures.write_squad_file(directory, version, split)
    return directory


def _covered(example: SquadExample, answer: Answer, tokenizer) -> tuple[str, tuple[int, int]]:
    _, char_starts, char_ends = tokenizer.encode_with_offsets(example.context)
    first, last = squad.answer_token_span(char_starts, char_ends, answer)
    return example.context[char_starts[first]:char_ends[last]], (first, last)


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------

def test_read_squad_v2_dev(data_dir):
    examples = squad.read_squad(data_dir / "dev-v2.0.json", "v2.0")
    expected = squad_fixtures.squad_dataset("v2.0", "dev")
    qas = [qa for article in expected["data"] for qa in article["paragraphs"][0]["qas"]]
    assert [example.id for example in examples] == [qa["id"] for qa in qas]
    assert len(examples) == 26 and sum(example.is_impossible for example in examples) == 5
    by_id = {example.id: example for example in examples}
    # Several gold answers, with their own offsets, in the original (accented) text.
    assert by_id["q0_2"].answers == (Answer("São Paulo", 105), Answer("São Paulo and Zürich", 105))
    assert by_id["q2_0"].answers == (Answer("서울", 0), Answer("서울은", 0))
    assert by_id["q0_4"].is_impossible and by_id["q0_4"].answers == ()
    for example in examples:
        for answer in example.answers:
            assert example.context[answer.char_start:][:len(answer.text)] == answer.text


def test_read_squad_v1_train(data_dir):
    examples = squad.read_squad(data_dir / "train-v1.1.json", "v1.1")
    assert len(examples) == 21  # the 26 questions less the 5 unanswerable ones
    assert all(len(example.answers) == 1 and not example.is_impossible for example in examples)


def _write(tmp_path, obj, name="bad.json") -> str:
    return squad_fixtures.write_json(tmp_path / name, obj)


def _one_question(**qa_overrides) -> dict:
    qa = {"id": "x1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 10}]}
    qa.update(qa_overrides)
    return {"data": [{"title": "t", "paragraphs": [{"context": "It is in  Paris.", "qas": [qa]}]}]}


def test_read_squad_errors(tmp_path, data_dir):
    with pytest.raises(FileNotFoundError, match="missing.json does not exist"):
        squad.read_squad(tmp_path / "missing.json", "v1.1")
    (tmp_path / "broken.json").write_text('{"data": [}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.json is not valid JSON \(line 1 column 11"):
        squad.read_squad(tmp_path / "broken.json", "v1.1")
    with pytest.raises(ValueError, match="no top-level key 'data'"):
        squad.read_squad(_write(tmp_path, {"version": "1.1"}), "v1.1")
    with pytest.raises(ConfigError, match="must be one of"):
        squad.read_squad(data_dir / "dev-v1.1.json", "2.0")
    # answer_start that does not point at the text: named, with what is there instead.
    with pytest.raises(ValueError, match=r"qas\[0\] \(id 'x1'\) answers\[0\]: answer_start 9 "
                                         r"does not point at its text 'Paris' \(the context has "
                                         r"' Pari'"):
        squad.read_squad(_write(tmp_path, _one_question(
            answers=[{"text": "Paris", "answer_start": 9}])), "v1.1")
    with pytest.raises(ValueError, match="answer_start 99 does not point"):
        squad.read_squad(_write(tmp_path, _one_question(
            answers=[{"text": "Paris", "answer_start": 99}])), "v1.1")
    with pytest.raises(ValueError, match=r"answers\[0\] text must be a non-empty string"):
        squad.read_squad(_write(tmp_path, _one_question(
            answers=[{"text": " ", "answer_start": 2}])), "v1.1")
    with pytest.raises(ValueError, match=r"data\[0\] has no key 'paragraphs'"):
        squad.read_squad(_write(tmp_path, {"data": [{"title": "t"}]}), "v1.1")
    with pytest.raises(ValueError, match="answer_start must be an integer"):
        squad.read_squad(_write(tmp_path, _one_question(
            answers=[{"text": "Paris", "answer_start": "10"}])), "v1.1")
    broken = _one_question()
    del broken["data"][0]["paragraphs"][0]["qas"][0]["question"]
    with pytest.raises(ValueError, match=r"paragraphs\[0\]\.qas\[0\] has no key 'question'"):
        squad.read_squad(_write(tmp_path, broken), "v1.1")
    with pytest.raises(ValueError, match="has no answers; every SQuAD v1.1 question"):
        squad.read_squad(_write(tmp_path, _one_question(answers=[])), "v1.1")
    with pytest.raises(ValueError, match="is_impossible is true but it has 1 answers"):
        squad.read_squad(_write(tmp_path, _one_question(is_impossible=True)), "v2.0")
    duplicated = _one_question()
    duplicated["data"][0]["paragraphs"][0]["qas"] *= 2
    with pytest.raises(ValueError, match="question ids must be unique.*'x1'"):
        squad.read_squad(_write(tmp_path, duplicated), "v1.1")


def test_read_squad_version_mismatch(tmp_path, data_dir):
    # By the top-level "version" key of the official files...
    with pytest.raises(ConfigError, match=r"dev-v2.0.json key 'version' is 'v2.0' \(SQuAD v2.0\) "
                                          r"but version v1.1 was asked for"):
        squad.read_squad(data_dir / "dev-v2.0.json", "v1.1")
    with pytest.raises(ConfigError, match=r"key 'version' is '1.1' \(SQuAD v1.1\) but version "
                                          "v2.0"):
        squad.read_squad(data_dir / "train-v1.1.json", "v2.0")
    # ...and, without it, by the questions' is_impossible key.
    with pytest.raises(ConfigError, match=r"\(id 'x1'\) has key 'is_impossible', which only SQuAD "
                                          "v2.0 files have"):
        squad.read_squad(_write(tmp_path, _one_question(is_impossible=False)), "v1.1")
    with pytest.raises(ConfigError, match=r"\(id 'x1'\) has no key 'is_impossible'"):
        squad.read_squad(_write(tmp_path, _one_question()), "v2.0")


def _tfds_records(version: str) -> list[dict]:
    """What tfds.data_source gives for squad/<version>: bytes texts, answers as a dict of arrays."""
    records = []
    for article in squad_fixtures.squad_dataset(version, "dev")["data"]:
        paragraph = article["paragraphs"][0]
        for qa in paragraph["qas"]:
            record = {"id": qa["id"].encode(), "title": article["title"].encode(),
                      "context": paragraph["context"].encode(),
                      "question": qa["question"].encode(),
                      "answers": {
                          "text": np.array([a["text"].encode() for a in qa["answers"]],
                                           dtype=object),
                          "answer_start": np.array([a["answer_start"] for a in qa["answers"]],
                                                   dtype=np.int32)}}
            if version == "v2.0":
                record["is_impossible"] = np.bool_(qa["is_impossible"])
            records.append(record)
    return records


def test_read_tfds(data_dir):
    def data_source(self, split, **kwargs):
        return _tfds_records(self.builder_config.name)

    with tfds.testing.mock_data(as_data_source_fn=data_source):
        examples = squad.read_tfds("squad/v2.0", "validation", "v2.0")
        assert examples == squad.read_squad(data_dir / "dev-v2.0.json", "v2.0")
        assert (squad.read_tfds("squad/v1.1", "validation", "v1.1")
                == squad.read_squad(data_dir / "dev-v1.1.json", "v1.1"))
        with pytest.raises(ConfigError, match=r"TFDS squad/v2.0 validation\[0\] \(id 'q0_0'\) has "
                                              "key 'is_impossible'"):
            squad.read_tfds("squad/v2.0", "validation", "v1.1")


# ----------------------------------------------------------------------------------------------
# Character alignment
# ----------------------------------------------------------------------------------------------

TRICKY_TEXTS = [
    "  Multiple   spaces\tand\ttabs  ", "´acute start and a\u0301b", "\u0301leading mark",
    "½ and ﬁne", "ΣΟΦΟΣ İstanbul Straße", "1,000, and 9,5 and 3.0,", "漢字 are unknown here",
]


def _fold(text: str) -> str:
    # What SentencePiece sees of preprocessed text: NFKC (recomposes the jamo that NFKD split),
    # case-folded here so that a final sigma of one token alone compares equal.
    return unicodedata.normalize("NFKC", text).casefold()


@pytest.mark.parametrize("text", [context for context, _ in squad_fixtures.PARAGRAPHS]
                         + TRICKY_TEXTS)
def test_token_offsets_partition_the_context(tokenizer, text):
    """Every token covers exactly the original characters its piece came from. Tokens follow
    each other; two share a character only when that one character preprocesses to several
    (the pieces of "½" -> "1⁄2"); each token's text preprocesses to its piece when it shares
    nothing, and each group of sharing tokens to their pieces; what lies between the tokens
    preprocesses to nothing but spaces."""
    ids, char_starts, char_ends = tokenizer.encode_with_offsets(text)
    np.testing.assert_array_equal(ids, tokenizer.encode(text))
    pieces = tokenizer.pieces(text)
    tokens = [(start, end, _fold(piece.replace("▁", ""))) for start, end, piece in
              zip(char_starts, char_ends, pieces) if end > start]
    groups = []  # [start, end, pieces text, number of tokens]
    for start, end, piece_text in tokens:
        if groups and start < groups[-1][1]:
            assert start == groups[-1][1] - 1 and len(preprocess_text(text[start])) > 1
            groups[-1][1:] = [end, groups[-1][2] + piece_text, groups[-1][3] + 1]
        else:
            assert not groups or start >= groups[-1][1]
            groups.append([start, end, piece_text, 1])
    previous_end = 0
    for start, end, pieces_text, num_tokens in groups:
        assert preprocess_text(text[previous_end:start]).strip() == ""
        assert _fold(preprocess_text(text[start:end])) == pieces_text
        previous_end = end
    assert preprocess_text(text[previous_end:]).strip() == ""
    for start, end, piece_text in tokens:
        assert piece_text in _fold(preprocess_text(text[start:end]))
    # Zero-width tokens ("▁" alone) sit where the next word starts.
    for start, end, piece in zip(char_starts, char_ends, pieces):
        if start == end:
            assert piece == "▁" and (start == len(text) or not text[start].isspace())


def test_fixture_answers_round_trip(tokenizer, data_dir):
    """Every gold answer of the files maps to tokens and back to its exact text, or, when it
    starts or ends inside a piece, to the fewest whole pieces that hold it."""
    inside_pieces = []
    for version in squad.VERSIONS:
        for example in squad.read_squad(data_dir / f"dev-{version}.json", version):
            _, char_starts, char_ends = tokenizer.encode_with_offsets(example.context)
            for answer in example.answers:
                covered, (first, last) = _covered(example, answer, tokenizer)
                answer_end = answer.char_start + len(answer.text)
                if covered == answer.text:
                    continue
                # Not exact: a boundary lies strictly inside the first or the last piece.
                assert answer.text in covered
                assert (char_starts[first] < answer.char_start < char_ends[first]
                        or char_starts[last] < answer_end < char_ends[last])
                # Whitespace always ends a piece: answers between spaces are always exact.
                before = example.context[answer.char_start - 1:answer.char_start]
                after = example.context[answer_end:answer_end + 1]
                assert not ((not before or before.isspace()) and (not after or after.isspace()))
                inside_pieces.append(answer.text)
    # The test tokenizer (deterministic training) has the piece "강은", so "한강" (in both files)
    # ends inside a piece; every other answer is exact.
    assert inside_pieces == ["한강", "한강"]


def test_mid_word_answers(tokenizer):
    """Answers that start or end inside a word: exact when the boundary is between pieces, the
    covering pieces (and counted) when it is inside one."""
    context = "The Kabampish hills sell sorbet."
    assert tokenizer.pieces(context)[1:11] == ["▁", "k", "a", "b", "a", "m", "p", "i", "s", "h"]
    assert "▁sorbet" in tokenizer.pieces(context)
    examples = [SquadExample("between_pieces", "q", context, (Answer("bampi", 6),), False),
                SquadExample("inside_piece", "q", context, (Answer("orbe", 26),), False)]
    assert _covered(examples[0], examples[0].answers[0], tokenizer)[0] == "bampi"
    assert _covered(examples[1], examples[1].answers[0], tokenizer)[0] == "sorbet"
    arrays, infos, stats = squad.build_features(examples, tokenizer, version="v1.1",
                                                max_seq_length=64, max_query_length=8,
                                                training=True)
    assert stats.answers_inside_pieces == 1 and not stats.dropped_qids
    texts = [info.text(context, start - info.context_offset, end - info.context_offset)
             for info, start, end in zip(infos, arrays["start_positions"], arrays["end_positions"])]
    assert texts == ["bampi", "sorbet"]


# ----------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------

def test_feature_layout(tokenizer):
    """[CLS] question [SEP] context [SEP] <pad>, segments 0/1, p_mask as the reference."""
    the = tokenizer.encode("the")[0]
    example = SquadExample("q", "the the", "the the the", (Answer("the", 4),), False)
    arrays, infos, stats = squad.build_features([example], tokenizer, version="v2.0",
                                                max_seq_length=10, max_query_length=4,
                                                training=True)
    cls, sep, pad = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
    np.testing.assert_array_equal(arrays["input_ids"],
                                  [[cls, the, the, sep, the, the, the, sep, pad, pad]])
    np.testing.assert_array_equal(arrays["segment_ids"], [[0, 0, 0, 0, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(arrays["input_mask"], [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    # Question and special tokens cannot be the answer; [CLS] can (v2.0's no-answer position).
    np.testing.assert_array_equal(arrays["p_mask"], [[0, 1, 1, 1, 0, 0, 0, 1, 1, 1]])
    assert (arrays["start_positions"].tolist(), arrays["end_positions"].tolist(),
            arrays["is_impossible"].tolist(), arrays["example_index"].tolist()) == (
        [5], [5], [0], [0])
    assert all(array.dtype == np.int32 for array in arrays.values())
    assert infos[0].context_offset == 4
    np.testing.assert_array_equal(infos[0].char_starts, [0, 4, 8])
    np.testing.assert_array_equal(infos[0].char_ends, [3, 7, 11])
    assert stats.report() == "1 features from 1 examples"


def _reference_is_max_context(windows, window_index, position):
    """The reference's `_check_is_max_context`, transcribed."""
    best_score, best_window = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_window = score, index
    return window_index == best_window


def test_windows_and_max_context(tokenizer):
    # 50 context tokens, 1 question token, max_seq_length 32: windows of 28 tokens, stride 10.
    example = SquadExample("q", "the", " ".join(["the"] * 50), (Answer("the", 0),), False)
    arrays, infos, stats = squad.build_features([example], tokenizer, version="v1.1",
                                                max_seq_length=32, max_query_length=4,
                                                doc_stride=10, training=False)
    windows = [(0, 28), (10, 28), (20, 28), (30, 20)]  # by hand: the last one ends at token 50
    assert [(info.token_start, len(info.char_starts)) for info in infos] == windows
    assert [info.char_starts[0] for info in infos] == [0, 40, 80, 120]
    assert stats.split_contexts == 1 and stats.features == 4
    np.testing.assert_array_equal(arrays["input_mask"].sum(axis=1), [32, 32, 32, 24])
    for window_index, (info, (start, length)) in enumerate(zip(infos, windows)):
        expected = [_reference_is_max_context(windows, window_index, start + offset)
                    for offset in range(length)]
        np.testing.assert_array_equal(info.is_max_context, expected)
    # By hand: token 25 has 2 tokens on its right in window 0, 12 in window 1 (its best), 5 on
    # its left in window 2; token 45 is best in the last window (4 right vs 2).
    owner = {start + offset: window_index for window_index, (info, (start, _)) in
             enumerate(zip(infos, windows)) for offset in np.flatnonzero(info.is_max_context)}
    assert sorted(owner) == list(range(50))
    assert (owner[5], owner[15], owner[25], owner[35], owner[40], owner[45]) == (0, 0, 1, 2, 3, 3)


def test_three_windows_answer_in_the_second(tokenizer):
    """Worked out by hand from the reference's `convert_examples_to_features` (SPEC 8.3).

    Question "the" (1 token), context 16 x "the" (token i covers characters 4i..4i+2),
    max_seq_length 12: max_tokens_for_doc = 12 - 1 - 3 = 8; doc_stride 4 gives the doc_spans
    (0, 8), (4, 8), (8, 8) (the third ends at token 16). The answer "the the the the" at character
    24 is tokens 6..9: only the second span [4, 11] holds both ends. The reference labels the
    first and third out_of_span (its `continue` is commented out): start = end = 0,
    is_impossible; the second: doc_offset = len(query_tokens) + 2 = 3, start = 6 - 4 + 3 = 5,
    end = 9 - 4 + 3 = 8."""
    context = " ".join(["the"] * 16)
    example = SquadExample("three", "the", context, (Answer("the the the the", 24),), False)
    settings = dict(version="v1.1", max_seq_length=12, max_query_length=4, doc_stride=4,
                    training=True)
    arrays, infos, stats = squad.build_features([example], tokenizer, **settings)
    assert [(info.token_start, len(info.char_starts)) for info in infos] == [(0, 8), (4, 8),
                                                                            (8, 8)]
    np.testing.assert_array_equal(arrays["start_positions"], [0, 5, 0])
    np.testing.assert_array_equal(arrays["end_positions"], [0, 8, 0])
    np.testing.assert_array_equal(arrays["is_impossible"], [1, 0, 1])
    cls, sep, the = tokenizer.cls_id, tokenizer.sep_id, tokenizer.encode("the")[0]
    np.testing.assert_array_equal(arrays["input_ids"], [[cls, the, sep] + [the] * 8 + [sep]] * 3)
    assert infos[1].text(context, 5 - 3, 8 - 3) == "the the the the"
    assert (stats.features, stats.windows_without_answer, stats.dropped_qids) == (3, 2, [])
    # "drop" (v1.1 only) keeps the second window alone, with the same label.
    arrays, infos, stats = squad.build_features([example], tokenizer, **settings,
                                                windows_without_answer="drop")
    assert [info.window_index for info in infos] == [1]
    assert (arrays["start_positions"].tolist(), arrays["end_positions"].tolist(),
            arrays["is_impossible"].tolist()) == ([5], [8], [0])
    assert (stats.features, stats.windows_without_answer) == (1, 2)


def test_training_labels_over_windows(tokenizer, data_dir):
    """Long contexts: v1.1 and v2.0 label the windows without the whole answer "no answer" at
    [CLS], and an answerable question gets the same features in both; with "drop" v1.1 keeps only
    the windows that hold the answer. Every label maps back to the answer through its window's
    offsets."""
    examples = squad.read_squad(data_dir / "train-v2.0.json", "v2.0")
    answerable = [example for example in examples if not example.is_impossible]
    settings = dict(max_seq_length=48, max_query_length=12, doc_stride=12, training=True)
    kept_arrays, kept_infos, kept_stats = squad.build_features(
        answerable, tokenizer, version="v1.1", windows_without_answer="drop", **settings)
    v1_arrays, v1_infos, v1_stats = squad.build_features(answerable, tokenizer, version="v1.1",
                                                         **settings)
    v2_arrays, v2_infos, v2_stats = squad.build_features(examples, tokenizer, version="v2.0",
                                                         **settings)
    assert kept_stats.split_contexts >= 4 and kept_stats.windows_without_answer > 10
    assert not kept_arrays["is_impossible"].any()
    assert sorted(set(kept_arrays["example_index"].tolist())) == list(range(len(answerable)))
    for index, info in enumerate(kept_infos):
        example = answerable[info.example_index]
        text = info.text(example.context,
                         kept_arrays["start_positions"][index] - info.context_offset,
                         kept_arrays["end_positions"][index] - info.context_offset)
        assert text == _covered(example, example.answers[0], tokenizer)[0]
    # "cls": the same answer windows plus every other window, labelled (0, 0, impossible).
    assert v1_stats.windows_without_answer == kept_stats.windows_without_answer
    assert v1_stats.features == kept_stats.features + kept_stats.windows_without_answer
    assert not v1_stats.dropped_qids
    answered = v1_arrays["is_impossible"] == 0
    for key in ("input_ids", "start_positions", "end_positions", "is_impossible"):
        np.testing.assert_array_equal(v1_arrays[key][answered], kept_arrays[key])
    # v2.0 labels windows as v1.1 does; its unanswerable questions add (0, 0) windows only.
    assert v2_stats.windows_without_answer == v1_stats.windows_without_answer
    v2_answerable = np.isin(v2_arrays["example_index"],
                            [index for index, example in enumerate(examples)
                             if not example.is_impossible])
    for key in ("input_ids", "start_positions", "end_positions", "is_impossible"):
        np.testing.assert_array_equal(v2_arrays[key][v2_answerable], v1_arrays[key])
    impossible = v2_arrays["is_impossible"] == 1
    assert impossible.sum() == v2_stats.features - kept_stats.features
    for arrays, infos, source in ((v1_arrays, v1_infos, answerable),
                                  (v2_arrays, v2_infos, examples)):
        impossible = arrays["is_impossible"] == 1
        assert not arrays["start_positions"][impossible].any()
        assert not arrays["end_positions"][impossible].any()
        for index in np.flatnonzero(impossible):
            info = infos[index]
            example = source[info.example_index]
            length = len(info.char_starts)
            context_ids = tokenizer.encode_with_offsets(example.context)[0]
            np.testing.assert_array_equal(
                arrays["input_ids"][index, info.context_offset:info.context_offset + length],
                context_ids[info.token_start:info.token_start + length])
            if not example.is_impossible:  # The answer is in another window.
                first, last = _covered(example, example.answers[0], tokenizer)[1]
                assert not (info.token_start <= first and last < info.token_start + length)


def test_windows_without_answer_errors(tokenizer):
    example = SquadExample("q", "the", "the the", (Answer("the", 0),), False)
    settings = dict(max_seq_length=16, max_query_length=4, training=True)
    with pytest.raises(ConfigError, match="windows_without_answer='drop' is for SQuAD v1.1 only: "
                                          "v2.0 labels"):
        squad.build_features([example], tokenizer, version="v2.0",
                             windows_without_answer="drop", **settings)
    with pytest.raises(ConfigError, match=r"windows_without_answer='skip' must be one of "
                                          r"\('cls', 'drop'\)"):
        squad.build_features([example], tokenizer, version="v1.1",
                             windows_without_answer="skip", **settings)


def test_answers_that_cannot_be_labelled(tokenizer, caplog):
    """Counted, never shifted: an answer made only of a combining accent (no piece) drops its
    example; an answer longer than any window leaves every window of it labelled "no answer"
    (as the reference), or with "drop" no window, which drops the example."""
    long_context = " ".join(["the"] * 30)
    examples = [
        SquadExample("accent_only", "q", "cafe\u0301 open", (Answer("\u0301", 4),), False),
        SquadExample("too_long", "q", long_context, (Answer(long_context[:4 * 20 - 1], 0),), False),
        SquadExample("fine", "q", "cafe open", (Answer("open", 5),), False),
        SquadExample("several", "q", "cafe open", (Answer("open", 5), Answer("cafe", 0)), False),
    ]
    settings = dict(max_seq_length=20, max_query_length=4, doc_stride=8, training=True)
    arrays, infos, stats = squad.build_features(examples, tokenizer, version="v1.1",
                                                windows_without_answer="drop", **settings)
    assert (stats.answers_not_found, stats.answers_in_no_window, stats.several_answers) == (1, 1, 1)
    assert stats.dropped_qids == ["accent_only", "too_long"]
    assert sorted(set(arrays["example_index"].tolist())) == [2, 3]
    assert "dropped question ids: accent_only, too_long" in caplog.text
    # "cls" (both versions) keeps the too-long answer's windows, labelled "no answer", and
    # counts it too.
    for version in squad.VERSIONS:
        arrays, _, stats = squad.build_features(examples[1:], tokenizer, version=version,
                                                **settings)
        assert stats.answers_in_no_window == 1 and not stats.dropped_qids
        too_long = arrays["example_index"] == 0
        assert too_long.sum() > 1 and arrays["is_impossible"][too_long].all()
        assert not arrays["start_positions"][too_long].any()


def test_truncated_question_and_eval_features(tokenizer, data_dir):
    examples = squad.read_squad(data_dir / "dev-v2.0.json", "v2.0")
    long_question = SquadExample("long", "the " * 40, "the cafe", (), True)
    arrays, infos, stats = squad.build_features(examples + [long_question], tokenizer,
                                                version="v2.0", max_seq_length=64,
                                                max_query_length=16, training=False)
    assert stats.truncated_questions >= 1 and infos[-1].context_offset == 18
    assert set(arrays) == {"input_ids", "segment_ids", "input_mask", "p_mask", "example_index"}
    # Evaluation keeps every window of every example, answerable or not.
    assert sorted(set(arrays["example_index"].tolist())) == list(range(len(examples) + 1))


def test_feature_errors(tokenizer, data_dir):
    examples = squad.read_squad(data_dir / "dev-v2.0.json", "v2.0")
    with pytest.raises(ConfigError, match="max_seq_length=66 leaves no room"):
        squad.build_features(examples, tokenizer, version="v2.0", max_seq_length=66,
                             training=False)
    with pytest.raises(ConfigError, match="doc_stride=0"):
        squad.build_features(examples, tokenizer, version="v2.0", max_seq_length=128,
                             doc_stride=0, training=False)
    with pytest.raises(ConfigError, match=r"version v1.1 was asked for but questions \['q0_4'"):
        squad.build_features(examples, tokenizer, version="v1.1", max_seq_length=128,
                             training=True)
    empty = SquadExample("empty", "q", " \u0301 ", (), True)
    with pytest.raises(ValueError, match="question 'empty': its context has no tokens"):
        squad.build_features([empty], tokenizer, version="v2.0", max_seq_length=128,
                             training=False)


def test_official_json_round_trip(tmp_path):
    """The fixture files are valid official-format JSON (as the evaluator reads them)."""
    path = squad_fixtures.write_squad_file(tmp_path, "v2.0", "train")
    dataset = json.loads(open(path, encoding="utf-8").read())
    assert dataset["version"] == "v2.0" and len(dataset["data"]) == len(squad_fixtures.PARAGRAPHS)
    qa = dataset["data"][0]["paragraphs"][0]["qas"][4]
    assert qa["is_impossible"] and qa["answers"] == [] and qa["plausible_answers"]
