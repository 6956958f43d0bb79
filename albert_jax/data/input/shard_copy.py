"""Pretraining shards in a bucket, read by training: two ways, chosen by `config.data.dir`.

(a) The bucket mounted with gcsfuse: data.dir is a path under the mount point (e.g.
    /mnt/albert/data), a local folder to the pipeline. Nothing here runs: every host reads its
    rows of every global batch from whichever shard holds them, exactly as from a local disk,
    and the batches are those of a local run for any number of hosts. `python -m launch.tpu
    setup --gcsfuse=BUCKET:/mnt/albert` mounts it on every worker. Each read goes through the
    mount (over the network unless gcsfuse's file cache is on).
(b) data.dir=gs://...: ArrayRecord reads only local files (through POSIX file descriptors; its
    open-source build has no GCS), so before the first batch each host copies what it reads to
    data.local_dir (default ~/.cache/albert_jax/data, on the VM's disk and kept across restarts
    of a job there; not /tmp, which may be RAM): `copy_host_part` copies its own part of the
    train split, shards {j : j % n == i} for host i of n (`host_shards`), and the whole eval
    split (small; every host evaluates on it as in (a)). The pipeline then shuffles and batches
    only the host's own examples (pipeline.py `make_host_part_dataset`): the global batch is
    the hosts' batches together, and the order depends on the number of hosts (one host reads
    the whole split as from local disk, with the same batches).
    Each copy is checked against the bucket's object metadata: its size and its CRC32C (GCS
    gives one for every object; MD5 where a store gives only that). A shard already there with
    the right size and checksum is kept (`<shard>.verified` records the check, so a file not
    written since is not read again); a copy is written to `<shard>.partial<process index>`,
    resumed from its end after an interruption, and renamed when it checks out; a local file
    of the wrong size or checksum is copied again.
    It needs at least as many train shards as hosts, and local disk for the host's part
    (`local_bytes_per_host`; `albert-jax plan` prints it); where either is missing, the error
    says what to do, (a) among it.
"""
from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import hashlib
import os
import shutil
import time
from typing import Callable, Iterable

import fsspec
import google_crc32c
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from albert_jax import files
from albert_jax.errors import ConfigError

_CHUNK_BYTES = 8 << 20
_COPY_THREADS = 4  # shards copied at once: one stream from a bucket is far below a VM's network
_GCSFUSE_HINT = ("or mount the bucket with gcsfuse (python -m launch.tpu setup "
                 "--gcsfuse=BUCKET:/mnt/PATH) and set data.dir to the path under the mount")


def is_bucket(path: str) -> bool:
    """Whether `path` is in a bucket (gs://...), where ArrayRecord cannot read."""
    return "://" in os.fspath(path)


def local_dataset_dir(dataset_dir: str, local_dir: str) -> str:
    """Where a host keeps its copy of `dataset_dir` (`<data.dir>/albert_pretraining/<name>/
    <version>`): the same last three folders under `local_dir` (~ expanded)."""
    return os.path.join(os.path.expanduser(local_dir), *dataset_dir.rstrip("/").split("/")[-3:])


def host_shards(num_shards: int, process_index: int, process_count: int,
                dataset_dir: str) -> list[int]:
    """The train shards host `process_index` of `process_count` reads: {j : j % n == i}."""
    if num_shards < process_count:
        raise ConfigError(
            f"dataset {dataset_dir} has {num_shards} train shards for {process_count} hosts, and "
            f"with data.dir in a bucket each host reads shards of its own: rebuild it with a "
            f"smaller data.shard_bytes (more shards), {_GCSFUSE_HINT}")
    return list(range(process_index, num_shards, process_count))


@dataclasses.dataclass(frozen=True)
class _Object:
    """A file in the bucket: its size and checksum (from the object metadata)."""
    size: int
    checksum: tuple[str, str] | None  # ("crc32c" | "md5", base64 of the digest)


def _bucket_objects(directory: str) -> dict[str, _Object]:
    """{file name: _Object} of the files in bucket folder `directory` (one listing call)."""
    filesystem, path = fsspec.core.url_to_fs(directory)
    filesystem.invalidate_cache(path)  # a listing from earlier in this process may be stale
    try:
        entries = filesystem.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    objects = {}
    for entry in entries:
        if entry.get("type") == "directory":
            continue
        checksum = next(((kind, entry[key]) for kind, key in (("crc32c", "crc32c"),
                                                              ("md5", "md5Hash"))
                         if entry.get(key)), None)
        objects[entry["name"].rstrip("/").rsplit("/", 1)[-1]] = _Object(int(entry["size"]),
                                                                         checksum)
    return objects


def _hasher(kind: str):
    return google_crc32c.Checksum() if kind == "crc32c" else hashlib.md5()


def _file_checksum(path: str, kind: str) -> str:
    hasher = _hasher(kind)
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            hasher.update(chunk)
    return base64.b64encode(hasher.digest()).decode()


def _stamp(path: str, expected: _Object) -> str:
    """What `<path>.verified` holds once `path` checked out against `expected`: the file's size
    and modification time with the checksum, so a later start (or evaluation) need not read the
    whole file again unless it was written since."""
    status = os.stat(path)
    return f"{status.st_size} {status.st_mtime_ns} {expected.checksum}\n"


def _is_intact(path: str, expected: _Object) -> bool:
    """Whether the local file `path` has `expected`'s size and checksum."""
    if not os.path.isfile(path) or os.path.getsize(path) != expected.size:
        return False
    stamp_path = f"{path}.verified"
    if os.path.exists(stamp_path):
        with open(stamp_path) as stamp:
            if stamp.read() == _stamp(path, expected):
                return True
    if (expected.checksum is not None
            and _file_checksum(path, expected.checksum[0]) != expected.checksum[1]):
        return False
    files.write_atomically(stamp_path, _stamp(path, expected))
    return True


def _copy_shard(source: str, target: str, expected: _Object, temporary: str) -> None:
    """Copies bucket file `source` to local `target` through `temporary`, resuming from what
    `temporary` already holds; checks size and checksum before the rename."""
    for attempt in range(2):  # a resumed copy that fails its check is redone once from zero
        done = os.path.getsize(temporary) if os.path.exists(temporary) else 0
        if done > expected.size or attempt:
            done = 0
        hasher = _hasher(expected.checksum[0]) if expected.checksum else None
        with open(temporary, "r+b" if done else "wb") as local:
            while hasher is not None and local.tell() < done:  # what an earlier try copied
                hasher.update(local.read(min(_CHUNK_BYTES, done - local.tell())))
            local.seek(done)
            with epath.Path(source).open("rb") as remote:
                remote.seek(done)
                while chunk := remote.read(_CHUNK_BYTES):
                    local.write(chunk)
                    if hasher is not None:
                        hasher.update(chunk)
        if os.path.getsize(temporary) == expected.size and (
                hasher is None or expected.checksum is None  # (a hasher only with a checksum)
                or base64.b64encode(hasher.digest()).decode() == expected.checksum[1]):
            os.replace(temporary, target)
            files.write_atomically(f"{target}.verified", _stamp(target, expected))
            return
        logging.warning("the copy of %s differs from the bucket's (size or checksum)%s", source,
                        "" if attempt else ": copying it again from the start")
    os.remove(temporary)
    raise OSError(f"copying {source} to {target} twice gave a file other than the bucket's (size "
                  f"or checksum): the object changed during the copy, or downloads are corrupt")


def _split_shards(info: tfds.core.DatasetInfo, split: str) -> list[tuple[str, int]]:
    """(file name, examples) of every shard of `split`."""
    split_info = info.splits[split]
    return [(os.path.basename(os.fspath(path)), int(length))
            for path, length in zip(split_info.filepaths, split_info.shard_lengths)]


def _host_part(info: tfds.core.DatasetInfo, dataset_dir: str, process_index: int,
               process_count: int) -> list[str]:
    """File names of the shards host `process_index` reads: its train shards, all eval ones."""
    train = _split_shards(info, "train")
    names = [train[j][0] for j in host_shards(len(train), process_index, process_count,
                                              dataset_dir)]
    if "eval" in info.splits:
        names += [name for name, _ in _split_shards(info, "eval")]
    return names


def copy_host_part(dataset_dir: str, local_dir: str, *, process_index: int,
                   process_count: int) -> None:
    """Makes `local_dir` hold the dataset's metadata and what host `process_index` of
    `process_count` reads (module docstring, (b)), copying from bucket folder `dataset_dir` only
    what is missing, partial or damaged there. Raises ConfigError with what to do when the
    train split has fewer shards than hosts or the local disk is too small."""
    objects = _bucket_objects(dataset_dir)
    if "dataset_info.json" not in objects:
        raise FileNotFoundError(f"no dataset at {dataset_dir}; run `albert-jax data build` with "
                                f"the same config")
    os.makedirs(local_dir, exist_ok=True)
    for name in objects:  # TFDS's metadata: dataset_info.json, features.json, metadata.json
        if name.endswith(".json"):
            files.write_atomically(os.path.join(local_dir, name),
                                   (epath.Path(dataset_dir) / name).read_bytes())
    info = tfds.builder_from_directory(local_dir).info
    names = _host_part(info, dataset_dir, process_index, process_count)
    missing = [name for name in names if name not in objects]
    if missing:
        raise FileNotFoundError(f"shard {missing[0]} of dataset {dataset_dir} is missing in the "
                                f"bucket; delete the dataset folder and rebuild it")
    temporary = {name: os.path.join(local_dir, f"{name}.partial{process_index}")
                 for name in names}
    to_copy = [name for name in names
               if not _is_intact(os.path.join(local_dir, name), objects[name])]
    needed = sum(objects[name].size - (os.path.getsize(temporary[name])
                                       if os.path.exists(temporary[name]) else 0)
                 for name in to_copy)
    free = shutil.disk_usage(local_dir).free
    if needed > free:
        raise ConfigError(
            f"data.dir={dataset_dir} is in a bucket, and host {process_index} of {process_count} "
            f"needs {needed / 1e9:.2f} GB more in data.local_dir ({local_dir}) for its train "
            f"shards and the eval split, which has {free / 1e9:.2f} GB free: set data.local_dir "
            f"to a bigger disk, {_GCSFUSE_HINT}")
    start = time.time()
    _in_threads(lambda name: _copy_shard(f"{dataset_dir.rstrip('/')}/{name}",
                                         os.path.join(local_dir, name), objects[name],
                                         temporary[name]), to_copy)
    logging.info("host %d of %d: %d shards of %s in %s (%d copied, %.2f GB, in %.1f s)",
                 process_index, process_count, len(names), dataset_dir, local_dir, len(to_copy),
                 needed / 1e9, time.time() - start)


def _in_threads(function: Callable[[str], None], names: Iterable[str]) -> None:
    with concurrent.futures.ThreadPoolExecutor(_COPY_THREADS) as pool:
        for _ in pool.map(function, names):  # (raises the first failure)
            pass


def local_bytes_per_host(dataset_dir: str, process_count: int) -> int | None:
    """The local disk the busiest host needs in mode (b): its train shards plus the eval split;
    None when there is no built dataset at `dataset_dir` (local or in a bucket)."""
    if not (epath.Path(dataset_dir) / "dataset_info.json").exists():
        return None
    info = tfds.builder_from_directory(dataset_dir).info

    def size(name: str) -> int:
        return (epath.Path(dataset_dir) / name).stat().length

    train = [size(name) for name, _ in _split_shards(info, "train")]
    evaluation = (sum(size(name) for name, _ in _split_shards(info, "eval"))
                  if "eval" in info.splits else 0)
    return max(sum(train[index::process_count]) for index in range(process_count)) + evaluation
