"""Checksums of a checkpoint's files: written inside Orbax's commit, checked before a restore;
a damaged step moved aside.

Every checkpoint step directory holds `checksums.json`:

  {"format": 1, "algorithm": "sha256",
   "files": {"state/_METADATA": {"bytes": 1774, "sha256": "9f2c..."}, ...}}

with the size and SHA-256 of every file of the step, relative to the step directory, except two
that Orbax itself rewrites when it commits the step after we hash (`_CHECKPOINT_METADATA` gets
the commit time, `commit_success.txt` at the top is the commit marker): `_CHECKPOINT_METADATA`
is checked by reading it instead.

SHA-256, not CRC32C: hashlib's SHA-256 runs at ~1.9 GB/s a core here (SHA extensions), faster
than a checkpoint is read from disk or GCS, releases the GIL (files are hashed on threads while
training goes on), needs no extra package, and `sha256sum` checks a file by hand.

When it is written (`write` is Orbax's post-finalization callback, see checkpoint.py): after
every process has written its files and Orbax has finalised them, before Orbax commits the step
(renames `<step>.orbax-checkpoint-tmp` to `<step>`, or on object stores writes
`commit_success.txt`). So the checksums are part of the atomic commit: a committed step always
has them, and a save whose checksums cannot be written (full disk) is never committed.

Checkpoints written before checksums existed have none. Orbax committed them, so they are
complete; refusing them would stop every run a user upgrades in the middle of. They stay usable,
reported as not checked. A step we wrote says so in Orbax's step metadata
(`custom_metadata[CUSTOM_METADATA_KEY]`), so deleting its `checksums.json` makes it damaged,
not old.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time
from typing import Any

from etils import epath

from albert_jax import files

MANIFEST_FILE = "checksums.json"
DAMAGED_SUBDIR = "damaged"
ORBAX_METADATA_FILE = "_CHECKPOINT_METADATA"
# Written by Orbax after the checksums (see above): not in them.
_REWRITTEN_AT_COMMIT = (ORBAX_METADATA_FILE, "commit_success.txt")
CUSTOM_METADATA_KEY = "albert_jax_checksums"
CUSTOM_METADATA = {CUSTOM_METADATA_KEY: MANIFEST_FILE}
_FORMAT = 1
_CHUNK_BYTES = 4 << 20
_HASH_THREADS = 8


def _sha256(path: epath.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            digest.update(chunk)  # releases the GIL for large chunks
    return digest.hexdigest()


def all_files(directory: epath.Path) -> list[epath.Path]:
    """Every file under `directory`, recursively (epath has no recursive glob: on GCS it would
    be one request per object)."""
    found = []
    for path in directory.iterdir():
        found.extend(all_files(path) if path.is_dir() else [path])
    return found


def _files(step_directory: epath.Path) -> list[str]:
    """Every file of the step, relative to it, except the manifest and the files Orbax
    rewrites at commit."""
    names = [path.relative_to(step_directory).as_posix() for path in all_files(step_directory)]
    return sorted(name for name in names
                  if name != MANIFEST_FILE and name not in _REWRITTEN_AT_COMMIT)


def _size(path: epath.Path) -> int:
    # Not `stat()`: epath's local stat looks the owner up in the user database, which fails for
    # a uid without an entry (containers).
    with path.open("rb") as stream:
        return stream.seek(0, 2)


def _hashes(step_directory: epath.Path, names: list[str]) -> list[str]:
    with concurrent.futures.ThreadPoolExecutor(_HASH_THREADS) as pool:
        return list(pool.map(lambda name: _sha256(step_directory / name), names))


def write(step_directory: str | epath.Path) -> None:
    """Writes `checksums.json` for every file of `step_directory`, last, atomically."""
    step_directory = epath.Path(step_directory)
    names = _files(step_directory)
    hashes = _hashes(step_directory, names)
    manifest = {"format": _FORMAT, "algorithm": "sha256", "files": {
        name: {"bytes": _size(step_directory / name), "sha256": digest}
        for name, digest in zip(names, hashes)}}
    files.write_atomically(step_directory / MANIFEST_FILE, json.dumps(manifest, indent=1))


def _orbax_metadata(step_directory: epath.Path) -> dict[str, Any] | None:
    try:
        metadata = json.loads((step_directory / ORBAX_METADATA_FILE).read_text())
    except (OSError, ValueError):  # missing, unreadable, not JSON (truncated, overwritten)
        return None
    return metadata if isinstance(metadata, dict) else None


def has_checksums(step_directory: str | epath.Path) -> bool:
    """Whether the step was written with checksums (False: written before they existed)."""
    metadata = _orbax_metadata(epath.Path(step_directory))
    return metadata is None or CUSTOM_METADATA_KEY in (metadata.get("custom_metadata") or {})


def problem(step_directory: str | epath.Path) -> str | None:
    """Why the checkpoint in `step_directory` is damaged, naming the file; None if intact.

    Sizes are compared before anything is hashed, so a truncated or missing file is found
    without reading the others. A step written before checksums is intact if Orbax's
    metadata reads (Orbax committed it; its files cannot be checked).
    """
    step_directory = epath.Path(step_directory)
    if not step_directory.is_dir():
        return "the step directory is missing"
    if _orbax_metadata(step_directory) is None:
        return f"{ORBAX_METADATA_FILE}: missing or unreadable (Orbax's record of the step)"
    if not has_checksums(step_directory):
        return None
    try:
        manifest = json.loads((step_directory / MANIFEST_FILE).read_text())
        expected = {name: (int(entry["bytes"]), str(entry["sha256"]))
                    for name, entry in manifest["files"].items()}
    except FileNotFoundError:
        return f"{MANIFEST_FILE}: missing (the save did not finish, or it was deleted)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{MANIFEST_FILE}: unreadable ({type(error).__name__}: {error})"
    for name, (size, _) in sorted(expected.items()):
        path = step_directory / name
        if not path.exists():
            return f"{name}: missing"
        actual = _size(path)
        if actual < size:
            return f"{name}: truncated ({actual} of {size} bytes)"
        if actual != size:
            return f"{name}: {actual} bytes, expected {size}"
    names = sorted(expected)
    for name, digest in zip(names, _hashes(step_directory, names)):
        if digest != expected[name][1]:
            return f"{name}: checksum mismatch (the bytes changed after the save)"
    return None


def move_aside(step_directory: str | epath.Path) -> epath.Path:
    """Moves a damaged step to `<its directory>/damaged/<step>-<UTC time>`: kept for a post
    mortem, never deleted, and no longer a step to Orbax. Returns where it went."""
    source = epath.Path(step_directory)
    target = (source.parent / DAMAGED_SUBDIR /
              f"{source.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    target.parent.mkdir(parents=True, exist_ok=True)
    if "://" not in os.fspath(source):
        source.rename(target)  # atomic
        return target
    # Object stores have no directory rename: copy, then remove Orbax's commit marker first (no
    # longer a step even if the removal stops half way), then the rest.
    for path in all_files(source):
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        path.copy(destination)
    (source / "commit_success.txt").unlink(missing_ok=True)
    source.rmtree()
    return target
