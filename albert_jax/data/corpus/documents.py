"""Lines and records made documents: a document is a `list[str]` of its sentences (non-empty,
stripped), by the `data.documents` and `data.sentences` settings (`settings.py`).

  blank_lines: a whitespace-only line ends a document (SPEC 1.2.1)
  records:     each record (or line of a text file) is one document, its newlines paragraphs
  lines:       each non-empty line is one sentence (SPEC 1.2.1)
  segmenter:   each line is a paragraph, cut into sentences by `segmenter.split_sentences`
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable, Iterator

from albert_jax.data.corpus import segmenter
from albert_jax.data.corpus.settings import ReadSettings
from albert_jax.data.corpus.stats import CorpusStats
from albert_jax.errors import ConfigError

# A file without blank lines would otherwise be one unbounded document; longer documents are cut
# into pieces of this many sentences (SOP only pairs neighbouring sentences, so nothing is lost).
MAX_DOCUMENT_SENTENCES = 10_000

SentenceCutter = Callable[[str], list[str]]  # one line (a paragraph) -> its sentences


def sentence_cutter(settings: ReadSettings, language: str | None = None) -> SentenceCutter:
    """The `data.sentences` rule of `settings` (resolved), in `language` (default: the
    settings' data.language)."""
    if settings.sentences == "lines":
        return _line_sentence
    return functools.partial(_segmented, language=language or settings.language)


def _line_sentence(line: str) -> list[str]:
    sentence = line.strip()
    return [sentence] if sentence else []


def _segmented(line: str, *, language: str) -> list[str]:
    return segmenter.split_sentences(line, language) if line.strip() else []


@functools.lru_cache(maxsize=4096)
def is_language(code: str) -> bool:
    """Whether the segmenter takes `code` (a record's data.language_column value)."""
    try:
        segmenter.split_sentences("", code)
    except ConfigError:
        return False
    return True


def blank_line_documents(lines: Iterable[str], cut: SentenceCutter,
                         stats: CorpusStats) -> Iterator[list[str]]:
    """The documents of `lines`, a blank (or whitespace-only) line ending each (SPEC 1.2)."""
    document: list[str] = []
    previous_blank = True  # A blank line right after a boundary is an empty document.
    for line in lines:
        sentences = cut(line)
        blank = not line.strip()
        if sentences:
            document.extend(sentences)
            while len(document) >= MAX_DOCUMENT_SENTENCES:
                stats.split_documents += 1
                yield document[:MAX_DOCUMENT_SENTENCES]
                document = document[MAX_DOCUMENT_SENTENCES:]
        elif blank and document:
            yield document
            document = []
        elif blank and previous_blank:  # (After a cut at MAX_DOCUMENT_SENTENCES it is none.)
            stats.empty_documents += 1
        previous_blank = blank
    if document:
        yield document


def record_documents(text: str, cut: SentenceCutter, stats: CorpusStats) -> Iterator[list[str]]:
    """The document of one record's text (its newlines separate paragraphs); one cut at
    MAX_DOCUMENT_SENTENCES into several, none for a record without a sentence (counted)."""
    document = [sentence for paragraph in text.split("\n") for sentence in cut(paragraph)]
    if not document:
        stats.empty_documents += 1
    for start in range(0, len(document), MAX_DOCUMENT_SENTENCES):
        if start:
            stats.split_documents += 1
        yield document[start:start + MAX_DOCUMENT_SENTENCES]
