"""One run per workdir: `<workdir>/run.lock` (a `file_lock`), held for the life of the run.

Taken before anything else is written to the workdir; on a multi-host job only process 0
takes it. How a lock left by a killed run is taken over: `albert_jax/file_lock.py`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import jax
import numpy as np
from etils import epath
from google.api_core import exceptions as google_exceptions
from jax.experimental import multihost_utils

from albert_jax import file_lock, files
from albert_jax.train import workdir as workdir_names


class WorkdirLocked(file_lock.LockHeld):
    """Another run holds the workdir's lock."""


class WorkdirNotWritable(OSError):
    """The workdir cannot be created or written."""


def acquire(workdir: str | os.PathLike) -> file_lock.FileLock:
    """Takes `<workdir>/run.lock` (creating the workdir); WorkdirLocked if a live run holds it,
    WorkdirNotWritable if the workdir cannot be written."""
    workdir = epath.Path(workdir)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        return file_lock.acquire(
            workdir / workdir_names.LOCK_FILE, error=WorkdirLocked,
            in_use=f"workdir {workdir} is in use",
            advice=f"Wait for that run to end or stop it, or use another --workdir; if no run "
                   f"uses this workdir, delete {workdir / workdir_names.LOCK_FILE}")
    except (OSError, google_exceptions.GoogleAPIError) as error:
        raise WorkdirNotWritable(
            f"cannot write in workdir {workdir} ({files.error_reason(error)}): a run keeps its config, "
            "metrics and checkpoints there; give a writable --workdir") from error


@contextlib.contextmanager
def hold(workdir: str | os.PathLike) -> Iterator[None]:
    """The workdir locked for the `with` block (process 0 takes it; on a multi-host job every
    process raises when process 0 could not)."""
    lock, refusal = None, None
    if jax.process_index() == 0:
        try:
            lock = acquire(workdir)
        except (WorkdirLocked, WorkdirNotWritable) as error:
            refusal = error
    if jax.process_count() > 1:
        taken = int(multihost_utils.broadcast_one_to_all(np.int32(refusal is None)))
        if not taken and refusal is None:
            refusal = WorkdirLocked(f"process 0 could not take the lock of workdir {workdir}; "
                                    "its log says why")
    if refusal is not None:
        raise refusal
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
