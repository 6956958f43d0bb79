"""A corpus's documents, by the reading settings: what `data build`, `tokenizer train` and
`data inspect --documents` read.

  settings = ReadSettings.from_config(config.data)
  for document in iter_documents(config.data.corpus, settings, stats):   # list[str] sentences
  for document in read_documents(part, settings, stats):    # one source or part (`parts.py`)
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from albert_jax.data.corpus import demo, documents, lines, parts, records, sources, tfds_source
from albert_jax.data.corpus.settings import ReadSettings
from albert_jax.data.corpus.stats import CorpusStats

SPEC_1_2 = ReadSettings()  # text files as SPEC 1.2 has them; the defaults of every key


def iter_documents(corpus: str, settings: ReadSettings = SPEC_1_2,
                   stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """The documents of every source of `corpus` (a spec, `sources.py`), in order; a mixture's
    groups each in its own language (`ReadSettings.for_group`)."""
    for name, spec in sources.group_specs(corpus):
        for source in sources.list_sources(spec):
            yield from read_documents(source, settings.for_group(name), stats)


def read_documents(part: str, settings: ReadSettings = SPEC_1_2,
                   stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """Streams the documents of one source of `sources.list_sources` or part of
    `parts.plan_parts` in bounded memory; counts them, and bad input, into `stats`."""
    stats = CorpusStats() if stats is None else stats
    stats.sources += 1
    for document in _documents(part, settings, stats):
        stats.documents += 1
        stats.sentences += len(document)
        yield document


def uses_segmenter(source: str, settings: ReadSettings) -> bool:
    """Whether `settings` cut the sentences of `source` (of `sources.list_sources`) with the
    segmenter."""
    if source == sources.DEMO or (source.startswith(sources.TFDS_PREFIX)
                                  and tfds_source.is_bookcorpus(source)):
        return False
    records_format = (source.startswith(sources.TFDS_PREFIX)
                      or sources.file_format(source)[0] != "text")
    return settings.resolved(records_format=records_format).sentences == "segmenter"


def _documents(part: str, settings: ReadSettings, stats: CorpusStats) -> Iterator[list[str]]:
    if part == sources.DEMO:
        return demo.demo_documents()
    if part.startswith(sources.TFDS_PREFIX):
        texts = tfds_source.tfds_texts(part)
        if tfds_source.is_bookcorpus(part):
            return tfds_source.bookcorpus_documents(texts)
        return _record_documents(((text, None) for text in texts), part,
                                 settings.resolved(records_format=True), stats)
    source, kind, span = parts.parse(part)
    file_format, compression = sources.file_format(source)
    resolved = settings.resolved(records_format=file_format != "text")
    byte_range = span if kind == "bytes" else None
    if file_format == "text":
        text_lines = (line for _, line in lines.read_lines(
            source, compression, stats, byte_range=byte_range, name=part,
            boundary="blank_line" if resolved.documents == "blank_lines" else "newline"))
        if resolved.documents == "blank_lines":
            return documents.blank_line_documents(
                text_lines, documents.sentence_cutter(resolved), stats)
        return _record_documents(((line, None) for line in text_lines), part, resolved, stats)
    if file_format == "parquet":
        found = records.parquet_records(source, resolved, stats, name=part,
                                        row_groups=span if kind == "row_groups" else None)
    elif file_format == "arrow":
        found = records.arrow_records(source, resolved, stats)
    else:
        found = records.jsonl_records(source, compression, resolved, stats,
                                      byte_range=byte_range, name=part)
    if resolved.documents == "blank_lines":
        # The records' texts read as one text (a record's end is a line's end); documents may
        # span records, so data.language applies to every line.
        return documents.blank_line_documents(
            (line for text, _ in found for line in text.split("\n")),
            documents.sentence_cutter(resolved), stats)
    return _record_documents(found, part, resolved, stats)


def _record_documents(found: Iterator[records.Record], part: str, settings: ReadSettings,
                      stats: CorpusStats) -> Iterator[list[str]]:
    """One document a record, its sentences cut in the record's language (data.language_column)
    or data.language."""
    default_cut = documents.sentence_cutter(settings)
    cutters: dict[str, documents.SentenceCutter] = {}
    for text, language in found:
        cut = default_cut
        if settings.language_column and settings.sentences == "segmenter":
            if isinstance(language, str) and language in cutters:
                cut = cutters[language]
            elif isinstance(language, str) and documents.is_language(language):
                cut = cutters[language] = documents.sentence_cutter(settings, language)
            else:
                stats.problem("unknown_languages", f"{part} language {language!r}")
        yield from documents.record_documents(text, cut, stats)


def sample_sentences(source_list: list[str], num_sentences: int, seed: int,
                     stats: CorpusStats | None = None,
                     settings: ReadSettings = SPEC_1_2) -> Iterator[str]:
    """At most `num_sentences` sentences of `source_list` (from `sources.list_sources`), read
    as `settings` say, without reading the rest: the sources are visited in an order drawn from
    `seed`, each from its start, and reading stops once `num_sentences` are yielded. The same
    sources, settings and seed give the same sentences; `stats.sources` counts the sources
    opened.

    A corpus of many files gives a sample of whole files (a sentence budget of ~10M reads ~1 GB
    of a TB corpus); a single file gives its first `num_sentences` sentences.
    """
    order = np.random.default_rng(seed).permutation(len(source_list))
    remaining = num_sentences
    for index in order.tolist():
        for document in read_documents(source_list[index], settings, stats):
            for sentence in document[:remaining]:
                yield sentence
            remaining -= min(len(document), remaining)
            if not remaining:
                return
