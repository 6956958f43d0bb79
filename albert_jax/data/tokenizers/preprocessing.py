"""What ALBERT does to text around the tokenizer's own model (SPEC 1.4.2, 2.2, 2.3).

  preprocess_text("Héllo  World")        # "hello world": whitespace folded, accents stripped
  preprocess_text("क्या", keep_accents=True)   # "क्या": the marks kept (HF's keep_accents)
  preprocess_with_origins(text, lower)   # the same, and each character's index in `text`
  is_start_piece("▁the")                 # SPEC 1.4.2: starts a whole word for n-gram masking
  is_start_piece("ा", "spaces")          # False: inside a word of a script written with spaces
  needs_comma_split("▁1,000,")           # SPEC 2.3: re-encoded without its final comma
"""
from __future__ import annotations

import unicodedata

import numpy as np

from albert_jax.errors import ConfigError

SPIECE_UNDERLINE = "\u2581"  # "▁", SentencePiece's word-start marker.

# SPEC 1.4.2 `_is_start_piece_sp`. The reference's set literal is '!"#$%&\"()*+,-./:;?@[\\]^_`{|}~'
# (note `\"` where string.punctuation has `'`): the apostrophe is NOT in it. Its `€`/`£` entries
# are UTF-8 bytes and never match a str piece under Python 3, so they are left out here.
_START_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
_START_ALLOWED_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz") | _START_PUNCTUATION

# SPEC 2.3: what happens to the "▁" that re-encoding a digit-comma piece adds in front.
# "reference": kept, as the reference's `encode_pieces` runs under Python 3 (the default);
# "hf": removed when the piece did not start a word, as under Python 2 and in HuggingFace's
# AlbertTokenizer.
COMMA_RULES = ("reference", "hf")
DEFAULT_COMMA_RULE = "reference"

# Where whole words start (`is_start_piece`): "reference", SPEC 1.4.2's test; "spaces", where
# the text has a space, in every script.
WORD_BOUNDARIES = ("reference", "spaces")

# The scripts written without spaces between words, where word_boundaries "spaces" keeps every
# piece a word as the reference has it: Han (with the CJK radicals, iteration and ideographic
# marks), Hiragana, Katakana (and its halfwidth forms), Thai, Lao, Khmer, Myanmar. Code point
# ranges of their Unicode blocks (the standard library has no script property).
_NO_SPACE_RANGES = (
    (0x0E00, 0x0EFF),    # Thai, Lao
    (0x1000, 0x109F),    # Myanmar
    (0x1780, 0x17FF),    # Khmer
    (0x19E0, 0x19FF),    # Khmer symbols
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),    # 々 〆 〇
    (0x3021, 0x3029),    # Hangzhou numerals
    (0x3031, 0x3035),    # kana repeat marks
    (0x303B, 0x303C),    # 〻 〼
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK extension A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xA9E0, 0xA9FF),    # Myanmar extended B
    (0xAA60, 0xAA7F),    # Myanmar extended A
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0xFF66, 0xFF9F),    # halfwidth Katakana
    (0x1B000, 0x1B16F),  # Kana supplement and extensions
    (0x20000, 0x323AF),  # CJK extensions B-H, compatibility supplement
)
_NO_SPACE_STARTS = np.array([low for low, _ in _NO_SPACE_RANGES])
_NO_SPACE_ENDS = np.array([high for _, high in _NO_SPACE_RANGES])


def preprocess_text(text: str, lower: bool = True, keep_accents: bool = False) -> str:
    """ALBERT's `preprocess_text` (SPEC 2.2): fold whitespace, strip accents (NFKD, then every
    character with a combining class dropped), lower-case.

    keep_accents: skip the accent step, as HuggingFace's `AlbertTokenizer(keep_accents=True)`
    (the SentencePiece model's own NFKC still applies). Unlike HuggingFace's AlbertTokenizer it
    does not rewrite ``/'' quotes (the reference does not).
    """
    text = " ".join(text.split())
    # NFKD leaves ASCII as it is and it has no combining marks.
    if not keep_accents and not text.isascii():
        text = strip_accents(text)
    return text.lower() if lower else text


def strip_accents(text: str) -> str:
    """SPEC 2.2's accent step: NFKD, then the characters with a combining class dropped."""
    return "".join(char for char in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(char))


def is_start_piece(piece: str, word_boundaries: str = WORD_BOUNDARIES[0]) -> bool:
    """Does `piece` start a whole word for n-gram masking?

    "reference": SPEC 1.4.2 `_is_start_piece_sp` under Python 3: a "▁" or "<" in front, one
    punctuation character, or any character outside a-z (so every piece of a text not in the
    Latin alphabet starts a word). "spaces": a "▁" in front (a space before it in the text), a
    punctuation character in front, or a first character of a script written without spaces
    (`_NO_SPACE_RANGES`: there every piece stays a word, as the reference has it). Control,
    unknown and byte pieces are the tokenizer's to decide (`SentencePieceTokenizer.word_starts`).
    """
    if word_boundaries == WORD_BOUNDARIES[0]:
        return (piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<")
                or piece in _START_PUNCTUATION
                or not all(char.lower() in _START_ALLOWED_CHARS for char in piece))
    if not piece:
        return False
    first = piece[0]
    return (first == SPIECE_UNDERLINE or first in _START_PUNCTUATION
            or unicodedata.category(first).startswith("P") or written_without_spaces(first))


def written_without_spaces(char: str) -> bool:
    """Whether `char` belongs to a script written without spaces between words (Han, Hiragana,
    Katakana, Thai, Lao, Khmer, Myanmar)."""
    code = ord(char)
    if code < _NO_SPACE_STARTS[0]:
        return False
    index = int(np.searchsorted(_NO_SPACE_STARTS, code, side="right")) - 1
    return code <= _NO_SPACE_ENDS[index]


def needs_comma_split(piece: str) -> bool:
    # SPEC 2.3: a piece such as "▁1,000," or "000," (digit then a final comma).
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def check_comma_rule(comma_rule: str) -> None:
    """Raises ConfigError unless `comma_rule` is one of `COMMA_RULES`."""
    if comma_rule not in COMMA_RULES:
        raise ConfigError(f"config data.comma_rule={comma_rule!r} is not a digit-comma rule; use "
                         f"{COMMA_RULES[0]!r} (the reference, SPEC 2.3) or {COMMA_RULES[1]!r} "
                         "(HuggingFace's AlbertTokenizer)")


def preprocess_with_origins(text: str, lower: bool,
                            keep_accents: bool = False) -> tuple[str, np.ndarray]:
    """`preprocess_text(text, lower, keep_accents)` (SPEC 2.2) and, for each of its characters,
    the index of the original character it comes from: int32 [len(preprocessed)].

    Applied character by character: the whitespace fold keeps one space per run (mapped to the
    run's first character), NFKD and the dropping of combining marks act on one character at a
    time (NFKD's canonical reordering only moves combining marks, which are dropped), and
    lower-casing keeps lengths after NFKD. The result is checked against `preprocess_text`.
    """
    parts, origins = [], []
    space_at = None  # index of the first whitespace character after a word
    seen_word = False
    for index, char in enumerate(text):
        if char.isspace():
            if seen_word and space_at is None:
                space_at = index
            continue
        if space_at is not None:
            parts.append(" ")
            origins.append(space_at)
            space_at = None
        seen_word = True
        part = char if char < "\x80" or keep_accents else strip_accents(char)
        part = part.lower() if lower else part
        parts.append(part)
        origins.extend([index] * len(part))
    preprocessed = preprocess_text(text, lower, keep_accents)
    # The whole-string lower() differs from the per-character one only in context-dependent
    # mappings of the same length (the Greek final sigma), so lengths must agree.
    if len(preprocessed) != len(origins):
        raise RuntimeError(f"character alignment of {text[:50]!r}... disagrees with "
                           "preprocess_text (SPEC 2.2); please report this text")
    return preprocessed, np.asarray(origins, dtype=np.int32)
