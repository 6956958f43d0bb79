"""Pretraining batches streamed with grain from the shards `builder` wrote.

  iterator = pipeline.make_iterator(config)               # this host's batches, forever
  host_batch = next(iterator)                             # dict name -> [host_batch, ...] numpy
  batch = sharding.to_global_batch(host_batch, batch_sharding)  # train/sharding.py: jax.Array [batch, ...]

One global stream, identical on every host: the split's example indices shuffled with a seed
(train only; a new order each epoch), repeated, and cut into global batches of `batch_size`
(drop remainder); each example is masked (`config.data.masking`). Host i of n then takes rows
[i * host_batch, (i + 1) * host_batch) of every global batch (host_batch = batch_size // n) and
reads and masks only those rows. So the global batches (the hosts' host batches concatenated in
process order) do not depend on the number of hosts: a run on 2 hosts trains on the batches a
run on 1 host would.
- "static": the SPEC 1.4 masks written at build time (the reference's behaviour, dupe_factor
  copies with different masks).
- "dynamic": SPEC 1.4 masking redone in the pipeline from the stored original tokens and word
  boundaries (`masking.remask_features`, with the masking settings the build used), with
  `np.random.default_rng([seed, epoch, example_index])`: every epoch sees new
  masks, and the masks depend only on the example and the epoch (not on the number of hosts,
  workers or the batch size), so a run is deterministic and resumable. With dynamic masking
  a small dupe_factor (e.g. 1-5) is enough.
The eval split always uses the stored masks, in stored order, so every evaluation scores the
same predictions (SPEC 5.7); one pass of it is cut to whole global eval batches.

Shards in a bucket (shard_copy.py has both ways in full): (a) the bucket mounted with gcsfuse
is a local data.dir, read as above. (b) With data.dir=gs://... each host first copies its own
train shards ({j : j % n == i} for host i of n) and the eval split to data.local_dir, and reads
only those: its train batches are its own examples, shuffled with the seed and its process
index (`make_host_part_dataset`; dynamic masks keyed by the split-wide example index and the
host's epoch), and the global batch is the hosts' batches together, so the data order depends
on the number of hosts. One host copies the whole split and reads it as above: a one-host run
from a bucket trains on the batches of the same run from local disk. Eval is as above, from
the local copy.

Checkpointing: the returned `grain.DatasetIterator` has `get_state()` (a small JSON-able dict:
the position in the stream of global batches) and `set_state()`; a restored iterator yields
exactly the batches the uninterrupted one would have. The trainer saves it beside the train state
as its own Orbax item, with the handler grain registers with Orbax (grain 0.2.18:
`grain.checkpoint.CheckpointSave` / `CheckpointRestore`, handler `grain.checkpoint.CheckpointHandler`;
`grain.python.PyGrainCheckpointSave` is the older alias): `manager.save(step,
args=ocp.args.Composite(state=..., data=grain.checkpoint.CheckpointSave(iterator)))`. Each host
writes its own `process_<i>-of-<n>.json`. The state counts global batches (and, with
`num_workers` > 0, each worker's share of them), never a host's rows, so it is the same on every
host and for any number of hosts: a run saved on n hosts resumes on m with the same data order
(`train/checkpoint.py` reads the saved state back and calls `set_state` on a fresh iterator of
the same config). In mode (b) it counts host batches, again the same on every host; resumed
on as many hosts it continues exactly, on another number it continues at the same step of the
new hosts' streams. `num_workers` is part of the state's layout: grain cannot restore a state
saved with another number of workers.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import grain
import jax
import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from absl import flags

from albert_jax.data.building import dataset_settings, masking
from albert_jax.data.input import shard_copy
from albert_jax.errors import ConfigError

MASKING_MODES = ("static", "dynamic")
_BUILD_HINT = "run `albert-jax data build` with the same config"


class ShardReadError(RuntimeError):
    """An example could not be read; the message names the shard file."""


class SplitSource:
    """Random access to the examples of one split: `source[i]` is a dict of SPEC 1.5 features.

    A thin wrapper over TFDS's ArrayRecord data source that turns a read failure into an error
    naming the shard file and what to do. With `shards` (indices into the split's shard list)
    it reads those shard files alone (the others need not exist): `len(source)` counts their
    examples, `indices` are their split-wide indices, and `source[i]` takes such an index.
    """

    def __init__(self, dataset_dir: str, split: str, shards: Sequence[int] | None = None):
        if not os.path.exists(os.path.join(dataset_dir, "dataset_info.json")):
            raise FileNotFoundError(f"no dataset at {dataset_dir}; {_BUILD_HINT}")
        dataset = tfds.builder_from_directory(dataset_dir)
        if split not in dataset.info.splits:
            raise ValueError(f"dataset {dataset_dir} has no split {split!r} (it has "
                             f"{sorted(dataset.info.splits)}; eval needs data.eval_fraction > 0)")
        if dataset.info.file_format.value != "array_record":
            raise ValueError(
                f"dataset {dataset_dir} is in {dataset.info.file_format.value} format; grain needs "
                f"random access: rebuild with --config.data.format=array_record")
        split_info = dataset.info.splits[split]
        self.dataset_dir = dataset_dir
        self.split = split
        self.metadata = dict(dataset.info.metadata)
        all_paths = [os.fspath(path) for path in split_info.filepaths]
        self._shard_ends = np.cumsum(split_info.shard_lengths)
        self.shards = range(len(all_paths)) if shards is None else list(shards)
        self.shard_paths = [all_paths[shard] for shard in self.shards]
        for path in self.shard_paths:
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"shard {path} of dataset {dataset_dir} is missing; delete {dataset_dir} and "
                    f"{_BUILD_HINT}")
        if shards is None:
            self.indices: range | np.ndarray = range(sum(split_info.shard_lengths))
            self._offsets = None
            self._source = dataset.as_data_source(split)
        else:
            lengths = np.asarray(split_info.shard_lengths)[self.shards]
            starts = (self._shard_ends - split_info.shard_lengths)[self.shards]
            self.indices = np.concatenate([np.arange(start, start + length)
                                           for start, length in zip(starts, lengths)])
            # Split-wide index -> position in the files read: index + _offsets[its shard].
            self._read = np.isin(np.arange(len(all_paths)), self.shards)
            self._offsets = np.zeros(len(all_paths), dtype=np.int64)
            self._offsets[self.shards] = np.cumsum(lengths) - lengths - starts
            self._source = ShardRecords(self.shard_paths, dataset.info.features)

    def __len__(self) -> int:
        return len(self._source)

    def _position(self, indices: Sequence[int]) -> list[int]:
        """Where split-wide `indices` are in the files this source reads."""
        if self._offsets is None:
            return list(indices)
        indices = np.asarray(indices, dtype=np.int64)
        shards = np.searchsorted(self._shard_ends, indices, "right")
        if not self._read[shards].all():
            raise IndexError(f"examples {indices[~self._read[shards]].tolist()} of split "
                             f"{self.split!r} are in shards this source does not read "
                             f"({list(self.shards)})")
        return (indices + self._offsets[shards]).tolist()

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        position = self._position([index])[0]
        try:
            return self._source[position]
        except Exception as error:  # Riegeli/proto errors name neither the file nor a way out.
            raise self._read_error(index, error) from error

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, np.ndarray]]:
        positions = self._position(indices)
        try:
            return self._source.__getitems__(positions)
        except Exception:  # Find the failing example (and its shard) one by one.
            return [self[index] for index in indices]

    def _read_error(self, index: int, error: Exception) -> ShardReadError:
        shard = int(np.searchsorted(self._shard_ends, index % int(self._shard_ends[-1]), "right"))
        return ShardReadError(
            f"cannot read example {index} of split {self.split!r} from shard "
            f"{self.shard_paths[self.shards.index(shard)]}: {error}. "
            f"The file is damaged or truncated: delete {self.dataset_dir} and {_BUILD_HINT}")


class ShardRecords:
    """The examples of some ArrayRecord shard files, in file order, decoded as TFDS does."""

    def __init__(self, paths: Sequence[str], features: tfds.features.FeaturesDict):
        self._records = grain.sources.ArrayRecordDataSource(list(paths))
        self._features = features

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, position: int) -> dict[str, np.ndarray]:
        return self._features.deserialize_example_np(self._records[position])

    def __getitems__(self, positions: Sequence[int]) -> list[dict[str, np.ndarray]]:
        return [self._features.deserialize_example_np(record)
                for record in self._records.__getitems__(positions)]


def host_batch_size(config: ml_collections.ConfigDict, split: str = "train", *,
                    process_count: int | None = None) -> int:
    """This host's batch: the global train/eval batch divided by the number of hosts."""
    global_batch, key = ((config.batch_size, "batch_size") if split == "train"
                         else (config.eval_batch_size, "eval_batch_size"))
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch % process_count:
        raise ConfigError(f"config.{key}={global_batch} is not divisible by the {process_count} "
                          f"hosts (processes); set a multiple of {process_count}")
    return global_batch // process_count


def make_iterator(config: ml_collections.ConfigDict, split: str = "train", *,
                  process_index: int | None = None, process_count: int | None = None,
                  repeat: bool = True) -> grain.DatasetIterator:
    """This host's batches of `split`: dict name -> np.ndarray [host_batch, ...] (SPEC 1.5 names).

    `process_index`/`process_count` default to JAX's. The hosts' batches, concatenated in process
    order, are the global batches of a one-host run. With `repeat=False` the iterator ends after
    one pass cut to whole global batches (the last `len % global_batch` examples are left out), so
    every host gets the same number of batches and multi-host evaluation stays in step.
    With data.dir in a bucket (gs://), the host first copies what it reads to data.local_dir
    and its train batches come from its own shards (module docstring; shard_copy.py).
    """
    if config.data.masking not in MASKING_MODES:
        raise ConfigError(f"config.data.masking={config.data.masking!r}; one of {MASKING_MODES}")
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    training = split == "train"
    host_batch = host_batch_size(config, split, process_count=process_count)
    dataset_dir = dataset_settings.dataset_dir(config)
    if shard_copy.is_bucket(dataset_dir):  # mode (b): read this host's local copy
        local_dir = shard_copy.local_dataset_dir(dataset_dir, config.data.local_dir)
        shard_copy.copy_host_part(dataset_dir, local_dir, process_index=process_index,
                                  process_count=process_count)
        dataset_dir = local_dir
        if training and process_count > 1:  # (one host has the whole split: read as below)
            return iterate(_host_part_dataset(config, local_dir, host_batch=host_batch,
                                              process_index=process_index,
                                              process_count=process_count, repeat=repeat),
                           prefetch=config.data.prefetch, num_workers=config.data.num_workers)
    source = SplitSource(dataset_dir, split)
    dataset = make_dataset(
        source, batch_size=host_batch * process_count, process_index=process_index,
        process_count=process_count, repeat=repeat,
        shuffle_seed=shuffle_seed(config) if training else None,
        dynamic_masking=(DynamicMasking.from_metadata(config, source.metadata)
                         if training and config.data.masking == "dynamic" else None))
    return iterate(dataset, prefetch=config.data.prefetch, num_workers=config.data.num_workers)


def _host_part_dataset(config: ml_collections.ConfigDict, local_dir: str, *, host_batch: int,
                       process_index: int, process_count: int, repeat: bool) -> grain.MapDataset:
    """Mode (b) train batches of this host's own shards (in its local copy `local_dir`)."""
    shard_lengths = tfds.builder_from_directory(local_dir).info.splits["train"].shard_lengths
    source = SplitSource(local_dir, "train", shards=shard_copy.host_shards(
        len(shard_lengths), process_index, process_count, local_dir))
    dataset = make_host_part_dataset(
        source, host_batch=host_batch, repeat=repeat,
        shuffle_seed=int(np.random.SeedSequence([shuffle_seed(config), process_index])
                         .generate_state(1)[0]),
        dynamic_masking=(DynamicMasking.from_metadata(config, source.metadata)
                         if config.data.masking == "dynamic" else None))
    if repeat:
        return dataset
    # One pass: every host as many batches as the smallest host part gives, to stay in step.
    smallest_part = min(sum(shard_lengths[index::process_count])
                        for index in range(process_count))
    return dataset[:smallest_part // host_batch]


def iterate(dataset: grain.MapDataset, *, prefetch: int, num_workers: int) -> grain.DatasetIterator:
    """A checkpointable iterator over `dataset` (`get_state`/`set_state`), reading `prefetch`
    elements ahead in threads and, with `num_workers` > 0, in that many worker processes."""
    read_ahead = max(0, int(prefetch))
    iterable = dataset.to_iter_dataset(
        grain.ReadOptions(num_threads=read_ahead, prefetch_buffer_size=max(1, read_ahead)))
    if num_workers > 0:
        if not flags.FLAGS.is_parsed():
            # grain reads its absl flags when it starts workers; outside `albert-jax` (a script,
            # a notebook, a test) nobody parsed them: take their defaults (reading .value of an
            # unparsed flag raises).
            flags.FLAGS.mark_as_parsed()
        iterable = iterable.mp_prefetch(grain.MultiprocessingOptions(num_workers=int(num_workers)))
    return iter(iterable)


def shuffle_seed(config: ml_collections.ConfigDict) -> int:
    """config.data.shuffle_buffer_seed, or one derived from config.seed (apart from mask seeds)."""
    if config.data.shuffle_buffer_seed is not None:
        return int(config.data.shuffle_buffer_seed)
    return int(np.random.SeedSequence([config.seed, 0x5EED]).generate_state(1)[0])


def make_dataset(source: Any, *, batch_size: int, process_index: int, process_count: int,
                 repeat: bool, shuffle_seed: int | None,
                 dynamic_masking: "DynamicMasking | None") -> grain.MapDataset:
    """This host's grain MapDataset of batches over any random-access `source` of feature dicts.

    `batch_size` is the GLOBAL batch; element k is rows [process_index * host_batch,
    (process_index + 1) * host_batch) of global batch k: dict name -> [host_batch, ...].
    """
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, process_count={process_count})")
    if batch_size % process_count:
        raise ValueError(f"global batch_size={batch_size} is not divisible by the "
                         f"{process_count} hosts")
    if len(source) < (1 if repeat else batch_size):
        raise ValueError(f"the split has {len(source)} examples, not enough for a global batch of "
                         f"{batch_size}: use a bigger corpus or smaller batch")
    # The global stream is built from example indices only (cheap, identical on every host);
    # the features are read, and masked, for this host's rows alone.
    global_batches = _index_batches(grain.MapDataset.range(len(source)), batch_size,
                                    shuffle_seed=shuffle_seed, repeat=repeat)
    host_batch = batch_size // process_count
    if dynamic_masking is not None:
        dynamic_masking = dataclasses.replace(dynamic_masking, epoch_length=len(source))
    return global_batches.map_with_index(HostRows(
        source=source, first_row=process_index * host_batch, host_batch=host_batch,
        dynamic_masking=dynamic_masking))


def make_host_part_dataset(source: SplitSource, *, host_batch: int, repeat: bool,
                           shuffle_seed: int | None,
                           dynamic_masking: "DynamicMasking | None") -> grain.MapDataset:
    """Mode (b): a grain MapDataset of batches of `source`'s examples alone (a host's shards).

    Element k: dict name -> [host_batch, ...], the k-th `host_batch` of `source.indices`
    (split-wide example indices) shuffled with `shuffle_seed` (a new order each epoch) and
    repeated; dynamic masks use the split-wide index and the epoch of this stream.
    """
    if len(source) < host_batch:
        raise ValueError(f"this host's shards hold {len(source)} examples, not enough for its "
                         f"batch of {host_batch}: use a bigger corpus or smaller batch")
    batches = _index_batches(grain.MapDataset.source(source.indices), host_batch,
                             shuffle_seed=shuffle_seed, repeat=repeat)
    if dynamic_masking is not None:
        dynamic_masking = dataclasses.replace(dynamic_masking, epoch_length=len(source))
    return batches.map_with_index(HostRows(source=source, first_row=0, host_batch=host_batch,
                                           dynamic_masking=dynamic_masking))


def _index_batches(order: grain.MapDataset, batch_size: int, *, shuffle_seed: int | None,
                   repeat: bool) -> grain.MapDataset:
    """Example indices shuffled (a new order each epoch), repeated, cut into [batch_size]."""
    if shuffle_seed is not None:
        order = order.shuffle(seed=shuffle_seed)  # (reseeded every epoch by repeat)
    if repeat:
        order = order.repeat()
    return order.batch(batch_size, drop_remainder=True)


@dataclasses.dataclass(frozen=True)
class HostRows:
    """Reads (and, with `dynamic_masking`, re-masks) one host's rows of a global batch.

    Called by grain with (global batch number, example indices [global_batch]); returns dict
    name -> [host_batch, ...] for rows [first_row, first_row + host_batch).
    """
    source: Any
    first_row: int
    host_batch: int
    dynamic_masking: "DynamicMasking | None"

    def __call__(self, batch_number: int, example_indices: np.ndarray) -> dict[str, np.ndarray]:
        rows = range(self.first_row, self.first_row + self.host_batch)
        indices = [int(example_indices[row]) for row in rows]
        examples = (self.source.__getitems__(indices) if hasattr(self.source, "__getitems__")
                    else [self.source[index] for index in indices])
        if self.dynamic_masking is not None:
            # Masks keyed by the position in the global stream (-> epoch) and the example index.
            global_batch = len(example_indices)
            examples = [self.dynamic_masking(batch_number * global_batch + row, (index, features))
                        for row, index, features in zip(rows, indices, examples)]
        return {name: np.stack([features[name] for features in examples])
                for name in examples[0]}


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """SPEC 1.4 masking of a stored example, redone with rng (seed, epoch, example index).

    Called by `HostRows` with (position in the global repeated stream, (example index, features));
    epoch = position // epoch_length (epoch_length = the split's size).
    """
    settings: masking.MaskingSettings
    seed: int
    epoch_length: int = 1

    @classmethod
    def from_metadata(cls, config: ml_collections.ConfigDict,
                      metadata: dict[str, Any]) -> "DynamicMasking":
        """The masking the dataset was built with (its metadata), seeded by config.seed."""
        return cls(settings=masking.MaskingSettings.from_metadata(metadata), seed=int(config.seed))

    def __call__(self, position: int, indexed: tuple[int, dict[str, np.ndarray]]
                 ) -> dict[str, np.ndarray]:
        example_index, features = indexed
        rng = np.random.default_rng([self.seed, position // self.epoch_length, example_index])
        return masking.remask_features(features, rng, self.settings)
