"""The records of a Parquet, Arrow (HF `save_to_disk`) or JSON Lines file: (text, language).

  for text, language in parquet_records(path, settings, stats, row_groups=(0, 4)):

Bounded memory: Parquet is read a row group at a time, the text (and language) column only; an
Arrow file a record batch at a time; JSON Lines a line at a time (`lines.py`, compressed or
not). A file whose first record lacks `data.text_column` is a config error naming the file, the
column and the columns it has (`check_columns`); a later record without a string text (null, a
number, no such field) is skipped and counted, as are a malformed JSON line and a row group that
cannot be read.
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from etils import epath

from albert_jax.data.corpus import lines
from albert_jax.data.corpus.settings import ReadSettings
from albert_jax.data.corpus.stats import CorpusStats
from albert_jax.errors import ConfigError

Record = tuple[str, Any]  # (the text, the language column's value or None)


def check_columns(path: str, columns: list[str], settings: ReadSettings) -> None:
    """ConfigError in one line when `columns` (a file's, or its first record's fields) lacks
    data.text_column or data.language_column."""
    for key in ("text_column", "language_column"):
        column = getattr(settings, key)
        if column and column not in columns:
            raise ConfigError(f"{path} has no column {column!r} (config.data.{key}); its columns "
                              f"are {columns[:20]}: set --config.data.{key}=NAME")


def check_jsonl_columns(path: str, compression: str, settings: ReadSettings) -> None:
    """`check_columns` on the first JSON object of a JSON Lines file (none: nothing to check)."""
    for _, line in lines.read_lines(path, compression, CorpusStats()):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict):
            check_columns(path, list(record), settings)
            return


def check_arrow_columns(path: str, settings: ReadSettings) -> None:
    """`check_columns` on an Arrow stream file's schema."""
    with epath.Path(path).open("rb") as raw, pa.ipc.open_stream(raw) as reader:
        check_columns(path, reader.schema.names, settings)


def _wanted_columns(settings: ReadSettings) -> list[str]:
    return [settings.text_column] + ([settings.language_column]
                                     if settings.language_column else [])


def _table_records(table: pa.Table | pa.RecordBatch, settings: ReadSettings, where: str,
                   stats: CorpusStats) -> Iterator[Record]:
    texts = table.column(settings.text_column).to_pylist()
    languages = (table.column(settings.language_column).to_pylist() if settings.language_column
                 else [None] * len(texts))
    for row, (text, language) in enumerate(zip(texts, languages)):
        if isinstance(text, str):
            yield text, language
        else:
            stats.problem("non_text_records", f"{where} row {row}")


@contextlib.contextmanager
def open_parquet(path: str) -> Iterator[pq.ParquetFile]:
    """The Parquet file at `path`, its footer read; page checksums (where the writer made them)
    checked on every read. A local file is read by Arrow itself, one in a bucket through
    etils.epath."""
    with contextlib.ExitStack() as stack:
        source = (stack.enter_context(epath.Path(path).open("rb")) if "://" in path else path)
        yield stack.enter_context(pq.ParquetFile(source, page_checksum_verification=True))


def parquet_records(path: str, settings: ReadSettings, stats: CorpusStats, *,
                    row_groups: tuple[int, int] | None = None,
                    name: str | None = None) -> Iterator[Record]:
    """The records of row groups [start, stop) of a Parquet file (all by default)."""
    name = name or path
    with open_parquet(path) as file:
        check_columns(path, file.schema_arrow.names, settings)
        start, stop = row_groups or (0, file.num_row_groups)
        for index in range(start, stop):
            where = f"{name} row group {index}"
            try:
                table = file.read_row_group(index, columns=_wanted_columns(settings))
            except (OSError, pa.ArrowException) as error:
                stats.problem("unreadable_row_groups", f"{where} ({error})")
                continue
            yield from _table_records(table, settings, where, stats)


def arrow_records(path: str, settings: ReadSettings, stats: CorpusStats) -> Iterator[Record]:
    """The records of an Arrow stream file (a `datasets` folder's data-*.arrow), batch by batch."""
    with epath.Path(path).open("rb") as raw, pa.ipc.open_stream(raw) as reader:
        check_columns(path, reader.schema.names, settings)
        index = 0
        while True:
            where = f"{path} record batch {index}"
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (OSError, pa.ArrowException) as error:  # the rest of a stream is lost
                stats.problem("unreadable_row_groups", f"{where} ({error})")
                return
            yield from _table_records(batch.select(_wanted_columns(settings)), settings, where,
                                      stats)
            index += 1


def jsonl_records(path: str, compression: str, settings: ReadSettings, stats: CorpusStats, *,
                  byte_range: tuple[int, int] | None = None,
                  name: str | None = None) -> Iterator[Record]:
    """The records of a JSON Lines file (one JSON object a line; blank lines ignored); the
    first object of the file decides whether data.text_column is there (`check_columns`)."""
    name = name or path
    checked = byte_range is not None and byte_range[0] > 0  # the file's first range checks
    for number, line in lines.read_lines(path, compression, stats, byte_range=byte_range,
                                         name=name):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            stats.problem("malformed_json_lines", f"{name} line {number}")
            continue
        if not checked:
            check_columns(path, list(record), settings)
            checked = True
        text = record.get(settings.text_column)
        if isinstance(text, str):
            yield text, record.get(settings.language_column) if settings.language_column else None
        else:
            stats.problem("non_text_records", f"{name} line {number}")
