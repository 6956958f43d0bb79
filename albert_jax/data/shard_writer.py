"""A TFDS dataset folder written shard by shard, in order and in bounded memory, locally or in a bucket.

  with shard_writer.ShardWriter(dataset_dir, dataset_name=NAME, file_format="array_record",
                                staging_dir=None) as writer:       # clears an unfinished folder
      split_infos = [writer.write_split(split, serialized_examples) for split in splits]
      info.set_splits(tfds.core.SplitDict(split_infos))
      writer.finish(info)                                          # the metadata, last

What TFDS's own writer does, without its shuffle: TFDS hash-shuffles a split in a memory buffer
of 1 GB and spills past it through TensorFlow (so no split over ~1 GB could be built without
TensorFlow, and memory grew with the split until then). Here the examples go to disk in the
order they come (the builder's block order: deterministic), and the training pipeline shuffles
example indices at read time (grain). Memory holds one open shard's index, never a per-example
list. What a reader sees is TFDS's: the same serialized examples (the builder serializes them as
TFDS does), ArrayRecord files with TFDS's writer options (TFDS's own file adapter writes them),
TFDS's shard names and dataset_info.json / features.json / metadata.json, so
`tfds.builder_from_directory`, `tfds.data_source` and `pipeline.SplitSource` read it unchanged.

A split is cut into shards of about `shard_bytes` of serialized examples (SHARD_BYTES: 256 MiB,
inside TFDS's own 64 MiB-1 GiB range): big enough that a 100 GB dataset is a few hundred files,
small enough that a failed upload resends little, that the local staging folder of a bucket build
holds at most two shards (one written, one uploading) and that ArrayRecord's per-shard index of
record offsets (kept in memory until the shard closes) stays a few MB.

Crash safety: shards are written as `<final name without -of-N>.incomplete` and renamed to
TFDS's `...-0000i-of-0000n` once the split's shard count is known; the metadata is written last,
dataset_info.json last of all, so a folder without it is an unfinished build (TFDS's
`is_prepared` agrees): opening a writer on such a folder deletes it and starts over. One build
per folder at a time.

A gs:// `dataset_dir`: each shard is written in a local staging folder (ArrayRecord writes local
files), uploaded as soon as it is complete (in a thread, while the next one is written), checked
for its size in the bucket, then deleted locally; the renames are server-side moves.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import tempfile
from typing import Iterable, Iterator

import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import file_adapters

SHARD_BYTES = 256 << 20
_INCOMPLETE = ".incomplete"
_COPY_CHUNK = 16 << 20


@dataclasses.dataclass
class _ShardCount:
    examples: int = 0
    bytes: int = 0


class ShardWriter:
    """Writes the splits of one dataset folder (`dataset_dir`: local or gs://), then its metadata.

    `staging_dir`: where a bucket build writes each shard before uploading it (a fresh folder is
    made inside it and removed at the end); None: the system's temp folder. Unused for a local
    `dataset_dir`, whose shards are written in place.
    """

    def __init__(self, dataset_dir: str | os.PathLike, *, dataset_name: str, file_format: str,
                 staging_dir: str | None = None, shard_bytes: int = SHARD_BYTES):
        self.dataset_dir = epath.Path(dataset_dir)
        self.dataset_name = dataset_name
        self.file_format = file_adapters.FileFormat(file_format)
        self.shard_bytes = shard_bytes
        self._remote = "://" in os.fspath(dataset_dir)
        self._staging_root = staging_dir
        self._staging: epath.Path | None = None
        self._uploads: concurrent.futures.ThreadPoolExecutor | None = None

    def __enter__(self) -> "ShardWriter":
        if (self.dataset_dir / "dataset_info.json").exists():
            raise FileExistsError(f"{self.dataset_dir} holds a finished dataset; delete the "
                                  f"folder to rebuild it")
        if self.dataset_dir.exists():  # an unfinished build
            print(f"  removing the unfinished build in {self.dataset_dir} (no dataset_info.json)")
            self.dataset_dir.rmtree()
        self.dataset_dir.mkdir(parents=True, exist_ok=True)
        if self._remote:
            if self._staging_root:
                os.makedirs(self._staging_root, exist_ok=True)
            self._staging = epath.Path(tempfile.mkdtemp(prefix="albert_jax_shards_",
                                                        dir=self._staging_root))
            self._uploads = concurrent.futures.ThreadPoolExecutor(1)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._uploads is not None:
            self._uploads.shutdown(wait=True, cancel_futures=True)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    def write_split(self, split: str, examples: Iterable[bytes]) -> tfds.core.SplitInfo:
        """Writes `examples` (serialized, in order) as the shards of `split`; its SplitInfo."""
        template = tfds.core.ShardedFileTemplate(
            data_dir=self.dataset_dir, dataset_name=self.dataset_name, split=split,
            filetype_suffix=self.file_format.file_suffix)
        adapter = file_adapters.ADAPTER_FOR_FORMAT[self.file_format]
        examples = iter(examples)
        counts: list[_ShardCount] = []
        upload: concurrent.futures.Future | None = None
        while (first := next(examples, None)) is not None:
            name = self._incomplete_name(split, len(counts))
            local = (self._staging or self.dataset_dir) / name
            counts.append(_ShardCount())
            adapter.write_examples(local, _shard_examples(first, examples, counts[-1],
                                                          self.shard_bytes))
            if self._uploads is not None:
                if upload is not None:
                    upload.result()  # at most one shard uploading while the next is written
                upload = self._uploads.submit(_upload, local, self.dataset_dir / name)
        if upload is not None:
            upload.result()
        for index in range(len(counts)):
            (self.dataset_dir / self._incomplete_name(split, index)).rename(
                template.sharded_filepath(shard_index=index, num_shards=len(counts)))
        return tfds.core.SplitInfo(
            name=split, shard_lengths=[count.examples for count in counts],
            num_bytes=sum(count.bytes for count in counts), filename_template=template)

    def _incomplete_name(self, split: str, index: int) -> str:
        # TFDS's shard name before the split's shard count is known (no "-of-N"), marked unfinished.
        return (f"{self.dataset_name}-{split}.{self.file_format.file_suffix}-{index:05d}"
                f"{_INCOMPLETE}")

    def finish(self, info: tfds.core.DatasetInfo) -> None:
        """features.json, metadata.json, then dataset_info.json: now the dataset looks built."""
        info.write_to_directory(self.dataset_dir)


def _shard_examples(first: bytes, rest: Iterator[bytes], count: _ShardCount,
                    shard_bytes: int) -> Iterator[tuple[None, bytes]]:
    """(key, example) pairs for TFDS's file adapter, from `first` on, until the shard holds
    `shard_bytes` of examples (never reading one past it) or `rest` ends."""
    example = first
    while True:
        count.examples += 1
        count.bytes += len(example)
        yield None, example
        if count.bytes >= shard_bytes or (example := next(rest, None)) is None:
            return


def _upload(local: epath.Path, remote: epath.Path) -> None:
    """Copies a finished shard to the bucket, checks its size there, deletes the local copy."""
    size = local.stat().length
    with local.open("rb") as source, remote.open("wb") as target:
        shutil.copyfileobj(source, target, _COPY_CHUNK)
    uploaded = remote.stat().length
    if uploaded != size:
        raise OSError(f"uploading shard {local} to {remote}: {uploaded} bytes arrived of {size}; "
                      f"run the build again (it starts over)")
    local.unlink()
