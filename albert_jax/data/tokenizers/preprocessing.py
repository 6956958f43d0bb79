"""What ALBERT does to text around the tokenizer's own model (SPEC 1.4.2, 2.2, 2.3).

  preprocess_text("Héllo  World")        # "hello world": whitespace folded, accents stripped
  preprocess_with_origins(text, lower)   # the same, and each character's index in `text`
  is_start_piece("▁the")                 # SPEC 1.4.2: starts a whole word for n-gram masking
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


def preprocess_text(text: str, lower: bool = True) -> str:
    """ALBERT's `preprocess_text` (SPEC 2.2): fold whitespace, strip accents (NFKD), lower-case.

    Unlike HuggingFace's AlbertTokenizer it does not rewrite ``/'' quotes (the reference does not).
    """
    text = " ".join(text.split())
    if text.isascii():  # NFKD leaves ASCII as it is and it has no combining marks.
        return text.lower() if lower else text
    text = unicodedata.normalize("NFKD", text)
    text = "".join(char for char in text if not unicodedata.combining(char))
    return text.lower() if lower else text


def is_start_piece(piece: str) -> bool:
    """SPEC 1.4.2: does `piece` start a whole word for n-gram masking (Python 3 behaviour)?"""
    return (piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<")
            or piece in _START_PUNCTUATION
            or not all(char.lower() in _START_ALLOWED_CHARS for char in piece))


def needs_comma_split(piece: str) -> bool:
    # SPEC 2.3: a piece such as "▁1,000," or "000," (digit then a final comma).
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def check_comma_rule(comma_rule: str) -> None:
    """Raises ConfigError unless `comma_rule` is one of `COMMA_RULES`."""
    if comma_rule not in COMMA_RULES:
        raise ConfigError(f"config data.comma_rule={comma_rule!r} is not a digit-comma rule; use "
                         f"{COMMA_RULES[0]!r} (the reference, SPEC 2.3) or {COMMA_RULES[1]!r} "
                         "(HuggingFace's AlbertTokenizer)")


def preprocess_with_origins(text: str, lower: bool) -> tuple[str, np.ndarray]:
    """`preprocess_text(text, lower)` (SPEC 2.2) and, for each of its characters, the index of
    the original character it comes from: int32 [len(preprocessed)].

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
        if char < "\x80":
            part = char.lower() if lower else char
        else:
            part = "".join(c for c in unicodedata.normalize("NFKD", char)
                           if not unicodedata.combining(c))
            part = part.lower() if lower else part
        parts.append(part)
        origins.extend([index] * len(part))
    preprocessed = preprocess_text(text, lower)
    # The whole-string lower() differs from the per-character one only in context-dependent
    # mappings of the same length (the Greek final sigma), so lengths must agree.
    if len(preprocessed) != len(origins):
        raise RuntimeError(f"character alignment of {text[:50]!r}... disagrees with "
                           "preprocess_text (SPEC 2.2); please report this text")
    return preprocessed, np.asarray(origins, dtype=np.int32)
