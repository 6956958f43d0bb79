"""Text in every script: keep_accents (SPEC 2.2's accent step skipped), word_boundaries
"spaces" (whole words where the text has spaces), SentencePiece's character_coverage and
byte_fallback, and the warnings that say when the reference settings damage a text; on real
sentences in eight languages (tests/multilingual_text.py)."""
import dataclasses
import unicodedata

import numpy as np
import pytest

from albert_jax.data.tokenizers import (
    TextSettings,
    Tokenizer,
    WordPieceTokenizer,
    is_start_piece,
    preprocess_text,
    text_damage,
    train,
    train_wordpiece,
    training,
)
from albert_jax.data.tokenizers.preprocessing import preprocess_with_origins
from tests.multilingual_text import LANGUAGES, MARKS, sentences, write_corpus

MULTILINGUAL = TextSettings(do_lower_case=False, keep_accents=True, word_boundaries="spaces")
SIX_SCRIPTS = ("hi", "th", "ja", "ru", "ko", "vi")


@pytest.fixture(scope="module")
def default_model(tmp_path_factory) -> str:
    """A SentencePiece model trained at the defaults (SPEC 2.1, 2.2) on all eight languages."""
    return train(sentences(), str(tmp_path_factory.mktemp("default") / "spm.model"), 500)


@pytest.fixture(scope="module")
def multilingual_model(tmp_path_factory) -> str:
    """Cased, accents kept, byte_fallback, coverage 0.99 (some rare characters become bytes)."""
    return train(sentences(), str(tmp_path_factory.mktemp("multilingual") / "spm.model"), 900,
                 settings=MULTILINGUAL, character_coverage=0.99, byte_fallback=True)


@pytest.mark.parametrize("text, reference, kept", [
    ("क्या  हिन्दी", "कया हिनदी", "क्या हिन्दी"),              # virama
    ("फ़ाइल", "फाइल", "फ़ाइल"),                               # nukta
    ("ที่นี่มีน้ำ", "ทีนีมีน\u0e4dา", "ที่นี่มีน้ำ"),          # tone marks (and NFKD of "ำ")
    ("パンダが", "ハンタか", "パンダが"),                      # dakuten
    ("Йогурт Ёлка", "иогурт елка", "йогурт ёлка"),           # breve, diaeresis
    ("Việt Nam", "viet nam", "việt nam"),                    # Vietnamese tones
    ("ﬁne", "fine", "ﬁne"),                                  # NFKD, not only the marks
    ("한국", "\u1112\u1161\u11ab\u1100\u116e\u11a8", "한국"),  # NFKD jamo: no mark to drop
])
def test_preprocess_keeps_accents_as_told(text, reference, kept):
    assert preprocess_text(text) == reference
    assert preprocess_text(text, keep_accents=True) == kept
    assert preprocess_text("Việt", lower=False, keep_accents=True) == "Việt"


@pytest.mark.parametrize("keep_accents", [False, True])
def test_origins_are_exact_with_and_without_accents(keep_accents):
    for text in ["  Việt   Nam ", "क्या  हिन्दी\tहै", "パンダが Йогурт"] + sentences(*SIX_SCRIPTS):
        preprocessed, origins = preprocess_with_origins(text, True, keep_accents)
        assert preprocessed == preprocess_text(text, True, keep_accents)
        for char, origin in zip(preprocessed, origins):
            source = preprocess_text(text[origin], True, keep_accents)
            assert char in (source or " "), (text, char, text[origin])
    assert preprocess_with_origins("  Việt   Nam ", True, True)[1].tolist() == [
        2, 3, 4, 5, 6, 9, 10, 11]


@pytest.mark.parametrize("piece, reference, spaces", [
    ("▁क", True, True), ("्या", True, False), ("ा", True, False),         # Devanagari
    ("▁росси", True, True), ("я", True, False), ("ки", True, False),     # Cyrillic
    ("▁대한", True, True), ("은", True, False),                          # Hangul
    ("ệt", True, False), ("ing", False, False), ("000", True, False),    # Latin, digits
    ("ที่", True, True), ("น", True, True),                               # Thai
    ("ン", True, True), ("ー", True, True), ("です", True, True),         # Katakana, Hiragana
    ("東京", True, True), ("ກ", True, True), ("ក", True, True),          # Han, Lao, Khmer
    ("မ", True, True),                                                    # Myanmar
    ("।", True, True), (",", True, True), ("—", True, True), ("'s", True, True),  # punctuation
    ("", False, False)])
def test_is_start_piece_per_script(piece, reference, spaces):
    assert is_start_piece(piece) == reference
    assert is_start_piece(piece, "reference") == reference
    assert is_start_piece(piece, "spaces") == spaces


def test_word_start_follows_the_settings(multilingual_model):
    tokenizer = Tokenizer.load(multilingual_model, MULTILINGUAL)
    reference = Tokenizer.load(multilingual_model, TextSettings(keep_accents=True))
    pieces = tokenizer.id_to_piece(range(tokenizer.vocab_size))
    assert reference.word_start.tolist() == [is_start_piece(piece) for piece in pieces]
    byte_ids = [i for i, piece in enumerate(pieces) if piece.startswith("<0x")]
    assert len(byte_ids) == 256
    # Bytes spell a character inside its word: starts to SPEC 1.4.2 ("<"), not to "spaces".
    assert reference.word_start[byte_ids].all() and not tokenizer.word_start[byte_ids].any()
    assert tokenizer.word_start[:5].all()  # <pad> <unk> [CLS] [SEP] [MASK]
    expected = [piece_id < 5 or (piece_id not in byte_ids and is_start_piece(piece, "spaces"))
                for piece_id, piece in enumerate(pieces)]
    assert tokenizer.word_start.tolist() == expected


def test_byte_fallback_loses_no_text(multilingual_model, default_model):
    tokenizer = Tokenizer.load(multilingual_model, MULTILINGUAL)
    assert tokenizer.id_to_piece(range(5)) == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    rare = "𠀋 Ꙋ ᚠ Ѣ 1,5,"  # characters no sentence of the corpus has
    ids = tokenizer.encode(rare)
    assert tokenizer.unk_id not in ids.tolist()
    assert tokenizer.decode(ids) == rare
    assert tokenizer.unk_id in Tokenizer.load(default_model).encode(rare).tolist()
    ids, starts, ends = tokenizer.encode_with_offsets(rare)
    assert ids.tolist() == tokenizer.encode(rare).tolist()
    # The four bytes of "𠀋" (one code point, not in the vocabulary) each cover it.
    byte_spans = {(int(s), int(e)) for piece, s, e in zip(tokenizer.id_to_piece(ids), starts, ends)
                  if piece.startswith("<0x")}
    assert (0, 1) in byte_spans


def test_keep_accents_offsets_cover_the_original_text(multilingual_model):
    tokenizer = Tokenizer.load(multilingual_model, MULTILINGUAL)
    for text in sentences(*SIX_SCRIPTS):
        ids, starts, ends = tokenizer.encode_with_offsets(text)
        for piece, start, end in zip(tokenizer.id_to_piece(ids), starts, ends):
            bare = piece.lstrip("▁")
            if bare and not piece.startswith("<0x"):
                assert bare in unicodedata.normalize("NFKC", text[start:end]), (text, piece)


@pytest.mark.parametrize("lower", [False, True])
def test_keep_accents_ids_equal_huggingface(multilingual_model, lower):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertTokenizer(multilingual_model, do_lower_case=lower, keep_accents=True)
    ours = Tokenizer.load(multilingual_model, TextSettings(do_lower_case=lower, keep_accents=True,
                                                           comma_rule="hf"))
    for text in sentences(*SIX_SCRIPTS):
        assert ours.encode(text).tolist() == hf.encode(text, add_special_tokens=False), text


def test_wordpiece_keep_accents_is_strip_accents_false(tmp_path):
    transformers = pytest.importorskip("transformers")
    settings = TextSettings(kind="wordpiece", keep_accents=True)
    vocab = train_wordpiece(sentences(), str(tmp_path / "vocab.txt"), 800, settings=settings)
    ours = Tokenizer.load(vocab, settings)
    assert isinstance(ours, WordPieceTokenizer)
    hf = transformers.BertTokenizer(vocab, do_lower_case=True, strip_accents=False)
    for text in sentences(*SIX_SCRIPTS):
        assert ours.encode(text).tolist() == hf.encode(text, add_special_tokens=False), text
    stripped = Tokenizer.load(vocab, TextSettings(kind="wordpiece"))
    for word, kept, dropped in [("Việt", "việt", "viet"), ("हिन्दी", "हिन्दी", "हिनदी")]:
        assert "".join(ours.pieces(word)).replace("#", "") == kept
        assert "".join(stripped.pieces(word)).replace("#", "") == dropped
    # "##" continuations are the only pieces inside a word, under both word boundaries.
    spaces = Tokenizer.load(vocab, dataclasses.replace(settings, word_boundaries="spaces"))
    assert (spaces.word_start == ours.word_start).all()
    pieces = ours.id_to_piece(range(ours.vocab_size))
    assert ours.word_start.tolist() == [not piece.startswith("##") for piece in pieces]


@pytest.mark.parametrize("language", LANGUAGES)
def test_warnings_say_what_the_defaults_damage(default_model, language):
    lines = text_damage.warnings(Tokenizer.load(default_model), sentences(language))
    accents = [line for line in lines if "data.keep_accents=True" in line]
    starts = [line for line in lines if "data.word_boundaries=spaces" in line]
    assert bool(accents) == (MARKS[language] is not None), lines
    # Only where a script with spaces between words has letters outside a-z.
    assert bool(starts) == (language in ("hi", "ru", "ko")), lines
    assert text_damage.warnings(Tokenizer.load(default_model, MULTILINGUAL),
                                sentences(language)) == []


def test_warning_shows_a_word_of_the_text(default_model):
    lines = text_damage.warnings(Tokenizer.load(default_model), sentences("hi"))
    assert "'दक्षिण' -> 'दकषिण'" in lines[0]
    assert "'दकषिण' is masked as" in lines[1]
    japanese = text_damage.warnings(Tokenizer.load(default_model), ["パンダが好き"])
    assert "'パンダが好き' -> 'ハンタか好き'" in japanese[0]


@pytest.mark.parametrize("language, vocab_size, warned", [
    ("hi", 170, True), ("ja", 170, True), ("en", 100, False)])
def test_tokenizer_train_warns(tmp_path, capsys, language, vocab_size, warned):
    from tests.test_builder import load_config
    config = load_config()
    config.data.corpus = str(write_corpus(tmp_path / "corpus.txt", language, "en"))
    config.data.tokenizer = str(tmp_path / "spm.model")
    config.data.vocab_size = vocab_size
    training.train_from_config(config)
    output = capsys.readouterr().out
    assert ("--config.data.keep_accents=True" in output) == warned, output
    assert "warning" not in output or warned


def test_character_coverage_is_checked(tmp_path):
    from tests.test_builder import load_config
    config = load_config()
    config.data.character_coverage = 1.5
    config.data.tokenizer = str(tmp_path / "spm.model")
    with pytest.raises(Exception, match="data.character_coverage=1.5"):
        training.train_from_config(config)


def test_coverage_and_byte_fallback_change_the_model(tmp_path, default_model):
    lower = train(sentences(), str(tmp_path / "a.model"), 500, character_coverage=0.98)
    assert open(lower, "rb").read() != open(default_model, "rb").read()
    unknown = np.mean([Tokenizer.load(lower).unk_id in Tokenizer.load(lower).encode(s).tolist()
                       for s in sentences()])
    assert unknown > 0  # rare characters left out of the vocabulary


def test_too_small_a_vocabulary_says_what_to_change(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=100 is smaller than the .* pieces this "
                                         "corpus's characters need .*character_coverage"):
        train(sentences("ja", "hi"), str(tmp_path / "small.model"), 100)
    # The example is a lower coverage than the one set, never the same value.
    with pytest.raises(ValueError, match=r"character_coverage=0\.9995\): .* \(e\.g\. 0\.999:"):
        train(sentences("ja", "hi"), str(tmp_path / "small.model"), 100,
              character_coverage=0.9995)


def test_the_multilingual_switch_sets_the_documented_keys_and_each_stays_overridable():
    from configs import pretrain
    config = pretrain.get_config("runlocal,multilingual")
    assert {key: config.data[key] for key in ("keep_accents", "do_lower_case", "word_boundaries",
                                              "character_coverage", "byte_fallback",
                                              "mixture_alpha")} == {
        "keep_accents": True, "do_lower_case": False, "word_boundaries": "spaces",
        "character_coverage": 0.9995, "byte_fallback": True, "mixture_alpha": 0.3}
    assert TextSettings.from_config(config.data) == MULTILINGUAL
    plain = pretrain.get_config("runlocal")
    assert (plain.data.keep_accents, plain.data.word_boundaries) == (False, "reference")
    # The switch only sets defaults: a --config.data.X flag is applied after it.
    from absl import flags
    from ml_collections import config_flags
    argv = ["albert-jax", "--config=configs/pretrain.py:runlocal,multilingual",
            "--config.data.do_lower_case=True", "--config.data.word_boundaries=reference"]
    values = flags.FlagValues()
    # sys_argv: the config flag finds its override flags in this list instead of sys.argv.
    config_flags.DEFINE_config_file("config", None, "run config", flag_values=values,
                                    lock_config=True, sys_argv=argv)
    values(argv)
    overridden = TextSettings.from_config(values.config.data)
    assert overridden == dataclasses.replace(MULTILINGUAL, do_lower_case=True,
                                             word_boundaries="reference")
