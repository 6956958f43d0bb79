"""The shard files of a TFDS dataset folder, written unit by unit and renamed into TFDS's names.

  shards = write_unit_shards(examples, units_dir, "unit-00003-train", file_format=...,
                             shard_bytes=...)          # a unit's shards, each replaced whole
  split_info = adopt_split(dataset_dir, dataset_name, file_format, "train", shards)
  info.write_to_directory(dataset_dir)                # the metadata, dataset_info.json last

What TFDS's own writer does, without its shuffle: TFDS hash-shuffles a split in a memory buffer
of 1 GB and spills past it through TensorFlow (so no split over ~1 GB could be built without
TensorFlow). Here the examples go to disk in the order they come (deterministic), and the
training pipeline shuffles example indices at read time (grain). Memory holds one open shard's
index, never a per-example list. What a reader sees is TFDS's: the same serialized examples,
ArrayRecord files with TFDS's writer options (TFDS's own file adapter writes them), TFDS's shard
names and dataset_info.json / features.json / metadata.json, so `tfds.builder_from_directory`,
`tfds.data_source` and `pipeline.SplitSource` read it unchanged.

A unit's split is cut into shards of about `shard_bytes` of serialized examples (SHARD_BYTES: 256
MiB, inside TFDS's own 64 MiB-1 GiB range): big enough that a 100 GB dataset is a few hundred
files, small enough that a failed upload resends little and that ArrayRecord's per-shard index of
record offsets (kept in memory until the shard closes) stays a few MB. Each shard file is
replaced whole, so a unit run again, or twice at once, leaves the same bytes: a local shard is
written under a temporary name and renamed; a gs:// one is written in a local staging folder
(ArrayRecord writes local files) and uploaded as one object, its size checked in the bucket.
"""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import uuid
from typing import Any, Iterable, Iterator

import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import file_adapters

from albert_jax import files

SHARD_BYTES = 256 << 20
_COPY_CHUNK = 16 << 20


def write_unit_shards(examples: Iterable[bytes], units_dir: epath.Path, prefix: str, *,
                      file_format: str, shard_bytes: int = SHARD_BYTES,
                      staging_dir: str | None = None) -> list[dict[str, Any]]:
    """Writes `examples` (serialized, in order) as `<units_dir>/<prefix>-<k>.<suffix>`, k = 0, 1,
    ..., each closed once it holds `shard_bytes`; [{"file", "examples", "bytes"}] per shard (none
    for no examples). `staging_dir`: where a gs:// shard is written before its upload (a fresh
    folder inside it, removed at the end; None: the system's temp folder)."""
    file_format = file_adapters.FileFormat(file_format)
    adapter = file_adapters.ADAPTER_FOR_FORMAT[file_format]
    remote = not files.is_local(units_dir)
    if not remote:
        units_dir.mkdir(parents=True, exist_ok=True)
    staging = None
    if remote:
        if staging_dir:
            os.makedirs(staging_dir, exist_ok=True)
        staging = epath.Path(tempfile.mkdtemp(prefix="albert_jax_shards_", dir=staging_dir))
    shards: list[dict[str, Any]] = []
    try:
        examples = iter(examples)
        while (first := next(examples, None)) is not None:
            name = f"{prefix}-{len(shards):05d}.{file_format.file_suffix}"
            shard = {"file": name, "examples": 0, "bytes": 0}
            written = (staging or units_dir) / f"{name}.tmp-{uuid.uuid4().hex}"
            adapter.write_examples(written, _shard_examples(first, examples, shard, shard_bytes))
            if remote:
                _upload(written, units_dir / name)
            else:
                written.replace(units_dir / name)  # a retry's file replaces the first's
            shards.append(shard)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return shards


def adopt_split(dataset_dir: epath.Path, dataset_name: str, file_format: str, split: str,
                shards: list[tuple[epath.Path, dict[str, Any]]], *,
                threads: int = 1) -> tfds.core.SplitInfo:
    """Renames the units' shards of `split` (in order: (folder, {"file", "examples", "bytes"}))
    to TFDS's `<name>-<split>.<suffix>-0000k-of-0000n` in `dataset_dir`, `threads` at a time;
    its SplitInfo. Run again after a kill, it finds the shards already renamed and goes on."""
    suffix = file_adapters.FileFormat(file_format).file_suffix
    template = tfds.core.ShardedFileTemplate(data_dir=dataset_dir, dataset_name=dataset_name,
                                             split=split, filetype_suffix=suffix)

    def adopt(index: int) -> None:
        folder, shard = shards[index]
        source = folder / shard["file"]
        target = template.sharded_filepath(shard_index=index, num_shards=len(shards))
        if target.exists():  # renamed before a kill (on gs:// a copy, then the delete)
            source.unlink(missing_ok=True)
            return
        try:
            source.rename(target)
        except FileNotFoundError:
            raise FileNotFoundError(f"shard {source} of the unfinished build is missing; delete "
                                    f"{dataset_dir} and build again") from None

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(adopt, range(len(shards))))
    return tfds.core.SplitInfo(
        name=split, shard_lengths=[shard["examples"] for _, shard in shards],
        num_bytes=sum(shard["bytes"] for _, shard in shards), filename_template=template)


def _shard_examples(first: bytes, rest: Iterator[bytes], shard: dict[str, Any],
                    shard_bytes: int) -> Iterator[tuple[None, bytes]]:
    """(key, example) pairs for TFDS's file adapter, from `first` on, until the shard holds
    `shard_bytes` of examples (never reading one past it) or `rest` ends; counts into `shard`."""
    example = first
    while True:
        shard["examples"] += 1
        shard["bytes"] += len(example)
        yield None, example
        if shard["bytes"] >= shard_bytes or (example := next(rest, None)) is None:
            return


def _upload(local: epath.Path, remote: epath.Path) -> None:
    """Copies a finished shard to the bucket, checks its size there, deletes the local copy."""
    size = local.stat().length
    with local.open("rb") as source, remote.open("wb") as target:
        shutil.copyfileobj(source, target, _COPY_CHUNK)
    uploaded = remote.stat().length
    if uploaded != size:
        raise OSError(f"uploading shard {local} to {remote}: {uploaded} bytes arrived of {size}; "
                      f"run the build again (it goes on from the units already built)")
    local.unlink()
