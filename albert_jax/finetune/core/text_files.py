"""A user's text file, local or in a bucket (gs://), opened as the builtin `open` would.

epath opens gs:// files through fsspec, whose text mode takes the locale's encoding whatever
`encoding=` says and has no `newline=`; so the file is opened in binary through epath and
decoded here, the same way on every filesystem (locally this is exactly the builtin `open`).
"""
from __future__ import annotations

import io
import os

from etils import epath


def open_text(path: str | os.PathLike, mode: str = "r", *, encoding: str = "utf-8",
              newline: str | None = None) -> io.TextIOWrapper:
    """`open(path, mode, encoding=encoding, newline=newline)` for a local or gs:// path; mode
    "r" or "w". A gs:// file written is uploaded when it is closed."""
    if mode not in ("r", "w"):
        raise ValueError(f"open_text mode {mode!r}: use 'r' or 'w'")
    return io.TextIOWrapper(epath.Path(path).open(mode + "b"), encoding=encoding,
                            newline=newline)
