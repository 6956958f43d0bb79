"""The parts a build unit reads: a whole source, or the piece of one that a format lets a build
read on its own. Parts are a function of the corpus and `data.unit_bytes` only (never of the
workers), so every runner builds the same units.

  "corpus/a.txt"                         a whole file (or the demo corpus, a TFDS split)
  "corpus/big.txt#bytes=0-33554432"      the documents starting in that byte range of an
                                         uncompressed text or JSON Lines file (`lines.py`)
  "corpus/big.parquet#row_groups=0-4"    row groups [0, 4) of a Parquet file
  "tfds:wikipedia/20230601.en:train[0:91234]"   one shard file's examples of a TFDS split

A file of at most `unit_bytes` is whole; so is a compressed one (a stream cannot be entered in
the middle: cut it first, docs/launching.md) and an Arrow file. A larger uncompressed text or
JSON Lines file is cut into ranges of `unit_bytes`; a larger Parquet file into ranges of row
groups of at least `unit_bytes` (by their compressed size) each.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import os
import re

from albert_jax.data.corpus import records, sources, tfds_source
from albert_jax.data.corpus.settings import ReadSettings

_PART = re.compile(r"^(?P<source>.+)#(?P<kind>bytes|row_groups)=(?P<start>\d+)-(?P<stop>\d+)$")
_IO_THREADS = 32  # Parquet footers read at once (requests, in a bucket)


def parse(part: str) -> tuple[str, str, tuple[int, int] | None]:
    """(source, kind "bytes" | "row_groups" | "", (start, stop) or None) of a part."""
    match = _PART.match(part)
    if match is None:
        return part, "", None
    return match["source"], match["kind"], (int(match["start"]), int(match["stop"]))


def plan_parts(sized: list[tuple[str, int | None]], settings: ReadSettings,
               unit_bytes: int) -> list[tuple[str, int | None]]:
    """The parts of `sized` (`sources.sized_sources`), each with its bytes (None: the demo
    corpus, TFDS): see the module docstring. Reads every Parquet and Arrow file's columns
    (its footer, its schema) and every JSON Lines file's first line: a missing
    data.text_column is one ConfigError naming the file, before anything is built."""
    with concurrent.futures.ThreadPoolExecutor(_IO_THREADS) as pool:
        planned = list(pool.map(_source_parts, [source for source, _ in sized],
                                [size for _, size in sized], itertools.repeat(settings),
                                itertools.repeat(unit_bytes)))
    return [part for parts in planned for part in parts]


def _source_parts(source: str, size: int | None, settings: ReadSettings,
                  unit_bytes: int) -> list[tuple[str, int | None]]:
    if size is None:
        return ([(part, None) for part in tfds_source.shard_parts(source)]
                if source.startswith(sources.TFDS_PREFIX) else [(source, None)])
    file_format, compression = sources.file_format(source)
    if file_format == "parquet":
        return _parquet_parts(source, size, settings, unit_bytes)
    if file_format == "arrow":
        records.check_arrow_columns(source, settings)
    elif file_format == "jsonl":
        records.check_jsonl_columns(source, compression, settings)
    if not cut_into_byte_ranges(source, size, unit_bytes):
        return [(source, size)]
    return [(f"{source}#bytes={start}-{min(start + unit_bytes, size)}",
             min(start + unit_bytes, size) - start) for start in range(0, size, unit_bytes)]


def cut_into_byte_ranges(source: str, size: int | None, unit_bytes: int) -> bool:
    """Whether a file is read as several byte ranges: an uncompressed text or JSON Lines file
    larger than `unit_bytes` (a compressed stream cannot be entered in its middle)."""
    if size is None:
        return False
    file_format, compression = sources.file_format(source)
    return file_format in ("text", "jsonl") and not compression and size > unit_bytes


def _parquet_parts(source: str, size: int, settings: ReadSettings,
                   unit_bytes: int) -> list[tuple[str, int | None]]:
    with records.open_parquet(source) as file:
        records.check_columns(source, file.schema_arrow.names, settings)
        metadata = file.metadata
        if size <= unit_bytes or metadata.num_row_groups <= 1:
            return [(source, size)]
        group_bytes = [sum(metadata.row_group(index).column(column).total_compressed_size
                           for column in range(metadata.num_columns))
                       for index in range(metadata.num_row_groups)]
    parts: list[tuple[str, int | None]] = []
    start = total = 0
    for index, group in enumerate(group_bytes):
        total += group
        if total >= unit_bytes or index == len(group_bytes) - 1:
            parts.append((f"{source}#row_groups={start}-{index + 1}", total))
            start, total = index + 1, 0
    return parts


def part_name(part: str) -> str:
    """A part's name in a build's hold-out draw and plan: its file's name (and range)."""
    return os.path.basename(part.rstrip("/"))
