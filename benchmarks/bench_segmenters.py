"""Sentence segmenters compared: sentencex (what `data/corpus/segmenter.py` uses), pysbd and blingfire.

  pip install --target=/tmp/pysbd pysbd==0.3.4    # not into the venv: see below
  PYTHONPATH=.:/tmp/pysbd python benchmarks/bench_segmenters.py [--kilobytes=200] [--repeats=5]

blingfire comes with the `peers` extra. pysbd's wheel also installs top-level packages named
`benchmarks` and `examples`, which would hide this folder from `python -m benchmarks.X` in the
environment it is installed into: it gets a folder of its own, on PYTHONPATH for this run only.

1. Cases: each hand-written case of tests/test_segmenter.py (Chinese and Japanese `。！？`, Hindi
   `।`, Arabic `؟`, "Dr. Smith", "e.g.", decimals, sentences that start in lower case, German
   "z.B.", Thai) cut by each library; a case is right when the stripped, non-empty sentences
   equal the hand-written ones. pysbd has rules for 23 languages (not Thai); blingfire has one
   model for every language.
2. Speed: MB of UTF-8 text cut per CPU-second (time.process_time, this one process), per language,
   on --kilobytes of real text in that language already on a Debian/Ubuntu machine: English from
   /usr/share/doc/*/copyright; the others from the translations of /usr/share/locale/<ll>/
   LC_MESSAGES/*.mo (each message one paragraph, its newlines made spaces). Each library gets the
   same paragraphs one at a time, as the build gives them; the libraries take turns in each
   repeat (interleaved) and the table shows the median over --repeats.
"""
from __future__ import annotations

import argparse
import gettext
import glob
import importlib.metadata
import os
import statistics
import sys
import time
from typing import Callable, cast

import blingfire
import pysbd
import sentencex

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from tests.test_segmenter import CASES  # noqa: E402

# Our language code -> the /usr/share/locale folder with its translations (None: English docs).
LOCALES = {"en": None, "de": "de", "ru": "ru", "zh": "zh_CN", "ja": "ja", "hi": "hi", "ar": "ar",
           "th": "th"}


def _pysbd(language: str) -> Callable[[str], list[str]]:
    segmenter = pysbd.Segmenter(language=language, clean=False)  # built once per language
    return segmenter.segment


def _segmenters(language: str) -> dict[str, Callable[[str], list[str]] | None]:
    """Each library's paragraph -> sentences for `language` (None where it has no rules)."""
    try:
        pysbd_split: Callable[[str], list[str]] | None = _pysbd(language)
    except ValueError:  # "Provide valid language ID": no rules for the language
        pysbd_split = None
    return {
        "sentencex": lambda paragraph: sentencex.segment(language, paragraph),
        "pysbd": pysbd_split,
        "blingfire": lambda paragraph: blingfire.text_to_sentences(paragraph).split("\n"),
    }


def _stripped(sentences: list[str]) -> list[str]:
    return [s for s in (part.strip() for part in sentences) if s]


def _paragraphs(language: str, kilobytes: int) -> list[str]:
    """About `kilobytes` KB of real paragraphs in `language` (see the module docstring)."""
    locale = LOCALES[language]
    texts: list[str] = []
    if locale is None:
        for path in sorted(glob.glob("/usr/share/doc/*/copyright")):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.extend(" ".join(p.split()) for p in f.read().split("\n\n"))
    else:
        for path in sorted(glob.glob(f"/usr/share/locale/{locale}/LC_MESSAGES/*.mo")):
            try:
                with open(path, "rb") as f:
                    # gettext keeps the messages in `_catalog`; it has no public iterator.
                    catalog = getattr(gettext.GNUTranslations(f), "_catalog")
            except (OSError, UnicodeDecodeError):
                continue
            texts.extend(" ".join(v.split()) for k, v in catalog.items()
                         if k and isinstance(v, str))
    paragraphs, size = [], 0
    for text in texts:
        if text and size < kilobytes * 1000:
            paragraphs.append(text)
            size += len(text.encode("utf-8")) + 1
    return paragraphs


def cases_table() -> list[str]:
    names = list(_segmenters("en"))
    rows = ["| case | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    right = dict.fromkeys(names, 0)
    for case in CASES:
        language, paragraph, expected = cast(tuple[str, str, list[str]], case.values)
        cells = []
        for name, split in _segmenters(language).items():
            if split is None:
                cells.append("no rules")
                continue
            got = _stripped(split(paragraph))
            right[name] += got == expected
            cells.append("right" if got == expected else f"wrong: {' / '.join(got)}")
        rows.append(f"| {case.id} | " + " | ".join(cells) + " |")
    rows.append(f"| right of {len(CASES)} | " + " | ".join(str(right[n]) for n in names) + " |")
    return rows


def speed_table(kilobytes: int, repeats: int) -> list[str]:
    names = list(_segmenters("en"))
    rows = ["| language | KB | " + " | ".join(f"{n} MB/CPU-s" for n in names) + " |",
            "|---" * (len(names) + 2) + "|"]
    for language in LOCALES:
        paragraphs = _paragraphs(language, kilobytes)
        megabytes = sum(len(p.encode("utf-8")) + 1 for p in paragraphs) / 1e6
        segmenters = _segmenters(language)
        seconds: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(repeats):
            for name, split in segmenters.items():  # interleaved: each library in each repeat
                if split is None:
                    continue
                start = time.process_time()
                for paragraph in paragraphs:
                    split(paragraph)
                seconds[name].append(time.process_time() - start)
        cells = [f"{megabytes / statistics.median(seconds[n]):.2f}" if seconds[n] else "no rules"
                 for n in names]
        rows.append(f"| {language} | {megabytes * 1000:.0f} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kilobytes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("versions:", {n: importlib.metadata.version(n) for n in _segmenters("en")})
    print("\n".join(cases_table()))
    print()
    print("\n".join(speed_table(args.kilobytes, args.repeats)))


if __name__ == "__main__":
    main()
