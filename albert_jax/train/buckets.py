"""Length buckets: a fine-tuning batch cut to the shortest of a few lengths that holds its
longest example.

The reference pads every fine-tuning example to max_seq_length (SPEC 8.2: 512 for GLUE and
RACE), and most GLUE examples are far shorter than that: most of each step would
be attention and feed-forward work on padding. Padding changes nothing that is read: its keys
get the -10000 attention bias (SPEC 3.2.6; exp(-10000) is 0 in float32), every position's
position embedding depends on its index alone, and the classifier reads [CLS]. So a batch whose
longest example has n tokens runs at the smallest `length_buckets` entry >= n instead of
seq_len: the same examples in the same batches as the reference, the same results up to
floating-point rounding (with backbone dropout, its masks are drawn for the shape run: the same
distribution, other bits), and a compiled step per bucket used (a few, not one per length).

Every process must run the same shapes: with several processes the longest example is agreed
over all of them (one small all-gather per batch; it runs on the devices, after the step in
flight, so the host no longer dispatches steps ahead: a few milliseconds of device time a step,
against the padding's work saved). The task says which fields are cut
(`Task.sequence_fields`, along their last axis); SQuAD cuts none, as its evaluation reads the
span logits of every position (the reference's n-best).

`albert-jax predict` runs the rows of each chunk it reads shortest first (finetune/run.py), so a
batch holds rows of nearly one length, and runs it at a finer list of its own,
PREDICT_LENGTH_BUCKETS: a few tokens of padding a row instead of up to half the bucket; each
length used compiles once (and is kept by the persistent compilation cache).
"""
from __future__ import annotations

from typing import Sequence

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from albert_jax.errors import ConfigError

HostBatch = dict[str, np.ndarray]

# Steps of 16 up to 128, of 32 up to 256, of 64 up to 512: a batch of rows of nearly one length
# carries under 16 tokens of padding a row up to 128, with at most 16 lengths to compile (an eval
# step each, only those a file's batches meet). Steps of 8 measured no faster on 1,000 rows, and
# their twice as many compiles slowed a first predict (benchmarks/RESULTS.md).
PREDICT_LENGTH_BUCKETS = (*range(16, 129, 16), *range(160, 257, 32), *range(320, 513, 64))


def bucket_lengths(length_buckets: Sequence[int], seq_len: int) -> tuple[int, ...]:
    """The lengths batches may run at: the config's `length_buckets` below seq_len, and seq_len
    (the longest an example can be). Empty `length_buckets`: seq_len alone (the reference)."""
    for length in length_buckets:
        if not isinstance(length, int) or length < 1:
            raise ConfigError(f"config length_buckets={tuple(length_buckets)}: {length!r} is not "
                              "a positive integer; give sequence lengths, e.g. (64, 128, 256), "
                              "or () to run every batch at seq_len")
    return tuple(sorted({length for length in length_buckets if length < seq_len} | {seq_len}))


def lengths_of(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """`bucket_lengths` of a run config (one without `length_buckets`, e.g. pretraining or a
    workdir saved before buckets existed: seq_len alone)."""
    return bucket_lengths(config.get("length_buckets", ()), config.seq_len)


def predict_lengths_of(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The lengths `albert-jax predict`'s batches (of rows sorted by length) may run at:
    PREDICT_LENGTH_BUCKETS below seq_len, and seq_len; seq_len alone where the run's
    `length_buckets` is empty (the reference's padding, as the run chose)."""
    if not config.get("length_buckets", ()):
        return (config.seq_len,)
    return bucket_lengths(PREDICT_LENGTH_BUCKETS, config.seq_len)


def longest_example(host_batch: HostBatch, mask_field: str = "input_mask") -> int:
    """The number of positions up to the last real token of any row: [..., seq] mask -> int."""
    mask = host_batch[mask_field]
    real = mask.reshape(-1, mask.shape[-1]).any(axis=0)
    return int(np.flatnonzero(real)[-1]) + 1 if real.any() else 0


def trim(host_batch: HostBatch, sequence_fields: Sequence[str],
         lengths: tuple[int, ...]) -> HostBatch:
    """`host_batch` with `sequence_fields` cut along their last axis to the smallest of `lengths`
    that holds the longest example of the global batch (every process's rows)."""
    if not sequence_fields or len(lengths) == 1:
        return host_batch
    longest = longest_example(host_batch)
    if jax.process_count() > 1:
        longest = int(np.max(multihost_utils.process_allgather(np.int32(longest))))
    length = next(length for length in lengths if length >= longest)
    if length == host_batch[sequence_fields[0]].shape[-1]:
        return host_batch
    return {name: value[..., :length] if name in sequence_fields else value
            for name, value in host_batch.items()}
