"""Writing a file so that no reader, and no run killed half way, ever sees half of it."""
from __future__ import annotations

import os

from etils import epath


def write_atomically(path: str | os.PathLike, text: str | bytes) -> None:
    """Writes `text` (a str as UTF-8, or bytes) to `path` (local or gs://) through a temporary
    file beside it and a rename; creates the parent directory."""
    path = epath.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f"{path.name}.tmp{os.getpid()}"
    if isinstance(text, bytes):
        temporary.write_bytes(text)
    else:
        temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
