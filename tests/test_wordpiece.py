"""WordPiece vocabularies (SPEC 2.5): `Tokenizer.load("vocab.txt")` tokenizes as the reference's
`FullTokenizer(vocab_file=..., spm_model_file=None)`.

The expectations come from the reference's rules (google-research/albert tokenization.py:
`BasicTokenizer`, `WordpieceTokenizer`, `_is_whitespace`, `_is_control` (Cc and Cf only),
`_is_punctuation`, `_is_chinese_char`), ported below as `reference_tokenize`, a plain
line-by-line transcription kept independent of albert_jax/data/tokenizers/wordpiece.py (which is written
for speed and offsets). Hand-written cases pin each rule; a few thousand generated lines of
mixed Chinese / English / Korean / Japanese text compare the two.
"""
import pickle
import random
import unicodedata

import numpy as np
import pytest

from albert_jax.data.tokenizers import (
    TextSettings,
    Tokenizer,
    WordPieceTokenizer,
    check_kind,
    tokenizer_kind,
)
from albert_jax.errors import ConfigError

# --- The reference, transcribed ---------------------------------------------------------------

def _ref_is_whitespace(char):
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _ref_is_control(char):
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _ref_is_punctuation(char):
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _ref_is_chinese_char(cp):
    return any(low <= cp <= high for low, high in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _ref_basic_tokenize(text, do_lower_case):
    text = "".join(" " if _ref_is_whitespace(char) else char for char in text
                   if not (ord(char) == 0 or ord(char) == 0xFFFD or _ref_is_control(char)))
    text = "".join(f" {char} " if _ref_is_chinese_char(ord(char)) else char for char in text)
    split_tokens = []
    for token in text.strip().split():
        if do_lower_case:
            token = token.lower()
            token = "".join(char for char in unicodedata.normalize("NFD", token)
                            if unicodedata.category(char) != "Mn")
        output, start_new_word = [], True
        for char in token:
            if _ref_is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        split_tokens.extend("".join(chars) for chars in output)
    return " ".join(split_tokens).strip().split()


def _ref_wordpiece(token, vocab):
    chars = list(token)
    if len(chars) > 200:
        return ["[UNK]"]
    start, sub_tokens = 0, []
    while start < len(chars):
        end, current = len(chars), None
        while start < end:
            substr = "".join(chars[start:end])
            if start > 0:
                substr = "##" + substr
            if substr in vocab:
                current = substr
                break
            end -= 1
        if current is None:
            return ["[UNK]"]
        sub_tokens.append(current)
        start = end
    return sub_tokens


def reference_tokenize(text, vocab, do_lower_case=True):
    """FullTokenizer.tokenize with a vocab_file."""
    return [piece for token in _ref_basic_tokenize(text, do_lower_case)
            for piece in _ref_wordpiece(token, vocab)]


# --- A vocabulary in BERT's layout --------------------------------------------------------------

ENGLISH = ("the cat sat on mat dog ran park big red ball bird tree house river sun people walk "
           "green field happy song model data text albert china beijing shanghai").split()
CJK_IN_VOCAB = [chr(code) for code in range(0x4E00, 0x4E00 + 400)] + list("你好中国北京上海我们的是不了人在有")
HANGUL_JAMO = [chr(code) for code in [*range(0x1100, 0x1113), *range(0x1161, 0x1176),
                                      *range(0x11A8, 0x11C3)]]
KANA = [chr(code) for code in range(0x3041, 0x3097)] + [chr(code) for code in range(0x30A1, 0x30FB)]


def _vocab_pieces() -> list[str]:
    pieces = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 10)]
    pieces += ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 10-13, not 1-4: ids come from the file
    pieces += [chr(code) for code in range(33, 127) if not chr(code).isalnum()]
    pieces += list("0123456789") + ["##" + d for d in "0123456789"] + ["000", "##000", "##,"]
    pieces += list("abcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    pieces += list("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + list("éàüñçöςσοαδ")
    pieces += ["##é", "##ς", "##σ", "##ο", "##α", "##δ"]
    pieces += ENGLISH + ["##s", "##ing", "##ed", "un", "##want", "runn", "##able", "aff"]
    pieces += ["，", "。", "、", "！", "？", "「", "」", "…", "—"]
    pieces += CJK_IN_VOCAB + ["##" + char for char in CJK_IN_VOCAB[:20]]
    pieces += HANGUL_JAMO + ["##" + jamo for jamo in HANGUL_JAMO] + ["한", "국"]
    pieces += KANA + ["##" + kana for kana in KANA[:40]]
    seen = set()
    return [piece for piece in pieces if not (piece in seen or seen.add(piece))]


PIECES = _vocab_pieces()
VOCAB = {piece: index for index, piece in enumerate(PIECES)}


@pytest.fixture(scope="module")
def vocab_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("".join(f"{piece}\n" for piece in PIECES), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(vocab_path) -> Tokenizer:
    return Tokenizer.load(vocab_path)


@pytest.fixture(scope="module")
def cased(vocab_path) -> Tokenizer:
    return Tokenizer.load(vocab_path, TextSettings("wordpiece", do_lower_case=False))


def _expect(tokenizer: Tokenizer, text: str) -> list[int]:
    return [VOCAB[piece] for piece in reference_tokenize(text, VOCAB, tokenizer.settings.do_lower_case)]


# Each case names the rule it pins.
CASES = {
    "chinese: every ideograph a token of its own": "我们在北京，你好中国。丁丂七",
    "chinese ideograph not in the vocabulary is [UNK] alone": "北京龘上海",
    "chinese glued to latin splits at the ideograph": "ah博推zz和albert模型",
    "japanese: kanji split, kana runs are words": "東京はにほんです、カタカナ。",
    "korean: Hangul is not CJK; NFD turns syllables into jamo": "한국어 텍스트 입니다 한국",
    "accents stripped with lower case": "Héllo CAFÉ naïve Ölçü Ñandú",
    "greek final sigma as Python's lower() of the whole token": "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣΑ",
    "turkish dotted capital I": "İstanbul",
    "control characters dropped, tab/newline are spaces": "a\x00b\x01c\td\ne\rf\x7fg\x1fh",
    "zero-width and format characters (Cf) dropped inside a word": "zero\u200bwidth\u200d "
                                                                     "soft\u00adhyphen\ufeff",
    "U+FFFD dropped, private use and unassigned kept (not Cc/Cf)": "bad\ufffdchar \ue000x \U000e0fff",
    "unicode spaces split words": "a\u3000b\u00a0c\u2009d\u2028e\u2029f",
    "word longer than 200 characters is one [UNK]": "a" * 201 + " " + "b" * 200,
    "punctuation runs split one by one": "wait...what?!?! (yes) [no] {x}--y__z",
    "numbers with commas": "1,000,000 and 3.14, 12,5%",
    "empty": "",
    "only spaces and controls": "  \t\n \x00 ",
    "[MASK]-like strings are split like any text": "[MASK] [CLS]x[SEP] [UNK] [unused1] [PAD]",
    "greedy longest match with ## continuations": "unwanted runnable affable unaffable",
    "no match anywhere in a word makes the whole word [UNK]": "cat∂dog xyz\u0394",
    "fullwidth forms are not normalised (no NFKC)": "ＡＢＣ１２３ ｆｕｌｌ",
    "compatibility ideographs (F900-FAFF) are CJK": "\uf900\ufa0e",
    "CJK extension ranges, the reference's table": "\U00020000\U0002b820\U0002b91f\U0002ceaf",
    "emoji and symbols": "I ❤️ 🤖 emoji 🇨🇳 ok",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cases_match_the_reference(tokenizer, cased, name):
    text = CASES[name]
    for model in (tokenizer, cased):
        assert model.encode(text).tolist() == _expect(model, text), name
        assert model.encode(text).dtype == np.int32


def test_rules_spelled_out(tokenizer, cased):
    """A few results written out, so the transcription above is itself pinned."""
    # The reference's own tokenization_test case.
    assert tokenizer.pieces("UNwant\u00e9d,running") == ["un", "##want", "##ed", ",", "runn",
                                                          "##ing"]
    assert tokenizer.pieces("ah\u535a\u63a8zz") == ["a", "##h", "[UNK]", "[UNK]", "z", "##z"]
    assert tokenizer.pieces("Héllo") == ["h", "##e", "##l", "##l", "##o"]
    assert cased.pieces("Héllo") == ["H", "##é", "##l", "##l", "##o"]
    assert tokenizer.pieces("ΟΔΟΣ") == ["ο", "##δ", "##ο", "##ς"]
    assert tokenizer.pieces("[MASK]") == ["[", "m", "##a", "##s", "##k", "]"]
    assert tokenizer.pieces("1,000") == ["1", ",", "000"]
    assert tokenizer.pieces("a" * 201) == ["[UNK]"]
    assert tokenizer.pieces("") == [] and tokenizer.encode("").shape == (0,)
    # Hangul syllable "한" decomposes (NFD, lower case on) into jamo: the syllable piece cannot
    # match, the jamo pieces do; without lower case it stays a syllable.
    assert tokenizer.pieces("한") == ["\u1112", "##\u1161", "##\u11ab"]
    assert cased.pieces("한") == ["한"]


def test_final_sigma_follows_python_lower(tokenizer):
    # Python lower-cases the whole whitespace token (before punctuation is split off): a final
    # capital sigma becomes "ς", any other "σ".
    assert tokenizer.pieces("ΣΑΣ") == ["σ", "##α", "##ς"]
    assert tokenizer.pieces("ΣΑΣ.Α") == ["σ", "##α", "##σ", ".", "α"]
    assert tokenizer.pieces("ΣΑΣ. Α") == ["σ", "##α", "##ς", ".", "α"]


def test_special_ids_and_word_starts(tokenizer, vocab_path):
    assert tokenizer.kind == "wordpiece" and isinstance(tokenizer, WordPieceTokenizer)
    assert tokenizer.vocab_size == len(PIECES)
    # pad 0 (what the reference pads with); the others are where the file has them.
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 10, 11, 12, 13)
    # SPEC 2.5 `_is_start_piece_bert`: only "##" pieces continue a word.
    assert tokenizer.word_start.shape == (len(PIECES),)
    assert tokenizer.word_start.tolist() == [not piece.startswith("##") for piece in PIECES]
    # The vocabulary as read and its text settings beside it, as a SentencePiece model's.
    assert tokenizer.files("vocab.txt") == {"vocab.txt": open(vocab_path, "rb").read(),
                                            "vocab.txt.json": tokenizer.settings.record()}
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode("你好 world").tolist() == tokenizer.encode("你好 world").tolist()
    assert tokenizer.preprocess("  Ünï  ") == "  Ünï  "  # processors do nothing for a vocab


def test_a_workdir_copy_keeps_the_casing(cased, tmp_path):
    # A workdir's vocab.txt reads back with the settings of the run that copied it.
    for name, content in cased.files("vocab.txt").items():
        (tmp_path / name).write_bytes(content)
    loaded = Tokenizer.load(str(tmp_path / "vocab.txt"))
    assert loaded.settings == TextSettings("wordpiece", do_lower_case=False)
    assert loaded.pieces("Ünï") == cased.pieces("Ünï") != Tokenizer.load(
        str(tmp_path / "vocab.txt"), TextSettings("wordpiece")).pieces("Ünï")


def test_decode(tokenizer):
    ids = tokenizer.encode("unwanted 你好 cats")
    assert tokenizer.decode([tokenizer.cls_id, *ids, tokenizer.sep_id, 0, 0]) == \
        "unwanted 你 好 cats"


def test_offsets_cover_the_original_characters(tokenizer):
    text = "  Héllo, WORLD!! 你好龘 a\x00b  unwanted\u200b 한국 1,000 " + "x" * 201
    ids, starts, ends = tokenizer.encode_with_offsets(text)
    assert ids.tolist() == tokenizer.encode(text).tolist()
    spans = [text[start:end] for start, end in zip(starts, ends)]
    assert spans[:8] == ["H", "é", "l", "l", "o", ",", "W", "O"]
    assert "你" in spans and "好" in spans and "龘" in spans  # [UNK] covers its word
    # The dropped NUL joins "a" and "b" into one word ("a", "##b"); each piece its character.
    assert spans[spans.index("a"):spans.index("a") + 2] == ["a", "b"]
    assert spans[spans.index("un"):spans.index("un") + 3] == ["un", "want", "ed"]
    assert spans[-1] == "x" * 201
    assert spans[spans.index("1"):spans.index("1") + 3] == ["1", ",", "000"]
    # Jamo of one syllable all point to it.
    assert spans.count("한") == len(tokenizer.pieces("한"))


def _mixed_lines(count: int, seed: int = 0) -> list[str]:
    """Lines of Chinese, English, Korean, Japanese, accents, numbers, punctuation, controls."""
    rng = random.Random(seed)
    makers = [
        lambda: "".join(chr(rng.randint(0x4E00, 0x4E00 + 500)) for _ in range(rng.randint(1, 12))),
        lambda: rng.choice(ENGLISH).capitalize() if rng.random() < 0.3 else rng.choice(ENGLISH),
        lambda: "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 4))),
        lambda: "".join(rng.choice(KANA) for _ in range(rng.randint(1, 5))),
        lambda: rng.choice(["café", "Naïve", "ÉCOLE", "Ñu", "ΟΔΟΣ", "İzmir", "straße"]),
        lambda: f"{rng.randint(0, 10**7):,}" + rng.choice(["", ",", ".5", "%"]),
        lambda: rng.choice(["，", "。", "!?", "...", "(", ")", "「", "」", "—", "[MASK]", "[SEP]"]),
        lambda: rng.choice(["\u200b", "\x00", "\t", "\u3000", "\ufffd", "\x85", "\u00ad"]),
        lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9))),
    ]
    lines = []
    for _ in range(count):
        parts = [rng.choice(makers)() for _ in range(rng.randint(0, 14))]
        lines.append("".join(part + rng.choice(["", " ", " ", "  "]) for part in parts))
    return lines


MIXED_LINES = 3000


def test_mixed_lines_match_the_reference(tokenizer, cased):
    lines = _mixed_lines(MIXED_LINES)
    for model in (tokenizer, cased):
        mismatches = [line for line in lines if model.encode(line).tolist() != _expect(model, line)]
        assert not mismatches, mismatches[:3]
    # The generated text exercises the rules: ideographs, [UNK], continuations all occur.
    ids = np.concatenate([tokenizer.encode(line) for line in lines[:300]])
    assert (ids == tokenizer.unk_id).any() and (~tokenizer.word_start[ids]).any()


# --- Bad files: one line naming the file and what is wrong ---------------------------------------

@pytest.mark.parametrize("lines, message", [
    (["[PAD]", "[UNK]", "[CLS]", "a"], "has no [SEP], [MASK] piece"),
    (["[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a"], "repeats the piece 'a' (lines 5 and 7)"),
])
def test_bad_vocabularies(tmp_path, lines, message):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"^WordPiece vocabulary .*vocab.txt .*") as error:
        Tokenizer.load(str(path))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_model_and_vocabulary_mixed_up(tmp_path, vocab_path):
    text_as_model = tmp_path / "vocab.model"
    text_as_model.write_bytes(open(vocab_path, "rb").read())
    with pytest.raises(ValueError, match=r"vocab.model is named as a SentencePiece model"):
        Tokenizer.load(str(text_as_model))
    binary_as_vocab = tmp_path / "spiece.txt"
    binary_as_vocab.write_bytes(b"\n\x08\x00\x00\x80\xbf[UNK]")
    with pytest.raises(ValueError, match=r"spiece.txt is a binary file .*must end in .model"):
        Tokenizer.load(str(binary_as_vocab))
    assert tokenizer_kind("x/vocab_chinese.txt", b"[PAD]\n") == "wordpiece"
    with pytest.raises(ConfigError, match=r"data.tokenizer='v.model' names a sentencepiece file "
                                          r"but data.tokenizer_kind='wordpiece'"):
        check_kind("v.model", "wordpiece")
    with pytest.raises(ConfigError, match=r"names a wordpiece file but data.tokenizer_kind="
                                          r"'sentencepiece'"):
        check_kind("vocab.txt", "sentencepiece")
