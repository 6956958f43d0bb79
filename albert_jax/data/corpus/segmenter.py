"""A paragraph cut into sentences, for any language: sentencex (Wikimedia's segmenter).

SPEC 1.2 wants one sentence per line; corpora published as records (Wikipedia, FineWeb, C4,
OSCAR) or as paragraphs (CC-100) give paragraphs. sentencex (Rust, MIT, no model files) ends a
sentence at `.`, `!`, `?` and at the terminators of other scripts in every language (`。！？`,
`।`, `؟`, ...), keeps the abbreviations of its languages whole ("Dr. Smith", "e.g.", "z.B."),
keeps decimal numbers whole and splits before a sentence that starts in lower case. Scripts
without sentence punctuation (Thai) stay one sentence per paragraph. benchmarks/RESULTS.md
("Sentence segmenters") has the comparison with pysbd and blingfire that chose it.

A language is an ISO 639 code: two letters (`en`, `zh`), three (`deu`, `cmn`), optionally with
subtags (`zh-Hant`, `pt-BR`, FineWeb-2's `cmn_Hani`). sentencex resolves a code through
MediaWiki's fallback chains (`als` -> German rules) and gives a code with neither rules nor a
chain English's rules (the terminators of every script, English's abbreviations): that is the
documented fallback for a well-formed code. A value that is not a language code at all
(`english`, `""`) is a config error.
"""
from __future__ import annotations

import functools
import re

import sentencex

from albert_jax.errors import ConfigError

# An ISO 639 code, then optional BCP 47 / FineWeb-2 subtags (script, region): `pt-BR`, `cmn_Hani`.
_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")

# ISO 639-2/3 codes (FineWeb-2's `language` column, CulturaX) of the languages sentencex has rules
# of its own for (abbreviations, exclamation words); its fallback chains know the two-letter codes
# only, so without this `deu` would lose German's abbreviations ("z.B."). A macrolanguage's
# individual code maps to it where FineWeb-2 uses it (`arb` Standard Arabic -> `ar`).
_TWO_LETTER_CODES = {
    "amh": "am", "ara": "ar", "arb": "ar", "bul": "bg", "ben": "bn", "cat": "ca", "dan": "da",
    "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "spa": "es", "fin": "fi",
    "fra": "fr", "fre": "fr", "guj": "gu", "hin": "hi", "hye": "hy", "arm": "hy", "ita": "it",
    "jpn": "ja", "kaz": "kk", "kan": "kn", "mal": "ml", "mar": "mr", "mya": "my", "bur": "my",
    "nld": "nl", "dut": "nl", "pan": "pa", "pol": "pl", "por": "pt", "rus": "ru", "slk": "sk",
    "slo": "sk", "tam": "ta", "tel": "te", "ukr": "uk",
}  # fmt: skip


@functools.lru_cache(maxsize=None)
def sentencex_language(language: str, key: str = "config.data.language") -> str:
    """The code sentencex is given for `language` (lower case, `-` between subtags).

    Raises ConfigError naming `key` and the value when `language` is not an ISO 639 code.
    Cached: a build asks once per record with the same few codes.
    """
    if not isinstance(language, str) or not _LANGUAGE_CODE.fullmatch(language):
        raise ConfigError(
            f"{key}={language!r} is not an ISO 639 language code: give two or three letters, "
            "optionally with a script or region (en, zh, hi, deu, pt-BR, cmn_Hani); the codes "
            "are listed at https://iso639-3.sil.org/code_tables/639/data"
        )
    primary, *subtags = language.lower().replace("_", "-").split("-")
    primary = _TWO_LETTER_CODES.get(primary, primary)
    return "-".join([primary, *subtags])


def split_sentences(paragraph: str, language: str) -> list[str]:
    """`paragraph` (one line of text) cut into its sentences: stripped, non-empty, in order.

    `language` is an ISO 639 code (see the module docstring); a paragraph with no sentence
    terminator (a heading, Thai) is one sentence. Raises ConfigError naming
    `config.data.language` when `language` is not a language code.
    """
    code = sentencex_language(language)
    if len(paragraph) > WINDOW_CHARACTERS:
        return [s for s in map(str.strip, _windowed_segments(code, paragraph)) if s]
    return [s for s in map(str.strip, sentencex.segment(code, paragraph)) if s]


# sentencex's time grows faster than a paragraph's length (one 9 MB line of a test log took
# about 20 s), so a longer paragraph goes to it in windows of this many characters, each starting
# where the last window's last (maybe cut) sentence started: linear time, and the sentences of
# the whole paragraph, but where a quotation or a list runs across a window's start (sentencex
# lets an unclosed quote hold back every boundary after it: one 1.4 MB line stayed one
# "sentence"). No prose paragraph is that long (Wikipedia's are a few KB). A window with no
# boundary (a table, a script without terminators) is cut at its last space.
WINDOW_CHARACTERS = 1 << 16


def _windowed_segments(code: str, paragraph: str) -> list[str]:
    """sentencex's pieces of `paragraph` (they concatenate back to it), window by window."""
    pieces: list[str] = []
    start = 0
    while len(paragraph) - start > WINDOW_CHARACTERS:
        window = paragraph[start:start + WINDOW_CHARACTERS]
        found = sentencex.segment(code, window)
        if len(found) > 1:
            pieces.extend(found[:-1])
            start += len(window) - len(found[-1])
        else:
            cut = window.rfind(" ") + 1 or len(window)
            pieces.append(window[:cut])
            start += cut
    pieces.extend(sentencex.segment(code, paragraph[start:]))
    return pieces
