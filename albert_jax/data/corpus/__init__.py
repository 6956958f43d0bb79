"""Documents from corpora as they are published: text, JSON Lines and Parquet files (each
optionally .gz, .zst, .xz or .bz2), HuggingFace `datasets` folders and hub-cache snapshots, TFDS
text datasets, and the built-in demo corpus.

A document is a `list[str]` of its sentences (non-empty, stripped), as SPEC 1.2 has them.

  settings = ReadSettings.from_config(config.data)          # data.text_column, documents, ...
  for document in iter_documents(config.data.corpus, settings, stats):
  parts = plan_parts(sized_sources(corpus), settings, unit_bytes)   # what build units read
  for document in read_documents(part, settings, stats):
  groups = corpus_groups(config.data.corpus, settings)     # a mixture's groups (`mixture.py`)

One module a job: `sources.py` (a corpus spec -> files, HF, TFDS, demo), `settings.py` (the
reading keys), `lines.py` (a file's lines, decompressed, byte ranges), `records.py` (Parquet,
Arrow, JSON Lines records), `tfds_source.py`, `demo.py`, `documents.py` (lines and records ->
documents of sentences), `segmenter.py` (paragraphs cut into sentences in any language), `parts.py` (the units a format offers), `reading.py` (a part's
documents), `stats.py` (what reading saw: bad input is counted, never a crash), `mixture.py` (a
dict of groups, their sizes and sampling shares).
"""
from albert_jax.data.corpus.demo import demo_documents
from albert_jax.data.corpus.mixture import (
    MIXTURE_ALPHA,
    Group,
    TextSize,
    check_alpha,
    corpus_groups,
    count_groups,
    count_in_parallel,
    count_sources,
    count_text,
    flat_sources,
    is_mixture,
    mixture_identity,
    sample_mixture,
    sampling_shares,
    sum_by_group,
)
from albert_jax.data.corpus.parts import cut_into_byte_ranges, part_name, plan_parts
from albert_jax.data.corpus.reading import (
    iter_documents,
    read_documents,
    sample_sentences,
    uses_segmenter,
)
from albert_jax.data.corpus.settings import ReadSettings
from albert_jax.data.corpus.sources import (
    DEMO,
    TFDS_PREFIX,
    describe,
    is_file_source,
    list_sources,
    sized_sources,
    source_size,
)
from albert_jax.data.corpus.stats import CorpusStats

__all__ = ["CorpusStats", "DEMO", "Group", "MIXTURE_ALPHA", "ReadSettings", "TFDS_PREFIX",
           "TextSize", "check_alpha", "corpus_groups", "count_groups", "count_in_parallel",
           "count_sources", "count_text", "cut_into_byte_ranges", "demo_documents", "describe",
           "flat_sources", "is_file_source", "is_mixture", "iter_documents", "list_sources",
           "mixture_identity", "part_name", "plan_parts", "read_documents", "sample_mixture",
           "sample_sentences", "sampling_shares", "sized_sources", "source_size", "sum_by_group",
           "uses_segmenter"]
