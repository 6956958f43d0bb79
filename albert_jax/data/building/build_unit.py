"""One unit of a data build: a few corpus parts in, their shard files and a manifest out.

  manifest = build_unit(context, unit)      # the same files whoever runs it, however often

The pure function both executors run (`builder.py`'s process pool and `beam_build.py`'s
pipeline): it reads the unit's parts (`corpus.plan_parts`: files or pieces of them, local or
gs://), makes its examples and writes them under
`<dataset folder>/_units/` as `unit-<u>-<split>-<k>.<format>` shards of about `shard_bytes`,
then `unit-<u>.json`, the manifest, last: a unit with a manifest is done. Everything it writes
is a function of (settings, tokenizer, unit) alone: a unit run twice (a retry of the runner, a
rerun after a kill, two attempts at once) writes the same bytes under the same names, each file
replaced whole (a local file through a temporary name and a rename; an object in one upload).

Inside a unit, as before units existed:
- documents go to `eval` by a hash of (part name, document index in it) below
  `eval_fraction`, so the hold-out never moves when other files are added;
- each split's documents, in corpus order, are cut into blocks of about BLOCK_CHARACTERS of text
  (documents are never split); a block is tokenized, then `dupe_factor` passes of SPEC 1.3
  instance creation and SPEC 1.4 masking run over it, pass p of block b of unit u of split s
  with `np.random.SeedSequence([seed, s, u, b, p])`. In a mixture (`corpus.mixture`) a unit
  holds one group, whose documents are passed dupe_factor x r_i times on average
  (`document_passes`: pass p takes the documents with more than p passes). The SOP/NSP
  "random other document" (SPEC 1.3.5a) is drawn from the same block, not the whole corpus:
  the reference's own advice for big corpora (shard the input, SPEC 1.6a) gives the same
  locality, and it keeps memory bounded;
- the train split streams block by block to its shards; the eval documents (`eval_fraction` of
  the unit's text) are held until the read ends, then built the same way.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from albert_jax import files
from albert_jax.data import corpus
from albert_jax.data.building import example_bytes, instances, masking, shard_writer
from albert_jax.data.building.dataset_settings import DatasetSettings
from albert_jax.data.tokenizers import Tokenizer

SPLITS = ("eval", "train")  # the split index in the seeds
UNITS_DIR = "_units"
# Text per block: ~32k tokens, i.e. ~2,500 examples of 512 tokens at dupe_factor 40 (~8 MB
# serialized; short documents make more, shorter examples); big enough to hold many documents
# for the random-document draw.
BLOCK_CHARACTERS = 128 * 1024


# The last entry of the seed of a block's per-document pass draw: never a pass index.
_PASS_DRAW = 2**32 - 1


@dataclasses.dataclass(frozen=True)
class Unit:
    """Consecutive corpus parts (`corpus.plan_parts`, in corpus order) of one group of the
    corpus (a mixture's, or "" of a plain corpus), built together."""
    index: int
    sources: tuple[str, ...]
    group: str = ""


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """How a build reads one group of the corpus and how often it passes its documents.

    passes: dupe_factor x r_i, the passes of each document on average (dupe_factor itself for
    a plain corpus, r_i = 1).
    """
    reading: corpus.ReadSettings
    passes: float


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What every unit of one build shares (picklable: sent once to each worker).

    plan: the digest of the whole plan (settings, units, shard size), recorded in each manifest.
    groups: each group's `GroupPlan`, by name (a plain corpus: "").
    staging_dir: where a gs:// build writes each shard before uploading it (None: the system's
    temp folder).
    """
    settings: DatasetSettings
    tokenizer: Tokenizer
    masking_settings: masking.MaskingSettings
    dataset_dir: str
    shard_bytes: int
    plan: str
    groups: dict[str, GroupPlan]
    staging_dir: str | None = None

    @property
    def units_dir(self) -> epath.Path:
        return epath.Path(self.dataset_dir) / UNITS_DIR


def manifest_path(units_dir: epath.Path, unit_index: int) -> epath.Path:
    return units_dir / f"unit-{unit_index:05d}.json"


def read_manifest(units_dir: epath.Path, unit_index: int, plan: str) -> dict[str, Any] | None:
    """The manifest of a unit built under `plan`, or None (not built, or under another plan)."""
    try:
        manifest = json.loads(manifest_path(units_dir, unit_index).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return manifest if manifest.get("plan") == plan else None


def manifest_examples(manifest: dict[str, Any]) -> int:
    """The examples a unit made, over its splits."""
    return sum(split["counts"].get("instances", 0) for split in manifest["splits"].values())


def build_unit(context: BuildContext, unit: Unit) -> dict[str, Any]:
    """Builds `unit` into `context.units_dir` (shards, then the manifest); returns the manifest:
    {"plan", "unit", "sources", "corpus": CorpusStats fields, "splits": {split: {"shards":
    [{"file", "examples", "bytes"}], "counts": {documents, sentences, instances, blocks,
    empty_documents}}}}."""
    settings = context.settings
    group = context.groups[unit.group]
    splits = SPLITS if settings.eval_fraction > 0 else ("train",)
    reading = corpus.CorpusStats()
    held_eval_documents: list[list[str]] = []

    def train_documents() -> Iterator[list[str]]:
        for source in unit.sources:
            source_name = corpus.part_name(source)
            for document_index, document in enumerate(
                    corpus.read_documents(source, group.reading, reading)):
                if _is_eval_document(source_name, document_index, settings.eval_fraction):
                    held_eval_documents.append(document)
                else:
                    yield document

    manifest_splits = {}
    for split in ("train",) + tuple(split for split in splits if split != "train"):
        documents = train_documents() if split == "train" else iter(held_eval_documents)
        counts: collections.Counter = collections.Counter()
        examples = _split_examples(context, unit.index, SPLITS.index(split), documents,
                                   group.passes, counts)
        shards = shard_writer.write_unit_shards(
            examples, context.units_dir, f"unit-{unit.index:05d}-{split}",
            file_format=settings.file_format, shard_bytes=context.shard_bytes,
            staging_dir=context.staging_dir)
        manifest_splits[split] = {"shards": shards, "counts": dict(counts)}
    manifest = {"plan": context.plan, "unit": unit.index, "sources": list(unit.sources),
                "corpus": dataclasses.asdict(reading), "splits": manifest_splits}
    files.write_atomically(manifest_path(context.units_dir, unit.index),
                           json.dumps(manifest, indent=1))
    return manifest


def _is_eval_document(source_name: str, document_index: int, eval_fraction: float) -> bool:
    digest = hashlib.blake2b(f"{source_name}\0{document_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < eval_fraction * 2.0 ** 64


def _blocks(documents: Iterable[list[str]]) -> Iterator[list[list[str]]]:
    """`documents` in blocks of >= BLOCK_CHARACTERS of text (but the last)."""
    block, characters = [], 0
    for document in documents:
        block.append(document)
        characters += sum(map(len, document))
        if characters >= BLOCK_CHARACTERS:
            yield block
            block, characters = [], 0
    if block:
        yield block


def _split_examples(context: BuildContext, unit_index: int, split_index: int,
                    documents: Iterable[list[str]], passes: float, counts: collections.Counter
                    ) -> Iterator[bytes]:
    """The serialized examples of one split of a unit, block by block; counts into `counts`."""
    for block_index, block in enumerate(_blocks(documents)):
        examples, block_counts = block_examples(
            context.settings, context.tokenizer, context.masking_settings, block,
            seed_prefix=(split_index, unit_index, block_index), passes=passes)
        counts.update(block_counts)
        yield from examples


@functools.cache
def _example_serializer(seq_len: int, max_predictions: int) -> Callable[[dict], bytes]:
    """Feature dict -> bytes: the tf.Example TFDS's writer makes (split_builder: encode, then the
    serializer of the features' serialized info), serialized with its feature map sorted by name,
    written directly by `example_bytes` (byte for byte TFDS's `SerializeToString(
    deterministic=True)`, a fraction of its time).

    TFDS's own `SerializeToString()` writes the map in an order that changes from process to
    process (protobuf's hash seed), so its shards differ from run to run; sorted, the bytes
    depend only on the example (any order parses the same)."""
    return example_bytes.ExampleEncoder(
        {name: (feature.shape, feature.np_dtype)
         for name, feature in example_features(seq_len, max_predictions).items()})


def example_features(seq_len: int, max_predictions: int) -> tfds.features.FeaturesDict:
    """SPEC 1.5 features, as int32/float32 tensors of fixed shape (SPEC 5.1 reads them so)."""
    def tensor(length: int, dtype: type = np.int32) -> tfds.features.Tensor:
        return tfds.features.Tensor(shape=(length,), dtype=dtype)

    return tfds.features.FeaturesDict({
        "input_ids": tensor(seq_len),
        "input_mask": tensor(seq_len),
        "segment_ids": tensor(seq_len),
        "token_boundary": tensor(seq_len),
        "masked_lm_positions": tensor(max_predictions),
        "masked_lm_ids": tensor(max_predictions),
        "masked_lm_weights": tensor(max_predictions, np.float32),
        "next_sentence_labels": tensor(1),
    })


def document_passes(passes: float, num_documents: int,
                    rng: np.random.Generator) -> np.ndarray:
    """int [num_documents]: how many passes each document gets, `passes` on average: the whole
    part of `passes`, plus one with the probability of its fraction (drawn from `rng`, one
    draw a document; none when `passes` is whole)."""
    whole = int(np.floor(passes))
    fraction = passes - whole
    if fraction == 0:
        return np.full(num_documents, whole)
    return whole + (rng.random(num_documents) < fraction)


def block_examples(settings: DatasetSettings, tokenizer: Tokenizer,
                   masking_settings: masking.MaskingSettings, documents: list[list[str]], *,
                   seed_prefix: tuple[int, ...], passes: float | None = None
                   ) -> tuple[list[bytes], dict[str, int]]:
    """Tokenize a block, then passes of instances (SPEC 1.3) and masks (SPEC 1.4), pass p
    seeded with `SeedSequence([settings.seed, *seed_prefix, p])` and taking the documents with
    more than p passes (`document_passes`, drawn with `SeedSequence([settings.seed,
    *seed_prefix, _PASS_DRAW])`); `passes` is a mixture group's dupe_factor x r_i (None:
    dupe_factor, every document in every pass). The serialized examples in pass order, and
    counts of what was done."""
    per_document = document_passes(
        settings.dupe_factor if passes is None else passes, len(documents),
        np.random.default_rng(np.random.SeedSequence([settings.seed, *seed_prefix, _PASS_DRAW])))
    tokenized, document_pass_counts, sentences = [], [], 0
    for document, document_pass_count in zip(documents, per_document):
        encoded = [ids for ids in map(tokenizer.encode, document) if ids.size]
        sentences += len(encoded)
        if encoded:
            tokenized.append(encoded)
            document_pass_counts.append(document_pass_count)
    special_ids = masking_settings.special_ids
    serialize = _example_serializer(settings.seq_len, settings.max_predictions)
    examples: list[bytes] = []
    for dupe_pass in range(max(document_pass_counts, default=0)):
        rng = np.random.default_rng(np.random.SeedSequence(
            [settings.seed, *seed_prefix, dupe_pass]))
        in_pass = [document for document, count in zip(tokenized, document_pass_counts)
                   if count > dupe_pass]
        for instance in instances.create_instances(
                in_pass, rng, max_seq_length=settings.seq_len,
                short_seq_prob=settings.short_seq_prob,
                sentence_objective=settings.sentence_objective,
                reference_compat=settings.reference_compat,
                cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id):
            boundary = masking.token_boundary(instance.tokens, tokenizer.word_start, special_ids)
            examples.append(serialize(masking.mask_instance(instance, boundary, rng,
                                                            masking_settings)))
    counts = dict(documents=len(documents), sentences=sentences, instances=len(examples),
                  blocks=1, empty_documents=len(documents) - len(tokenized))
    return examples, counts
