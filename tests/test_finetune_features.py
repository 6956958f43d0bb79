"""Fine-tuning features: pair encoding and truncation (SPEC 8.1), RACE choices (SPEC 8.4)."""
import random

import numpy as np
import pytest

from albert_jax.data.tokenizers import Tokenizer, train
from albert_jax.finetune.core import features
from albert_jax.finetune.core.examples import ChoiceQuestion, TextExample
from albert_jax.finetune.glue import data as glue
from finetune_fixtures import sentence

CLS, SEP, PAD = 2, 3, 0  # SPEC 2.1


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    rng = random.Random(0)
    path = train([sentence(rng) for _ in range(2000)],
                 str(tmp_path_factory.mktemp("spm") / "tiny.model"), 180)
    return Tokenizer.load(path)


def _ids(tokenizer, text: str, length: int) -> list[int]:
    """The ids of `text`, checking the test's assumption about how many there are."""
    ids = tokenizer.encode(text).tolist()
    assert len(ids) == length, (text, tokenizer.id_to_piece(ids))
    return ids


def _reference_pair(ids_a: list[int], ids_b: list[int] | None, seq_len: int):
    """A plain port of the reference convert_single_example / _truncate_seq_pair."""
    ids_a = list(ids_a)
    ids_b = list(ids_b) if ids_b else None
    if ids_b:
        while len(ids_a) + len(ids_b) > seq_len - 3:
            if len(ids_a) > len(ids_b):
                ids_a.pop()
            else:
                ids_b.pop()
    else:
        ids_a = ids_a[:seq_len - 2]
    tokens = [CLS] + ids_a + [SEP]
    segments = [0] * len(tokens)
    if ids_b:
        tokens += ids_b + [SEP]
        segments += [1] * (len(ids_b) + 1)
    mask = [1] * len(tokens)
    padding = seq_len - len(tokens)
    return tokens + [PAD] * padding, segments + [0] * padding, mask + [0] * padding


def test_special_ids(tokenizer):
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id) == (CLS, SEP, PAD)


def test_pair_fits_with_padding(tokenizer):
    a = _ids(tokenizer, "the man walked", 3)
    b = _ids(tokenizer, "a dog ran", 3)
    input_ids, segment_ids, input_mask = features.encode_pair(tokenizer, "The man walked",
                                                              "a  DOG ran", 12)
    assert input_ids.dtype == segment_ids.dtype == input_mask.dtype == np.int32
    assert input_ids.tolist() == [CLS, *a, SEP, *b, SEP, PAD, PAD, PAD]
    assert segment_ids.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert input_mask.tolist() == [1] * 9 + [0] * 3


def test_pair_truncation_pops_the_end_of_the_longer(tokenizer):
    long_a = _ids(tokenizer, "the man walked over the old road with a dog", 10)
    short_b = _ids(tokenizer, "a red car", 3)
    # seq_len 12 leaves 9 tokens: A (10) loses its last 4, B keeps all 3.
    input_ids, segment_ids, input_mask = features.encode_pair(
        tokenizer, "the man walked over the old road with a dog", "a red car", 12)
    assert input_ids.tolist() == [CLS, *long_a[:6], SEP, *short_b, SEP]
    assert segment_ids.tolist() == [0] * 8 + [1] * 4
    assert input_mask.tolist() == [1] * 12
    # B longer: B loses its end.
    input_ids, _, _ = features.encode_pair(
        tokenizer, "a red car", "the man walked over the old road with a dog", 12)
    assert input_ids.tolist() == [CLS, *short_b, SEP, *long_a[:6], SEP]


def test_pair_truncation_alternates_once_lengths_meet(tokenizer):
    a = _ids(tokenizer, "the man walked over the old road", 7)
    b = _ids(tokenizer, "a dog ran near the house", 6)
    # 9 tokens left: pop A (6,6), tie pops B (6,5), pop A (5,5), tie pops B (5,4).
    input_ids, segment_ids, _ = features.encode_pair(
        tokenizer, "the man walked over the old road", "a dog ran near the house", 12)
    assert input_ids.tolist() == [CLS, *a[:5], SEP, *b[:4], SEP]
    assert segment_ids.tolist() == [0] * 7 + [1] * 5


def test_single_sentence_cut_to_seq_len_minus_2(tokenizer):
    a = _ids(tokenizer, "the man walked over the old road with a dog", 10)
    input_ids, segment_ids, input_mask = features.encode_pair(
        tokenizer, "the man walked over the old road with a dog", None, 8)
    assert input_ids.tolist() == [CLS, *a[:6], SEP]
    assert segment_ids.tolist() == [0] * 8
    assert input_mask.tolist() == [1] * 8
    # As the reference (`if tokens_b:`), an empty B is no B.
    assert features.encode_pair(tokenizer, "the man", "", 6)[0].tolist() == [
        CLS, *_ids(tokenizer, "the man", 2), SEP, PAD, PAD]


def test_truncation_closed_form_matches_the_reference_loop():
    for max_length in range(0, 24):
        for length_a in range(0, 20):
            for length_b in range(0, 20):
                a, b = length_a, length_b
                while a + b > max_length:
                    if a > b:
                        a -= 1
                    else:
                        b -= 1
                got = features._truncated_pair_lengths(np.array([length_a]),
                                                       np.array([length_b]), max_length)
                assert (got[0][0], got[1][0]) == (a, b), (length_a, length_b, max_length)


def test_classification_features_match_reference_port(tokenizer):
    rng = random.Random(1)
    premises = [sentence(rng, 3, 25) for _ in range(40)]
    examples = []
    for index in range(300):  # Repeated premises, as in MNLI; some single sentences.
        text_b = None if index % 7 == 0 else sentence(rng, 1, 25)
        examples.append(TextExample(str(index), rng.choice(premises), text_b,
                                    rng.choice(("contradiction", "entailment", "neutral")),
                                    f"test:{index}"))
    batch = features.classification_features(examples, tokenizer, 24, glue.labels("mnli"))
    assert batch["input_ids"].shape == batch["segment_ids"].shape == (300, 24)
    assert batch["input_mask"].dtype == np.int32 and batch["labels"].dtype == np.int32
    for row, example in enumerate(examples):
        ids_b = None if example.text_b is None else tokenizer.encode(example.text_b).tolist()
        expected = _reference_pair(tokenizer.encode(example.text_a).tolist(), ids_b, 24)
        assert batch["input_ids"][row].tolist() == expected[0]
        assert batch["segment_ids"][row].tolist() == expected[1]
        assert batch["input_mask"][row].tolist() == expected[2]
        assert batch["labels"][row] == ("contradiction", "entailment",
                                        "neutral").index(example.label)


def test_classification_labels(tokenizer):
    examples = [TextExample("0", "the man", None, "3.800", "f:2"),
                TextExample("1", "the man", None, None, "f:3")]
    batch = features.classification_features(examples, tokenizer, 8, None)
    assert batch["labels"].dtype == np.float32
    np.testing.assert_array_equal(batch["labels"], np.array([3.8, 0.0], np.float32))
    examples = [TextExample("0", "the man", "a dog", "not_entailment", "f:2"),
                TextExample("1", "the man", "a dog", None, "f:3")]
    batch = features.classification_features(examples, tokenizer, 8, glue.labels("rte"))
    assert batch["labels"].tolist() == [1, 0]


def test_classification_errors(tokenizer):
    bad = [TextExample("0", "the man", None, "maybe", "dev.tsv:7")]
    with pytest.raises(ValueError, match=r"dev\.tsv:7: unknown label 'maybe'; the labels are 0, 1"):
        features.classification_features(bad, tokenizer, 8, ("0", "1"))
    with pytest.raises(ValueError, match=r"dev\.tsv:7: regression label 'maybe' is not a number"):
        features.classification_features(bad, tokenizer, 8, None)
    with pytest.raises(ValueError, match="seq_len=2 is too short"):
        features.encode_pair(tokenizer, "the man", None, 2)


def test_race_blank_is_replaced_by_the_option(tokenizer):
    article = _ids(tokenizer, "the man walked near the market", 6)
    filled = _ids(tokenizer, "the man walked over the old house", 7)
    appended = _ids(tokenizer, "the man saw a bird. old house", 8)
    input_ids, segment_ids, input_mask = features.encode_multiple_choice(
        tokenizer, "The man walked near the market", "The man walked over the _",
        ["old house", "a", "b", "c"], 20, num_choices=4)
    assert input_ids.shape == segment_ids.shape == input_mask.shape == (4, 20)
    assert input_ids[0].tolist() == [CLS, *article, SEP, *filled, SEP] + [PAD] * 4
    assert segment_ids[0].tolist() == [0] * 8 + [1] * 8 + [0] * 4
    assert input_mask[0].tolist() == [1] * 16 + [0] * 4
    # No blank: the option follows the question after a space.
    input_ids, _, _ = features.encode_multiple_choice(
        tokenizer, "The man walked near the market", "The man saw a bird.",
        ["a", "b", "Old house", "c"], 20, num_choices=4)
    assert input_ids[2].tolist() == [CLS, *article, SEP, *appended, SEP] + [PAD] * 3


def test_race_truncation(tokenizer):
    article = _ids(tokenizer, "the man walked near the market with a dog", 9)
    qa = _ids(tokenizer, "the man saw a bird. old house", 8)
    # The question + option keeps its LAST max_qa_length tokens; the article's end gives way.
    input_ids, segment_ids, _ = features.encode_multiple_choice(
        tokenizer, "the man walked near the market with a dog", "the man saw a bird.",
        ["old house"] * 4, 12, max_qa_length=4, num_choices=4)
    assert input_ids[0].tolist() == [CLS, *article[:5], SEP, *qa[-4:], SEP]
    assert segment_ids[3].tolist() == [0] * 7 + [1] * 5
    # With the default max_qa_length (128) the article gets what the 8 qa tokens leave.
    input_ids, _, _ = features.encode_multiple_choice(
        tokenizer, "the man walked near the market with a dog", "the man saw a bird.",
        ["old house"] * 4, 14, num_choices=4)
    assert input_ids[1].tolist() == [CLS, *article[:3], SEP, *qa, SEP]
    # Question + option longer than seq_len - 3: its last seq_len - 3 tokens, no article.
    input_ids, _, input_mask = features.encode_multiple_choice(
        tokenizer, "the man walked near the market with a dog", "the man saw a bird.",
        ["old house"] * 4, 8, num_choices=4)
    assert input_ids[0].tolist() == [CLS, SEP, *qa[-5:], SEP]
    assert input_mask[0].tolist() == [1] * 8


def test_multiple_choice_features(tokenizer):
    rng = random.Random(2)
    questions = [ChoiceQuestion(f"dev/high/{n}.txt-0", sentence(rng, 10, 40),
                                rng.choice(["the man walked over the _", "the man saw a bird."]),
                                tuple(sentence(rng, 1, 4, end="") for _ in range(4)), answer,
                                level="high")
                 for n, answer in enumerate([3, None, 0, 2])]
    batch = features.multiple_choice_features(questions, tokenizer, 24, max_qa_length=6,
                                              num_choices=4)
    assert batch["input_ids"].shape == (4, 4, 24)
    assert batch["labels"].tolist() == [3, 0, 0, 2]
    for row, question in enumerate(questions):
        single = features.encode_multiple_choice(tokenizer, question.article, question.question,
                                                 question.options, 24, max_qa_length=6,
                                                 num_choices=4)
        for name, array in zip(("input_ids", "segment_ids", "input_mask"), single):
            np.testing.assert_array_equal(batch[name][row], array)
    with pytest.raises(ValueError, match="needs 4 options, got 3"):
        features.encode_multiple_choice(tokenizer, "a", "b", ["x", "y", "z"], 16, num_choices=4)
