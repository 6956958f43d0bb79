"""Writing a file so that no reader, and no run killed half way, ever sees half of it."""
from __future__ import annotations

import os

from etils import epath


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Writes `text` (UTF-8) to `path` (local or gs://) through a temporary file beside it and a
    rename; creates the parent directory."""
    path = epath.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f"{path.name}.tmp{os.getpid()}"
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
