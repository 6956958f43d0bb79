"""Writing a file, local or gs://, so that no reader, and no run killed half way, ever sees half
of it: a whole file replaced at once (`write_atomically`), or records added at its end (`append`).

Cloud Storage has no rename and no append. A single object upload is atomic (readers see the
old object or the new one), so `write_atomically` uploads in one go. `append` uploads the new
bytes as a small object and composes it onto the end of the file (Cloud Storage's compose: the
file's old bytes are not read or sent again), so a file written a line at a time for a whole run
costs what its new lines weigh, and holds every line up to the last `append` if the writer is
killed. Each compose names the generation of the file it extends: a retry of a compose that
went through, or a second writer, can never add the bytes twice.
"""
from __future__ import annotations

import functools
import os
import zlib
from typing import Any

from etils import epath
from google.api_core import exceptions

# Every call of ours to Cloud Storage (appends here, the workdir lock) retries a refused
# connection, a timeout, 429 and 5xx for up to this long, with exponential backoff from 1 s to
# 30 s: an outage shorter than that costs a pause, not the run. (gcsfs, behind epath, retries
# for about 30 s; tensorstore, behind Orbax, for minutes.)
RETRY_SECONDS = 120
RETRY_MAX_DELAY_SECONDS = 30.0


def is_local(path: str | os.PathLike) -> bool:
    """Whether `path` is on this machine's file system (not gs:// or another object store)."""
    return "://" not in os.fspath(path)


def write_atomically(path: str | os.PathLike, text: str | bytes) -> None:
    """Writes `text` (a str as UTF-8, or bytes) to `path` (local or gs://), replacing it at once;
    creates the parent directory. Locally through a temporary file beside it and a rename; on
    an object store by one upload."""
    path = epath.Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.parent.mkdir(parents=True, exist_ok=True)
    if not is_local(path):
        path.write_bytes(data)  # no rename there (a copy and a delete); an upload is atomic
        return
    temporary = path.parent / f"{path.name}.tmp{os.getpid()}"
    temporary.write_bytes(data)
    temporary.replace(path)


def append(path: str | os.PathLike, text: str | bytes) -> None:
    """Adds `text` (a str as UTF-8, or bytes) at the end of `path` (created if absent).

    On gs:// the bytes go up as a part object beside the file (`_part`) and are composed onto
    it. One writer per file (the workdir lock makes sure), as the file has one part object. A
    writer killed before the compose leaves the part, which the next append replaces.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    if is_local(path):
        with open(path, "ab") as stream:
            stream.write(data)
        return
    try:
        _compose_onto(path, data)
    except exceptions.GoogleAPIError as error:
        raise OSError(f"could not add to {os.fspath(path)}: {error_reason(error)}") from error


def _compose_onto(path: str | os.PathLike, data: bytes) -> None:
    target = gcs_object(path)  # as it is now (generation, size); composed onto: a fresh Blob,
    part = gcs_object(_part(path))  # whose request names no stale checksum
    part.upload_from_string(data, retry=retry_policy())  # the same bytes again: safe to retry
    try:
        target.reload(retry=retry_policy())
        generation, size, sources = target.generation, target.size, [target, part]
    except exceptions.NotFound:
        generation, size, sources = 0, 0, [part]  # compose creates it
    try:
        gcs_object(path).compose(sources, if_generation_match=generation, retry=retry_policy())
    except exceptions.PreconditionFailed:
        # A retried compose whose first try went through: the file is already longer by `data`.
        target.reload(retry=retry_policy())
        if target.size != size + len(data):
            raise
    part.delete(retry=retry_policy())


def _part(path: str | os.PathLike) -> str:
    """`<folder>/.append-<crc32 of the name>`: the name of `path` is not in it, so no reader
    that picks files by name (TensorBoard reads every `*tfevents*` file) takes it for one."""
    folder, _, name = os.fspath(path).rpartition("/")
    return f"{folder}/.append-{zlib.crc32(name.encode()):08x}"


# ---------------------------------------------------------------------------------------------
# Cloud Storage objects, for what epath cannot say: preconditions on an object's generation.

@functools.cache
def _client() -> Any:
    from google.cloud import storage

    # No project: object calls need none. Credentials as gcsfs finds them (application default
    # credentials); none against an emulator (STORAGE_EMULATOR_HOST).
    return storage.Client(project=None)


def gcs_object(path: str | os.PathLike) -> Any:
    """The google-cloud-storage Blob of a `gs://bucket/name` path."""
    text = os.fspath(path)
    if not text.startswith("gs://"):
        raise ValueError(f"{text} is not a gs://bucket/object path")
    bucket, _, name = text[len("gs://"):].partition("/")
    return _client().bucket(bucket).blob(name)


def error_reason(error: BaseException) -> str:
    """One line for a failed file or Cloud Storage call: the server's answer without its
    request URL, or that it did not answer, or the system's reason."""
    if isinstance(error, exceptions.RetryError):
        return (f"Cloud Storage did not answer for {RETRY_SECONDS} s "
                f"({type(error.cause).__name__})")
    if isinstance(error, exceptions.GoogleAPICallError):
        return f"Cloud Storage answered {error.code} {error.message}"
    return getattr(error, "strerror", None) or str(error)


def retry_policy() -> Any:
    """Backoff from 1 s to RETRY_MAX_DELAY_SECONDS on a refused connection, a timeout, 429 and
    5xx, for up to RETRY_SECONDS: what every one of our Cloud Storage calls is given."""
    from google.cloud.storage import retry

    return retry.DEFAULT_RETRY.with_delay(
        initial=1.0, maximum=RETRY_MAX_DELAY_SECONDS).with_timeout(RETRY_SECONDS)
