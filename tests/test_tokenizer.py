"""SentencePiece training/loading and ALBERT preprocessing (SPEC 2, SPEC 1.4.2)."""
import itertools
import os
import pickle
import random

import ml_collections
import numpy as np
import pytest
import sentencepiece as spm
from etils import epath

from albert_jax.data import corpus
from albert_jax.data.tokenizers import (
    SentencePieceTokenizer,
    TextSettings,
    Tokenizer,
    is_start_piece,
    preprocess_text,
    train,
    train_from_config,
)

WORDS = ("the cat sat on mat and dog ran to park with big red ball while bird sang in tree "
         "over house near river under bright sun every morning people walk slowly through "
         "green fields singing happy songs").split()


# Rarer made-up words give SentencePiece enough distinct substrings for a few hundred pieces.
RARE_WORDS = ["".join(syllables) for syllables in itertools.product(
    ["ka", "lo", "mi", "ne", "su", "vor", "tal", "qui"], ["ba", "den", "ri", "zo", "lum"],
    ["", "x", "ng", "mp"], ["", "er", "ish", "ous", "y"])]


def _sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    sentences = []
    for index in range(count):
        words = [rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(RARE_WORDS)
                 for _ in range(rng.randint(4, 12))]
        sentence = " ".join(words).capitalize() + "."
        if index % 5 == 0:  # Numbers with thousands separators for the SPEC 2.3 rule.
            sentence += f" It cost {rng.choice(['1,000', '3,500', '2,000'])}, said (9,{index % 3}."
        sentences.append(sentence)
    return sentences


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return train(_sentences(3000), str(tmp_path_factory.mktemp("spm") / "tiny.model"), 250)


@pytest.fixture(scope="module")
def tokenizer(model_path) -> Tokenizer:
    return Tokenizer.load(model_path)


def test_preprocess_text():
    # SPEC 2.2: whitespace folded, accents stripped via NFKD, lower-cased.
    assert preprocess_text("  Hello \t\n  World  ") == "hello world"
    assert preprocess_text("Café Naïve ÀÉÎÕÜ") == "cafe naive aeiou"
    assert preprocess_text("Café", lower=False) == "Cafe"
    assert preprocess_text("ﬁne") == "fine"  # NFKD also decomposes compatibility ligatures.
    assert preprocess_text("``quoted''") == "``quoted''"  # Unlike HF, the reference keeps these.
    assert preprocess_text(" \n ") == ""


def test_special_ids_and_vocab_files(model_path, tokenizer):
    # SPEC 2.1: <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4, then the user-defined symbols.
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert tokenizer.vocab_size == 250
    assert tokenizer.id_to_piece(range(5, 13)) == ["(", ")", '"', "-", ".", "–", "£", "€"]
    vocab_lines = open(os.path.splitext(model_path)[0] + ".vocab", encoding="utf-8").readlines()
    assert len(vocab_lines) == 250
    assert vocab_lines[2] == "[CLS]\t0\n"
    assert not [name for name in os.listdir(os.path.dirname(model_path)) if ".tmp" in name]


def test_encode_known_sentence(tokenizer):
    # Without digit-commas encode is SentencePiece on the preprocessed text (SPEC 2.2-2.3).
    sp = spm.SentencePieceProcessor(model_proto=tokenizer._model_proto)
    text = "  The CAT sat on Café  Kabamp\tmat.  "
    ids = tokenizer.encode(text)
    assert ids.dtype == np.int32
    assert ids.tolist() == sp.encode("the cat sat on cafe kabamp mat.")
    pieces = tokenizer.id_to_piece(ids)
    assert "".join(pieces) == "▁the▁cat▁sat▁on▁cafe▁kabamp▁mat."
    assert pieces[-1] == "."  # A user-defined symbol is always its own piece (SPEC 2.1).
    assert tokenizer.decode(ids) == "the cat sat on cafe kabamp mat."
    assert tokenizer.encode("").shape == (0,)
    cased = SentencePieceTokenizer(tokenizer._model_proto, settings=TextSettings(do_lower_case=False))
    assert cased.encode("The").tolist() == sp.encode("The")


def test_digit_comma_rule(tokenizer):
    # SPEC 2.3: a piece ending in digit + "," is re-encoded and the comma becomes its own piece.
    sp = spm.SentencePieceProcessor(model_proto=tokenizer._model_proto)
    text = "it cost 3,500, said (9,7, ok"
    raw = sp.encode(preprocess_text(text), out_type=str)
    assert any(piece[-1] == "," and piece[-2].isdigit() for piece in raw if len(piece) > 1), raw
    hf_rule = SentencePieceTokenizer(tokenizer._model_proto, settings=TextSettings(comma_rule="hf"))
    for rule_tokenizer in (tokenizer, hf_rule):
        pieces = rule_tokenizer.pieces(text)
        # No character is lost or added ("▁" aside: the reference rule adds some, SPEC 2.3).
        assert "".join(pieces).replace("▁", "") == preprocess_text(text).replace(" ", "")
        assert pieces.count(",") == 4
        assert rule_tokenizer.encode(text).tolist() == [sp.piece_to_id(piece) for piece in pieces]
    # After "(" the re-encoded "9" keeps SentencePiece's "▁" under the reference's Python 3
    # behaviour (the default) and loses it under HuggingFace's.
    pieces, hf_pieces = tokenizer.pieces(text), hf_rule.pieces(text)
    assert tokenizer.settings.comma_rule == "reference"
    assert pieces[pieces.index("(") + 1].startswith("▁")
    assert not hf_pieces[hf_pieces.index("(") + 1].startswith("▁")


def test_digit_comma_rule_matches_huggingface(model_path, tokenizer):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertTokenizer(model_path, do_lower_case=True, keep_accents=False)
    hf_rule = Tokenizer.load(model_path, TextSettings(comma_rule="hf"))
    for text in ["It cost 1,234, said (9,5, ok", "x3.0, a1,b 12, (7,", "Naïve  3,000, café 2,"]:
        assert hf_rule.pieces(text) == hf.tokenize(text), text
        assert hf_rule.encode(text).tolist() == hf.convert_tokens_to_ids(hf.tokenize(text))


@pytest.mark.parametrize("piece, expected", [
    ("▁the", True), ("ing", False), ("12", True), (",", True), ("<unk>", True), ("<pad>", True),
    ("'s", True),  # The reference's punctuation set lacks "'" (SPEC 1.4.2).
    ("a.b", False), ("é", True), ("€", True), ("[CLS]", False), ("x2", True), ("", False)])
def test_is_start_piece(piece, expected):
    assert is_start_piece(piece) == expected


def test_word_start_table(tokenizer):
    pieces = tokenizer.id_to_piece(range(tokenizer.vocab_size))
    assert tokenizer.word_start.shape == (tokenizer.vocab_size,)
    assert tokenizer.word_start.tolist() == [is_start_piece(piece) for piece in pieces]
    the = tokenizer.encode("the")[0]
    assert tokenizer.word_start[the] and tokenizer.word_start[tokenizer.unk_id]
    continuation = [i for i, piece in enumerate(pieces) if piece.isalpha() and piece.islower()]
    assert continuation and not tokenizer.word_start[continuation].any()


def test_pickle_round_trip(tokenizer):
    text = "the cat, 1,000, (9,7"
    for comma_rule in ("reference", "hf"):
        original = SentencePieceTokenizer(tokenizer._model_proto, settings=TextSettings(comma_rule=comma_rule))
        restored = pickle.loads(pickle.dumps(original))
        assert restored.settings.comma_rule == comma_rule
        assert restored.encode(text).tolist() == original.encode(text).tolist()
        assert (restored.word_start == tokenizer.word_start).all()


def test_training_is_deterministic(tmp_path):
    first = train(_sentences(800), str(tmp_path / "a.model"), 200, seed=3)
    second = train(_sentences(800), str(tmp_path / "b.model"), 200, seed=3)
    assert open(first, "rb").read() == open(second, "rb").read()


def test_vocab_too_large_says_what_to_use(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=50000 is too large.*at most \d+"):
        train(_sentences(50), str(tmp_path / "big.model"), 50000)
    assert not os.path.exists(tmp_path / "big.model")


def test_missing_and_corrupt_model(tmp_path):
    missing = str(tmp_path / "nope.model")
    with pytest.raises(FileNotFoundError, match="nope.model.*albert-jax tokenizer train"):
        Tokenizer.load(missing)
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(b"\x00 definitely not a protobuf \xff" * 10)
    with pytest.raises(ValueError, match="corrupt.model.*albert-jax tokenizer train"):
        Tokenizer.load(str(corrupt))


def test_model_without_albert_symbols_is_rejected(tmp_path):
    prefix = str(tmp_path / "plain")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_sentences(300)), model_prefix=prefix,
                                   vocab_size=100, minloglevel=2)
    with pytest.raises(ValueError, match=r"plain.model has no '<pad>'"):
        Tokenizer.load(prefix + ".model")


def test_model_with_other_special_ids_is_rejected(tmp_path):
    # SPEC 2.1: every ALBERT symbol present, but <unk> 0 and <pad> 1 (SentencePiece's own order).
    prefix = str(tmp_path / "swapped")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_sentences(300)), model_prefix=prefix, vocab_size=100,
        unk_id=0, pad_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2)
    with pytest.raises(ValueError, match=r"swapped.model has <pad> 1, <unk> 0, \[CLS\] 2.*"
                                         r"needs <pad> 0, <unk> 1"):
        Tokenizer.load(prefix + ".model")


def test_train_from_config(tmp_path, capsys):
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n\n".join("\n".join(_sentences(8, seed)) for seed in range(60)))
    config = ml_collections.ConfigDict({"seed": 0, "data": {
        "corpus": str(corpus_file), "vocab_size": 200, "do_lower_case": True,
        "tokenizer": str(tmp_path / "new" / "dir" / "spm.model")}})
    train_from_config(config)
    printed = capsys.readouterr().out
    assert "480 sentences" in printed and "spm.model" in printed and "60 documents" in printed
    assert Tokenizer.load(config.data.tokenizer).vocab_size == 200
    before = os.path.getmtime(config.data.tokenizer)
    train_from_config(config)  # A second run keeps the file and says so.
    assert "exists" in capsys.readouterr().out
    assert os.path.getmtime(config.data.tokenizer) == before


def test_train_from_config_reads_only_its_sample(tmp_path, capsys):
    """A corpus of 8 files of 120 sentences and a sample of 300: reading stops inside the third
    file visited (in an order drawn from the seed); the same seed trains the same model."""
    for index in range(8):
        (tmp_path / f"part{index}.txt").write_text(
            "\n\n".join("\n".join(_sentences(8, 10 * index + seed)) for seed in range(15)))
    sources = corpus.list_sources(str(tmp_path / "*.txt"))
    stats = corpus.CorpusStats()
    sample = list(corpus.sample_sentences(sources, 300, seed=3, stats=stats))
    # 300 / 8 = 37.5: 38 documents read, 15 + 15 + 8 of the third file; its last 7 never read.
    assert len(sample) == 300 and stats.sources == 3 and stats.documents == 38
    visited = [index for index in range(8) if _sentences(8, 10 * index)[0] in sample]
    assert len(visited) == 3 and visited != [0, 1, 2]  # not simply the first files
    assert sample == list(corpus.sample_sentences(sources, 300, seed=3))
    assert sample != list(corpus.sample_sentences(sources, 300, seed=4))
    models = []
    for name in ("a", "b"):
        config = ml_collections.ConfigDict({"seed": 3, "data": {
            "corpus": str(tmp_path / "*.txt"), "vocab_size": 150, "do_lower_case": True,
            "input_sentence_size": 300, "tokenizer": str(tmp_path / name / "spm.model")}})
        train_from_config(config)
        printed = capsys.readouterr().out
        assert "300 sentences" in printed and "3 of 8 sources" in printed, printed
        assert "reading stopped at data.input_sentence_size=300" in printed
        models.append((tmp_path / name / "spm.model").read_bytes())
    assert models[0] == models[1]


def test_train_from_a_bucket_corpus_into_a_bucket(tmp_path, bucket, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a path string taken for a local one would land
    text = "\n\n".join("\n".join(_sentences(8, seed)) for seed in range(60))
    (tmp_path / "corpus.txt").write_text(text)
    (epath.Path(bucket) / "corpus" / "corpus.txt").write_text(text)
    configs = [ml_collections.ConfigDict({"seed": 0, "data": {
        "corpus": corpus_spec, "vocab_size": 200, "do_lower_case": True,
        "tokenizer": f"{folder}/tok/spm.model"}})
        for corpus_spec, folder in ((str(tmp_path / "corpus.txt"), str(tmp_path / "local")),
                                    (f"{bucket}/corpus/*.txt", bucket))]
    for config in configs:
        train_from_config(config)
    assert "480 sentences" in capsys.readouterr().out
    local, in_bucket = (epath.Path(config.data.tokenizer) for config in configs)
    assert in_bucket.read_bytes() == local.read_bytes()
    assert (in_bucket.parent / "spm.vocab").read_bytes() == (local.parent / "spm.vocab").read_bytes()
    assert sorted(path.name for path in in_bucket.parent.iterdir()) == ["spm.model", "spm.vocab"]
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "local"]  # no ./gs:/ folder
    sentence = _sentences(1, seed=99)[0]
    assert (Tokenizer.load(os.fspath(in_bucket)).encode(sentence).tolist()
            == Tokenizer.load(os.fspath(local)).encode(sentence).tolist())
    train_from_config(configs[1])  # the model in the bucket is found: not trained again
    assert "exists; skipping training" in capsys.readouterr().out


def test_tokenizer_trained_on_demo_corpus(tmp_path):
    documents = itertools.islice(corpus.demo_documents(), 1500)
    path = train((sentence for document in documents for sentence in document),
                 str(tmp_path / "demo.model"), 1000)
    tokenizer = Tokenizer.load(path)
    text = "Return the value of the named attribute of an object."
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == preprocess_text(text)
    assert tokenizer.unk_id not in ids.tolist()
    assert len(ids) <= 16  # Common English words are (mostly) whole pieces.
