"""The lines of a file (text or JSON Lines), local or gs://, decompressed by its name, streamed.

  for number, line in read_lines(path, compression, stats, byte_range=(start, stop),
                                 boundary="newline"):

A line is decoded UTF-8 (undecodable bytes replaced by U+FFFD and counted), never more than
MAX_LINE_BYTES of it in memory (a longer one is skipped and counted); a compressed file cut off
mid-stream gives its lines up to the cut, counted as truncated.

A byte range [start, stop) of an uncompressed file reads the documents that start inside it, so
that consecutive ranges tile the file with no document lost or read twice: the range starts
after the first document boundary at or after `start` (the file's start for 0) and ends at the
first one at or after `stop`. A boundary is a newline (`boundary="newline"`: a JSON line, a line
of a text file of records) or a blank line (`boundary="blank_line"`: the end of the first
whitespace-only line that starts at or after the offset).
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
from typing import IO, Iterator

import zstandard
from absl import logging
from etils import epath

from albert_jax.data.corpus.stats import CorpusStats

MAX_LINE_BYTES = 1 << 20  # Longer lines are skipped (and counted): no real sentence is 1 MB.
BOUNDARIES = ("newline", "blank_line")
_READ_BYTES = 1 << 20  # compressed bytes fed to the zstd decompressor at a time
# What a cut-off or corrupt compressed stream raises (gzip.BadGzipFile is an OSError).
_STREAM_ERRORS = (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError)


class _ZstdStream(io.RawIOBase):
    """A .zst file's decompressed bytes (every frame); EOFError where the file ends inside a
    frame (zstandard's own stream reader ends there without a word)."""

    def __init__(self, compressed: IO[bytes]):
        self._compressed = compressed
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._pending = b""
        self._started = False  # whether the current frame has had input

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = self._compressed.read(_READ_BYTES)
            if not chunk:
                if self._started and not self._frame.eof:
                    raise EOFError("the .zst file ends inside a frame")
                return 0
            while chunk:
                if self._frame.eof:  # the next frame begins
                    self._frame = self._decompressor.decompressobj()
                self._pending += self._frame.decompress(chunk)
                self._started = True
                chunk = self._frame.unused_data if self._frame.eof else b""
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


@contextlib.contextmanager
def open_stream(path: str, compression: str) -> Iterator[io.BufferedIOBase]:
    """`path`'s bytes, decompressed (`compression`: "", "gz", "zst", "xz" or "bz2"), buffered
    (readline with a size limit; seek for an uncompressed file)."""
    with epath.Path(path).open("rb") as raw:
        if compression == "gz":
            stream: io.BufferedIOBase = gzip.GzipFile(fileobj=raw)
        elif compression == "xz":
            stream = lzma.LZMAFile(raw)
        elif compression == "bz2":
            stream = bz2.BZ2File(raw)
        elif compression == "zst":
            stream = io.BufferedReader(_ZstdStream(raw))
        else:  # A bucket's file object has no readline(size): buffer it (a local file is one).
            stream = raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw)
        with stream:
            yield stream


def read_lines(path: str, compression: str, stats: CorpusStats, *,
               byte_range: tuple[int, int] | None = None, boundary: str = "newline",
               name: str | None = None) -> Iterator[tuple[int, str]]:
    """(line number from 1, decoded line with its newline) of `path`, or of the documents of
    `byte_range` of it (see the module docstring). `name` names the file in `stats`' problems."""
    name = name or path
    with open_stream(path, compression) as file:
        offset = 0
        if byte_range is not None and byte_range[0] > 0:
            file.seek(byte_range[0] - 1)
            offset = byte_range[0] - 1 + _skip_line(file)  # the first line start >= start
        lines = _bounded_lines(file, name, stats)
        if byte_range is not None and byte_range[0] > 0 and boundary == "blank_line":
            for _, line, size in lines:  # the range begins after the first blank line
                if line is not None and not line.strip():
                    if offset >= byte_range[1]:
                        return  # ... which is the end's too: no document starts in the range
                    offset += size
                    break
                offset += size
        number = 0
        for number, line, size in lines:
            line_start, offset = offset, offset + size
            if byte_range is not None and line_start >= byte_range[1] and (
                    boundary == "newline" or (line is not None and not line.strip())):
                return  # the range ends at the first boundary at or after its stop
            if line is not None:
                yield number, line


def _skip_line(file: io.BufferedIOBase) -> int:
    """Reads to the end of the current line (bounded); the bytes read."""
    skipped = 0
    while True:
        chunk = file.readline(MAX_LINE_BYTES)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def _bounded_lines(file: io.BufferedIOBase, name: str,
                   stats: CorpusStats) -> Iterator[tuple[int, str | None, int]]:
    """(line number, decoded line or None for a skipped long line, its bytes), never holding
    more than MAX_LINE_BYTES of one line in memory."""
    number = 0
    while True:
        number += 1
        try:
            line = file.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES:
                stats.problem("skipped_long_lines", f"{name} line {number}")
                size = len(line) + (0 if line.endswith(b"\n") else _skip_line(file))
                yield number, None, size
                continue
        except _STREAM_ERRORS as error:  # e.g. gzip.BadGzipFile, a .gz cut off mid-stream
            stats.problem("truncated_files", f"{name} line {number}")
            logging.warning("%s: %s; skipping the rest of this file", name, error)
            return
        if not line:
            return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            stats.problem("invalid_utf8_lines", f"{name} line {number}")
            text = line.decode("utf-8", errors="replace")
        yield number, text, len(line)
