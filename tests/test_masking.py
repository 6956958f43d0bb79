"""Whole-word n-gram masking (SPEC 1.4) and example features (SPEC 1.5)."""
import numpy as np
import pytest

from albert_jax.data.building import masking
from albert_jax.data.building.instances import Instance

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIAL = (PAD, CLS, SEP)
VOCAB = 2000
# Synthetic vocabulary: ids 5..999 start a word, 1000..1999 continue one.
WORD_START = np.arange(VOCAB) < 1000
WORD_START[:5] = [True, True, False, False, False]  # <pad>, <unk> start; [CLS] [SEP] [MASK] not


def _sequence(rng, num_tokens, max_pieces=3):
    """[CLS] A [SEP] B [SEP] of random words of 1..max_pieces pieces, exactly num_tokens long."""
    lengths = rng.integers(1, max_pieces + 1, size=num_tokens)
    is_start = np.zeros(lengths.sum(), bool)
    is_start[np.cumsum(lengths) - lengths] = True
    body = np.where(is_start, rng.integers(5, 1000, len(is_start)),
                    rng.integers(1000, VOCAB, len(is_start)))[:num_tokens - 3].tolist()
    cut = len(body) // 2
    tokens = np.array([CLS] + body[:cut] + [SEP] + body[cut:] + [SEP], np.int32)
    segment_ids = np.array([0] * (cut + 2) + [1] * (len(body) - cut + 1), np.int32)
    return Instance(tokens, segment_ids, int(rng.integers(0, 2)))


def _mask(tokens, rng, **kwargs):
    boundary = masking.token_boundary(tokens, WORD_START, SPECIAL)
    kwargs.setdefault("max_predictions", 20)
    return masking.mask_sequence(tokens, boundary, rng, vocab_size=VOCAB, mask_id=MASK,
                                 special_ids=SPECIAL, **kwargs), boundary


def test_token_boundary():
    tokens = np.array([CLS, 7, 1500, 1501, 8, SEP, 1502, 9, SEP])
    assert masking.token_boundary(tokens, WORD_START, SPECIAL).tolist() == [
        1, 1, 0, 0, 1, 1, 0, 1, 1]


def test_ngram_probabilities():
    # SPEC 1.4.4: p(n) ∝ 1/n.
    np.testing.assert_allclose(masking.ngram_probabilities(3), [6 / 11, 3 / 11, 2 / 11])
    np.testing.assert_allclose(masking.ngram_probabilities(3, False), [2 / 11, 3 / 11, 6 / 11])
    np.testing.assert_allclose(masking.ngram_probabilities(1), [1.0])


@pytest.mark.parametrize("num_tokens, max_predictions, prob, expected", [
    (512, 20, 0.15, 20),  # SPEC 1.4.3: 0.15 * 512 = 76.8, capped to 20 (3.9% of tokens)
    (128, 20, 0.15, 19),  # round(19.2)
    (30, 20, 0.15, 4),  # round(4.5) = 4: Python rounds halves to even, as the reference
    (10, 20, 0.15, 2),  # round(1.5) = 2
    (5, 20, 0.15, 1),  # round(0.75)
    (6, 20, 0.05, 1),  # max(1, round(0.3) = 0)
    (128, 100, 0.15, 19)])
def test_num_to_predict(num_tokens, max_predictions, prob, expected):
    assert masking.num_to_predict(num_tokens, max_predictions=max_predictions,
                                  masked_lm_prob=prob) == expected
    # One-piece words can always fill the budget exactly.
    instance = _sequence(np.random.default_rng(num_tokens), num_tokens, max_pieces=1)
    masked, _ = _mask(instance.tokens, np.random.default_rng(0), max_predictions=max_predictions,
                      masked_lm_prob=prob)
    assert len(masked.masked_lm_positions) == expected


def test_ngram_length_distribution_in_whole_words():
    # SPEC 1.4.4-1.4.5: the first n-gram chosen is never shortened by the budget (3 words of at
    # most 3 pieces < 20), so its n follows 6/11, 3/11, 2/11 (up to the few cut at the last word).
    rng = np.random.default_rng(0)
    instance = _sequence(rng, 512)
    starts, ends = masking.whole_words(instance.tokens,
                                       masking.token_boundary(instance.tokens, WORD_START, SPECIAL),
                                       SPECIAL)
    for favor_shorter, expected in ((True, [6 / 11, 3 / 11, 2 / 11]),
                                    (False, [2 / 11, 3 / 11, 6 / 11])):
        first_n = [masking.choose_ngrams(starts, ends, rng, budget=20,
                                         favor_shorter_ngram=favor_shorter)[0][1]
                   for _ in range(20000)]
        counts = np.bincount(first_n, minlength=4)[1:] / len(first_n)
        np.testing.assert_allclose(counts, expected, atol=0.015)


def test_favoring_longer_ngrams_masks_longer_runs():
    rng = np.random.default_rng(1)

    def mean_run_length(favor_shorter):
        runs = []
        for _ in range(300):
            tokens = _sequence(rng, 512, max_pieces=1).tokens
            positions = _mask(tokens, rng, favor_shorter_ngram=favor_shorter)[0].masked_lm_positions
            runs.append(len(positions) / (1 + np.count_nonzero(np.diff(positions) > 1)))
        return np.mean(runs)

    # Expected n-gram length 1.64 vs 2.36 words (adjacent n-grams merge into longer runs).
    assert mean_run_length(True) < 1.9 < 2.2 < mean_run_length(False)


def test_replacement_is_80_10_10():
    rng = np.random.default_rng(2)
    outcomes = np.zeros(3)
    for _ in range(2000):
        tokens = _sequence(rng, 128).tokens
        masked, _ = _mask(tokens, rng)
        replaced = masked.input_ids[masked.masked_lm_positions]
        is_mask = replaced == MASK
        is_kept = ~is_mask & (replaced == masked.masked_lm_ids)
        outcomes += [is_mask.sum(), is_kept.sum(), (~is_mask & ~is_kept).sum()]
    fractions = outcomes / outcomes.sum()
    assert outcomes.sum() > 30000
    # SPEC 1.4.7; a random id equals the original with probability 1/VOCAB only.
    np.testing.assert_allclose(fractions, [0.8, 0.1, 0.1], atol=0.01)


def test_random_replacement_draws_from_the_whole_vocabulary():
    # SPEC 1.2.3: any id, special pieces included.
    rng = np.random.default_rng(3)
    replacements = []
    for _ in range(3000):
        tokens = _sequence(rng, 64).tokens
        boundary = masking.token_boundary(tokens, WORD_START, SPECIAL)
        masked = masking.mask_sequence(tokens, boundary, rng, max_predictions=20, vocab_size=8,
                                       mask_id=MASK, special_ids=SPECIAL)
        changed = masked.input_ids != tokens
        replacements += masked.input_ids[changed & (masked.input_ids != MASK)].tolist()
    assert set(replacements) == {0, 1, 2, 3, 5, 6, 7}  # All but [MASK]: that one reads as masked.


def test_masks_whole_words_and_never_specials():
    rng = np.random.default_rng(4)
    for _ in range(500):
        instance = _sequence(rng, int(rng.integers(8, 200)))
        tokens = np.concatenate([instance.tokens, [PAD] * 5]).astype(np.int32)  # Some padding.
        masked, boundary = _mask(tokens, rng, masked_lm_prob=0.3)
        positions = masked.masked_lm_positions
        assert positions.dtype == np.int32 and masked.masked_lm_ids.dtype == np.int32
        assert (np.diff(positions) > 0).all()  # Sorted, no position twice.
        assert not np.isin(tokens[positions], SPECIAL).any()
        assert masked.masked_lm_ids.tolist() == tokens[positions].tolist()
        assert (masked.input_ids[~np.isin(np.arange(len(tokens)), positions)] ==
                tokens[~np.isin(np.arange(len(tokens)), positions)]).all()
        is_masked = np.zeros(len(tokens), bool)
        is_masked[positions] = True
        for position in range(1, len(tokens)):
            if boundary[position] == 0 and tokens[position - 1] not in SPECIAL:
                # A continuation piece shares the fate of the piece before it (its word).
                assert is_masked[position] == is_masked[position - 1]


def test_word_does_not_continue_across_sep():
    # B starting with a continuation piece (front truncation) is its own word (our fix).
    tokens = np.array([CLS, 7, 1500, SEP, 1501, 1502, SEP], np.int32)
    starts, ends = masking.whole_words(tokens, masking.token_boundary(tokens, WORD_START, SPECIAL),
                                       SPECIAL)
    assert list(zip(starts.tolist(), ends.tolist())) == [(1, 3), (4, 6)]


def test_deterministic_given_the_generator():
    tokens = _sequence(np.random.default_rng(5), 256).tokens
    first, _ = _mask(tokens, np.random.default_rng(9))
    second, _ = _mask(tokens, np.random.default_rng(9))
    other, _ = _mask(tokens, np.random.default_rng(10))
    for x, y in zip(first, second):
        assert x.tolist() == y.tolist()
    assert first.masked_lm_positions.tolist() != other.masked_lm_positions.tolist()


def test_to_features_and_unmask_round_trip():
    rng = np.random.default_rng(6)
    for _ in range(50):
        instance = _sequence(rng, int(rng.integers(5, 129)))
        masked, boundary = _mask(instance.tokens, rng)
        features = masking.to_features(instance, masked, boundary, seq_len=128, max_predictions=20)
        n, k = len(instance.tokens), len(masked.masked_lm_positions)
        assert {name: (value.shape, value.dtype.name) for name, value in features.items()} == {
            **{name: ((128,), "int32") for name in
               ("input_ids", "input_mask", "segment_ids", "token_boundary")},
            **{name: ((20,), "int32") for name in ("masked_lm_positions", "masked_lm_ids")},
            "masked_lm_weights": ((20,), "float32"), "next_sentence_labels": ((1,), "int32")}
        assert features["input_mask"].tolist() == [1] * n + [0] * (128 - n)
        assert (features["input_ids"][n:] == 0).all() and (features["segment_ids"][n:] == 0).all()
        assert features["token_boundary"].tolist() == boundary.tolist() + [0] * (128 - n)
        assert features["masked_lm_weights"].tolist() == [1.0] * k + [0.0] * (20 - k)
        assert (features["masked_lm_positions"][k:] == 0).all()
        assert features["next_sentence_labels"].tolist() == [instance.next_sentence_label]
        assert masking.unmask_features(features).tolist() == instance.tokens.tolist()


def test_to_features_rejects_oversized_examples():
    instance = _sequence(np.random.default_rng(7), 64)
    masked, boundary = _mask(instance.tokens, np.random.default_rng(0))
    with pytest.raises(ValueError, match="64 tokens, more than seq_len=32"):
        masking.to_features(instance, masked, boundary, seq_len=32, max_predictions=20)
    with pytest.raises(ValueError, match="more than max_predictions=5"):
        masking.to_features(instance, masked, boundary, seq_len=64, max_predictions=5)


def test_dynamic_remasking_is_static_masking_of_the_stored_tokens():
    # One path for both (SPEC 1.4): re-masking stored features with the generator that built
    # them gives them back; with another generator, new masks over the same example.
    settings = masking.MaskingSettings(
        seq_len=128, max_predictions=20, masked_lm_prob=0.15, max_ngram=3,
        favor_shorter_ngram=True, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIAL)
    rng = np.random.default_rng(8)
    for _ in range(20):
        instance = _sequence(rng, int(rng.integers(5, 129)))
        boundary = masking.token_boundary(instance.tokens, WORD_START, SPECIAL)
        stored = masking.mask_instance(instance, boundary, np.random.default_rng(1), settings)
        again = masking.remask_features(stored, np.random.default_rng(1), settings)
        assert {name: value.tolist() for name, value in again.items()} == \
            {name: value.tolist() for name, value in stored.items()}
        other = masking.remask_features(stored, np.random.default_rng(2), settings)
        for name in ("segment_ids", "token_boundary", "input_mask", "next_sentence_labels"):
            assert other[name].tolist() == stored[name].tolist()
        assert masking.unmask_features(other).tolist() == instance.tokens.tolist()


def test_masking_settings_from_build_metadata():
    metadata = {"vocab_size": 200, "pad_id": 0, "cls_id": 2, "sep_id": 3, "mask_id": 4,
                "unk_id": 1, "settings": {"seq_len": 64, "max_predictions": 20,
                                          "masked_lm_prob": 0.15, "max_ngram": 3,
                                          "favor_shorter_ngram": False, "dupe_factor": 2}}
    assert masking.MaskingSettings.from_metadata(metadata) == masking.MaskingSettings(
        seq_len=64, max_predictions=20, masked_lm_prob=0.15, max_ngram=3,
        favor_shorter_ngram=False, vocab_size=200, mask_id=4, special_ids=(2, 3, 0))
