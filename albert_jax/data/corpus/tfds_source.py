"""TFDS text datasets ("tfds:NAME:SPLIT"): their "text" feature, read through TensorFlow.

One example is one record (wikipedia: one article); bookcorpus (one sentence per example, no
book boundaries) is grouped into documents of BOOKCORPUS_LINES_PER_DOCUMENT lines. A prepared
dataset's split is cut at its shard files (`shard_parts`), so that a build reads it on every
core.
"""
from __future__ import annotations

import functools
from typing import Iterator

from absl import logging

from albert_jax.data.corpus.sources import TFDS_PREFIX

# TFDS bookcorpus has one sentence per example and no book boundaries: every this many
# consecutive lines form one document.
BOOKCORPUS_LINES_PER_DOCUMENT = 256


def _import_tensorflow(name: str) -> None:
    try:
        import tensorflow  # noqa: F401  (TFDS reads these TFRecord datasets through TensorFlow)
    except ImportError:
        raise ImportError(
            f"reading the TFDS dataset {name!r} needs TensorFlow: `pip install albert-jax[tf]` "
            f"(or give files: no file or folder named {name!r} exists)") from None


def is_bookcorpus(source: str) -> bool:
    return source[len(TFDS_PREFIX):].split(":")[0].split("/")[0] == "bookcorpus"


def tfds_texts(source: str) -> Iterator[str]:
    """The "text" of each example of `source` ("tfds:NAME:SPLIT", SPLIT as TFDS slices it)."""
    _, name, split = source.split(":", 2)
    _import_tensorflow(name)
    import tensorflow_datasets as tfds
    dataset = tfds.load(name, split=split, shuffle_files=False, try_gcs=True)
    return (example["text"].decode("utf-8", errors="replace")
            for example in tfds.as_numpy(dataset))


def bookcorpus_documents(texts: Iterator[str]) -> Iterator[list[str]]:
    document = []
    for text in texts:
        if text.strip():
            document.append(text.strip())
        if len(document) == BOOKCORPUS_LINES_PER_DOCUMENT:
            yield document
            document = []
    if document:
        yield document


def shard_parts(source: str) -> list[str]:
    """`source` cut at the shard files of its split ("tfds:NAME:SPLIT[a:b]", one a shard, by
    example index), where the dataset is prepared and the split not sliced; else [source]."""
    _, name, split = source.split(":", 2)
    if "[" in split:
        return [source]
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import read_only_builder
    # The prepared dataset's own files in the TFDS data folders (no builder code needed), else
    # the registered builder (which may find it on TFDS's public bucket, as reading does).
    lengths = None
    for find in (read_only_builder.builder_from_files,
                 functools.partial(tfds.builder, try_gcs=True)):
        try:
            lengths = find(name).info.splits[split].shard_lengths
            break
        except Exception as error:  # (not prepared, unknown: TFDS raises many kinds)
            logging.info("%s: no shard lengths from %s (%s)", source, find, error)
    if not lengths:
        return [source]
    parts, start = [], 0
    for length in lengths:
        parts.append(f"{TFDS_PREFIX}{name}:{split}[{start}:{start + length}]")
        start += length
    return parts
