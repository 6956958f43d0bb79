"""Sentence-pair instances (SPEC 1.3)."""
import numpy as np
import pytest

from albert_jax.data.building.instances import create_instances, truncate_seq_pair

CLS, SEP = 2, 3


def _document(doc: int, lengths: list[int]) -> list[np.ndarray]:
    """Token = 10 + doc * 10**5 + sentence * 100 + offset: every token says where it came from."""
    return [np.array([10 + doc * 10**5 + sentence * 100 + offset for offset in range(length)],
                     np.int32) for sentence, length in enumerate(lengths)]


def _origin(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(doc, position-in-document order key) of encoded tokens."""
    tokens = np.asarray(tokens, np.int64) - 10
    return tokens // 10**5, tokens % 10**5


def _segments(instance) -> tuple[np.ndarray, np.ndarray]:
    first_sep = int(np.flatnonzero(instance.tokens == SEP)[0])
    return instance.tokens[1:first_sep], instance.tokens[first_sep + 1:-1]


def _create(documents, seed=0, **kwargs):
    kwargs.setdefault("max_seq_length", 64)
    return create_instances(documents, np.random.default_rng(seed), cls_id=CLS, sep_id=SEP,
                            **kwargs)


def _corpus(num_docs=300, seed=1):
    rng = np.random.default_rng(seed)
    return [_document(d, rng.integers(3, 25, size=rng.integers(2, 12)).tolist())
            for d in range(num_docs)]


def test_structure_and_segment_ids():
    instances = _create(_corpus(), max_seq_length=64)
    assert len(instances) > 500
    for instance in instances:
        tokens, segments = instance.tokens, instance.segment_ids
        assert tokens.dtype == np.int32 and segments.dtype == np.int32
        assert len(tokens) == len(segments) <= 64
        assert tokens[0] == CLS and tokens[-1] == SEP
        seps = np.flatnonzero(tokens == SEP)
        assert len(seps) == 2 and not (tokens == CLS)[1:].any()
        a, b = _segments(instance)
        assert len(a) >= 1 and len(b) >= 1  # SPEC 1.3.7
        # SPEC 1.3.8: 0 for [CLS], A, first [SEP]; 1 for B and the final [SEP].
        assert segments.tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        assert instance.next_sentence_label in (0, 1)


def test_sop_labels_balanced_and_label_one_is_swapped():
    instances = _create(_corpus(1500), max_seq_length=64, sentence_objective="sop")
    labels = np.array([instance.next_sentence_label for instance in instances])
    assert len(labels) > 2500
    assert abs(labels.mean() - 0.5) < 0.04
    for instance in instances:
        a, b = _segments(instance)
        (doc_a, order_a), (doc_b, order_b) = _origin(a), _origin(b)
        assert len(set(doc_a) | set(doc_b)) == 1  # SOP: both segments from one document.
        assert (np.diff(order_a) > 0).all() and (np.diff(order_b) > 0).all()
        if instance.next_sentence_label == 0:  # In order: all of A precedes all of B.
            assert order_a.max() < order_b.min()
        else:  # Swapped (SPEC 1.3.5b): B precedes A.
            assert order_b.max() < order_a.min()


def test_a_and_b_split_at_sentence_boundaries():
    # Whole documents fit (no truncation) and hold 2+ sentences: every chunk has 2+ segments.
    instances = _create(_corpus(200), max_seq_length=512, short_seq_prob=0.0)
    for instance in instances:
        a, b = _segments(instance)
        first, second = (a, b) if instance.next_sentence_label == 0 else (b, a)
        # The first part ends a sentence, the second starts one (offset 0).
        assert _origin(second)[1][0] % 100 == 0
        sentence_ends = _origin(first)[1][-1]
        assert _origin(second)[1][0] == (sentence_ends // 100 + 1) * 100


def test_target_length_short_ten_percent_once_per_document():
    # Sentences of 5 tokens, documents far longer than one sequence: a full-length target fills
    # every instance but the last to exactly max_seq_length (SPEC 1.3.2-1.3.3, 1.3.6).
    documents = [_document(d, [5] * 60) for d in range(3000)]
    instances = _create(documents, max_seq_length=64, short_seq_prob=0.1)
    by_document: dict[int, list[int]] = {}
    for instance in instances:
        by_document.setdefault(int(_origin(instance.tokens[1:2])[0][0]), []).append(
            len(instance.tokens))
    short = 0
    for lengths in by_document.values():
        full = lengths.count(64)
        if full < len(lengths) - 1:  # A short target: its chunks all have one length.
            short += 1
            assert len(set(sorted(lengths)[1:])) == 1 or len(set(sorted(lengths)[:-1])) == 1
        else:
            assert full >= len(lengths) - 1
    # P(short) = 0.1, and a short target t in [2, 61] gives shorter chunks unless t = 61.
    assert abs(short / len(by_document) - 0.1 * 59 / 60) < 0.02


def test_single_segment_chunk_default_splits_inside_the_sentence():
    # One sentence per document: every chunk has one segment (SPEC 1.3.5a).
    documents = [_document(d, [30]) for d in range(400)]
    instances = _create(documents, max_seq_length=64)
    assert len(instances) == 400
    labels = np.array([instance.next_sentence_label for instance in instances])
    assert abs(labels.mean() - 0.5) < 0.08
    for instance in instances:
        a, b = _segments(instance)
        assert len(a) + len(b) == 30
        (doc_a, order_a), (doc_b, order_b) = _origin(a), _origin(b)
        assert set(doc_a) == set(doc_b)  # Our fix: B never comes from another document.
        first, second = ((order_a, order_b) if instance.next_sentence_label == 0
                         else (order_b, order_a))
        assert first.max() + 1 == second.min()


def test_single_segment_chunk_reference_compat_takes_random_document():
    documents = [_document(d, [30]) for d in range(400)]
    instances = _create(documents, max_seq_length=64, reference_compat=True)
    assert len(instances) == 400
    for instance in instances:
        assert instance.next_sentence_label == 1  # QUIRK: labelled "swapped" in SOP mode.
        a, b = _segments(instance)
        assert len(a) == 30
        assert _origin(a)[0][0] != _origin(b)[0][0]


def test_single_token_document_gives_no_instance_by_default():
    documents = [_document(0, [1]), _document(1, [8, 8])]
    instances = _create(documents, short_seq_prob=0.0)
    assert len(instances) == 1 and _origin(instances[0].tokens[1:-1])[0][0] == 1
    assert len(_create(documents, short_seq_prob=0.0, reference_compat=True)) == 2


def test_nsp_takes_b_from_another_document():
    instances = _create(_corpus(400), max_seq_length=64, sentence_objective="nsp")
    labels = np.array([instance.next_sentence_label for instance in instances])
    # Half of the multi-segment chunks, and every single-segment one (as in BERT), are random.
    assert 0.5 < labels.mean() < 0.65
    for instance in instances:
        a, b = _segments(instance)
        (doc_a, order_a), (doc_b, order_b) = _origin(a), _origin(b)
        if instance.next_sentence_label == 1:
            assert doc_a[0] != doc_b[0]
        else:
            assert doc_a[0] == doc_b[0] and order_a.max() < order_b.min()


def test_nsp_puts_unused_segments_back():
    # With B from another document, A's chunk leftovers start the next chunk (SPEC 1.3.5a):
    # every sentence of a document still appears in some A or in-order B.
    documents = [_document(d, [4] * 8) for d in range(50)]
    instances = _create(documents, max_seq_length=512, short_seq_prob=0.0,  # no truncation
                        sentence_objective="nsp")
    seen = set()
    for instance in instances:
        a, b = _segments(instance)
        seen.update(zip(*(x.tolist() for x in _origin(a))))
        if instance.next_sentence_label == 0:
            seen.update(zip(*(x.tolist() for x in _origin(b))))
    sentence_starts = {(doc, order) for doc, order in seen if order % 100 == 0}
    assert len(sentence_starts) == 50 * 8


def test_none_objective_is_never_swapped():
    instances = _create(_corpus(200), sentence_objective="none")
    assert {instance.next_sentence_label for instance in instances} == {0}
    for instance in instances:
        a, b = _segments(instance)
        assert _origin(a)[1].max() < _origin(b)[1].min()


def test_deterministic_and_shuffled():
    documents = _corpus(100)
    first, second = _create(documents, seed=7), _create(documents, seed=7)
    assert len(first) == len(second)
    for x, y in zip(first, second):
        assert x.tokens.tolist() == y.tokens.tolist()
        assert x.next_sentence_label == y.next_sentence_label
    other = _create(documents, seed=8)
    assert [x.tokens.tolist() for x in first] != [x.tokens.tolist() for x in other]
    # SPEC 1.3.10: the output is shuffled, not in document order.
    first_docs = [int(_origin(x.tokens[1:2])[0][0]) for x in first]
    assert first_docs != sorted(first_docs)


def _reference_truncate(length_a, length_b, max_num_tokens, rng):
    """SPEC 1.3.6 as released: one token at a time from the longer side (B on ties)."""
    a, b = list(range(length_a)), list(range(1000, 1000 + length_b))
    while len(a) + len(b) > max_num_tokens:
        trunc = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
    return a, b


def test_truncate_seq_pair_matches_reference_lengths_and_is_contiguous():
    rng = np.random.default_rng(0)
    front_removed = removed = 0
    for _ in range(500):
        length_a, length_b = rng.integers(1, 300, size=2)
        limit = int(rng.integers(2, 200))
        a, b = truncate_seq_pair(np.arange(length_a), np.arange(1000, 1000 + length_b), limit, rng)
        ref_a, ref_b = _reference_truncate(int(length_a), int(length_b), limit, rng)
        assert (len(a), len(b)) == (len(ref_a), len(ref_b))
        for kept, full in ((a, np.arange(length_a)), (b, np.arange(1000, 1000 + length_b))):
            assert len(kept) >= 1
            assert (np.diff(kept) == 1).all()  # A contiguous slice of the original.
            front_removed += int(kept[0] - full[0])
            removed += len(full) - len(kept)
    assert abs(front_removed / removed - 0.5) < 0.02  # Front or back with probability 1/2.


def test_empty_inputs_and_bad_arguments():
    assert _create([]) == []
    assert _create([[], [np.array([], np.int32)]]) == []
    with pytest.raises(ValueError, match="sentence_objective='mlm'"):
        _create(_corpus(2), sentence_objective="mlm")
    with pytest.raises(ValueError, match="max_seq_length=4"):
        _create(_corpus(2), max_seq_length=4)
