"""One writer per folder: a lock file held for the life of a run or a data build.

  lock = file_lock.acquire(path, in_use="workdir W is in use", advice="Wait ...")  # or raises
  ...
  lock.release()

`train/workdir_lock.py` holds `<workdir>/run.lock` for a run; `data/building/builder.py` holds
`<dataset folder>/build.lock` for a data build. The lock file records who holds it: {"pid",
"host", "boot_id", "process_start", "started", "command", "token"}. It is taken before anything else is written to the folder and removed when
the holder ends (also on an exception); a SIGKILL or a crash leaves it, and the next one takes it
over when it can tell the holder is gone:

  - same host (same hostname and boot id): its pid is not running, or now names a process that
    started at another time (the pid was reused);
  - same hostname, other boot id: the machine restarted since;
  - another host: the holder refreshes the file's modification time every HEARTBEAT_SECONDS, so
    a lock untouched for STALE_AFTER_SECONDS belongs to a holder that is gone (a preempted pod
    restarted on new machines resumes after that wait).

Otherwise a second holder is refused with a message naming the holder's pid and host.

Atomicity: of two runs started together exactly one gets the lock, and two runs taking over the
same stale lock cannot both win. Locally the record is written whole and hard-linked into place
(where links are missing: created with O_CREAT | O_EXCL), and a stale lock is renamed aside
(atomic) before it is replaced. On gs:// every write names the object's
generation (Cloud Storage preconditions): the lock is created only if absent (generation 0),
refreshed and released only if it is still the generation this run wrote, and a stale lock is
deleted only if it is still the generation that was judged stale.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, NamedTuple

from absl import logging
from etils import epath
from google.api_core import exceptions as google_exceptions

from albert_jax import files

# Five missed heartbeats make a lock stale: shorter than recreating a preempted TPU VM and
# installing the project on it (`launch.tpu up`), so the rerun there takes the lock over at once.
HEARTBEAT_SECONDS = 30
STALE_AFTER_SECONDS = 150
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


class LockHeld(RuntimeError):
    """Another process holds the lock."""


def _boot_id() -> str:
    try:
        return epath.Path(_BOOT_ID_FILE).read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, Linux), to tell a reused pid."""
    try:
        stat = epath.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after "pid (comm)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _record() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "boot_id": _boot_id(),
            "process_start": _process_start(pid),
            "started": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC"),
            "command": " ".join(sys.argv), "token": uuid.uuid4().hex}


class _Held(NamedTuple):
    """A lock file as read: its text, its record ({} if it does not parse: a hand-made file,
    which only its age can free), seconds since its last refresh, and on gs:// its generation."""
    text: str
    record: dict[str, Any]
    age_seconds: float
    generation: int | None


def _read(path: epath.Path) -> _Held | None:
    """The lock file, or None if there is none."""
    if files.is_local(path):
        try:
            text, modified, generation = path.read_text(), os.stat(path).st_mtime, None
        except FileNotFoundError:
            return None
    else:
        blob = files.gcs_object(path)
        try:
            blob.reload(retry=files.retry_policy())
            text = blob.download_as_text(if_generation_match=blob.generation,
                                         retry=files.retry_policy())
        except (google_exceptions.NotFound, google_exceptions.PreconditionFailed):
            return None  # released, or replaced in between: the caller looks again
        modified, generation = blob.updated.timestamp(), blob.generation
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    return _Held(text, record if isinstance(record, dict) else {}, time.time() - modified,
                 generation)


def _stale(record: dict[str, Any], age_seconds: float) -> str | None:
    """Why the holder of a lock is gone, or None if it may be running."""
    if record.get("host") == socket.gethostname():
        if record.get("boot_id") != _boot_id():
            return "its host restarted since"
        pid = record.get("pid")
        if not isinstance(pid, int) or pid == os.getpid() or not _alive(pid):
            return f"its process {pid} is not running"
        if record.get("process_start") != _process_start(pid):
            return f"pid {pid} is another process now"
        return None
    if age_seconds > STALE_AFTER_SECONDS:
        return (f"it was last refreshed {age_seconds:.0f} s ago (a running run refreshes it "
                f"every {HEARTBEAT_SECONDS} s)")
    return None


def _refused(path: epath.Path, record: dict[str, Any], in_use: str, advice: str,
             error: type[LockHeld]) -> LockHeld:
    return error(
        f"{in_use}: its lock {path} is held by pid {record.get('pid', '?')} on host "
        f"{record.get('host', '?')} since {record.get('started', '?')} (the file names its "
        f"command). {advice}")


class FileLock:
    """A held lock: refreshes its file every HEARTBEAT_SECONDS until `release`. `generation`:
    on gs://, the generation of the lock object this run wrote last."""

    def __init__(self, path: epath.Path, record: dict[str, Any], generation: int | None) -> None:
        self.path = path
        self.record = record
        self.generation = generation
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._refresh, name="file_lock",
                                           daemon=True)
        self._heartbeat.start()

    def _is_ours(self) -> bool:
        held = _read(self.path)
        return held is not None and held.record.get("token") == self.record["token"]

    def _refresh(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                if files.is_local(self.path):
                    os.utime(self.path)
                    continue
                blob = files.gcs_object(self.path)
                blob.upload_from_string(json.dumps(self.record),
                                        if_generation_match=self.generation,
                                        retry=files.retry_policy())
                self.generation = blob.generation
            except google_exceptions.PreconditionFailed:
                logging.warning("the lock %s is no longer this run's: another run took "
                                "it over; stop one of them", self.path)
                return
            except (OSError, google_exceptions.GoogleAPIError) as error:
                # A full disk or an outage must not stop training; the next try may work.
                logging.warning("could not refresh the lock %s: %s", self.path,
                                files.error_reason(error))

    def release(self) -> None:
        """Stops the refresh and removes the lock file, if it is still ours. A lock that cannot
        be removed (an outage) is left with a warning: the next run takes it over."""
        self._stop.set()
        self._heartbeat.join()
        try:
            if files.is_local(self.path):
                if self._is_ours():
                    self.path.unlink(missing_ok=True)
            else:
                files.gcs_object(self.path).delete(if_generation_match=self.generation,
                                                   retry=files.retry_policy())
        except (google_exceptions.NotFound, google_exceptions.PreconditionFailed):
            pass  # taken over by another run: its lock now
        except (OSError, google_exceptions.GoogleAPIError) as error:
            logging.warning("could not remove the lock %s (%s); the next holder takes it "
                            "over", self.path, files.error_reason(error))


def _create_local(path: epath.Path, text: str) -> bool:
    """Writes the local lock `path` holding `text` if there is none; False if there is one.

    The record is written whole beside the lock and hard-linked into place (atomic, refused if
    the lock exists), so a second starter never reads a lock that is created but not yet
    written. Where the filesystem has no hard links (gcsfuse, some network mounts) the lock is
    created with O_EXCL and written after, as the next best.
    """
    draft = path.with_name(f"{path.name}.new-{os.getpid()}-{threading.get_ident()}")
    try:
        draft.write_text(text)
        try:
            os.link(draft, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass  # no hard links here
    finally:
        draft.unlink(missing_ok=True)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(descriptor, "w") as stream:
            stream.write(text)
    except OSError:
        os.unlink(path)  # an empty lock (full disk) would hold the workdir for nobody
        raise
    return True


def _create(path: epath.Path, record: dict[str, Any]) -> FileLock | None:
    """Writes the lock and holds it if there is none; None if there is one."""
    text = json.dumps(record)
    if files.is_local(path):
        return FileLock(path, record, None) if _create_local(path, text) else None
    blob = files.gcs_object(path)
    try:
        blob.upload_from_string(text, if_generation_match=0, retry=files.retry_policy())
    except google_exceptions.PreconditionFailed:
        # Held by another run, or a retried upload whose first try went through: ours then.
        held = _read(path)
        if held is None or held.record.get("token") != record["token"]:
            return None
        return FileLock(path, record, held.generation)
    return FileLock(path, record, blob.generation)


def _remove_stale(path: epath.Path, stale: _Held) -> None:
    """Removes the stale lock `stale` as it was read, and nothing else."""
    if not files.is_local(path):
        try:  # of two runs taking over, one deletes it, the other finds another generation
            files.gcs_object(path).delete(if_generation_match=stale.generation,
                                          retry=files.retry_policy())
        except (google_exceptions.NotFound, google_exceptions.PreconditionFailed):
            pass
        return
    aside = path.with_name(f"{path.name}.stale-{os.getpid()}")
    try:
        os.rename(path, aside)  # of two runs taking over, one renames it, the other finds none
    except FileNotFoundError:
        return
    if aside.read_text() != stale.text:  # a new run's lock, created since it was read: put back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink()


def acquire(path: str | os.PathLike, *, in_use: str, advice: str,
            error: type[LockHeld] = LockHeld) -> FileLock:
    """Takes the lock file `path` (its folder must exist); if a live process holds it, raises
    `error`: `in_use` (what is refused), the holder, then `advice` (what to do). OSError or
    GoogleAPIError where the folder cannot be written."""
    path = epath.Path(path)
    record = _record()
    for _ in range(3):
        lock = _create(path, record)
        if lock is not None:
            return lock
        held = _read(path)
        if held is None:
            continue  # released in between
        reason = _stale(held.record, held.age_seconds)
        if reason is None:
            raise _refused(path, held.record, in_use, advice, error)
        logging.warning("taking over the lock %s of pid %s on host %s: %s", path,
                        held.record.get("pid", "?"), held.record.get("host", "?"), reason)
        _remove_stale(path, held)
    raise error(f"could not take the lock {path}: other processes are starting on this folder "
                "at the same moment")
