"""The TFDS builder that turns a corpus into ALBERT pretraining examples (SPEC 1), sharded.

  albert-jax data build --config=configs/pretrain.py:size=base     # `build_from_config`

writes `dataset_settings.dataset_dir(config)` = `<config.data.dir>/albert_pretraining/<name>/1.0.0/`
(a local folder or gs://) with ArrayRecord shards (or TFRecord, which needs TensorFlow) of the
SPEC 1.5 features and two splits, `train` and `eval`; `<name>` is that of the
`dataset_settings.DatasetSettings` of the run config (its TFDS builder config), a hash of
everything that changes the data. The files are TFDS's, written by `shard_writer` (not TFDS's
shuffling writer): shards in block order as they are made, the metadata last, so a folder without
dataset_info.json is an unfinished build that the next build deletes and redoes. A gs://
`config.data.dir` is built through a local staging folder (`config.data.staging_dir`, default the
system's temp folder), one shard at a time. Read it with `pipeline.make_iterator`, or with plain
TFDS (no TensorFlow needed):

  tfds.data_source("albert_pretraining/<name>", data_dir=config.data.dir)
  tfds.builder_from_directory(dataset_settings.dataset_dir(config))

How the work is cut up (memory flat in corpus size, every core, deterministic):
- The main process streams the corpus source by source (`corpus.read_documents`) and cuts the
  document stream of each split into blocks of about BLOCK_CHARACTERS of text (documents are
  never split; blocks may span sources). Only a few blocks are in memory at a time: neither the
  corpus nor corpus x dupe_factor is ever held.
- Worker processes (one per core, `spawn`) tokenize a block, run `dupe_factor` passes of
  SPEC 1.3 instance creation + SPEC 1.4 masking over it and serialize the examples as TFDS does;
  the main process only writes them out. The SOP/NSP "random other document"
  (SPEC 1.3.5a) is drawn from the same block, not the whole corpus: a block holds tens to
  thousands of documents, the reference's own advice for big corpora (shard the input, SPEC
  1.6a) gives the same locality, and it is what keeps memory bounded.
- Pass p of block b of split s uses `np.random.SeedSequence([seed, s, b, p])`: passes differ
  (target lengths, pairs, masks), and results come back and are written in block order, so the
  shards are byte-identical for one config whatever the number of processes. Nothing is
  shuffled at write time: the pipeline shuffles example indices with a seed when it reads.
- Documents go to `eval` by a hash of (source file name, document index in it) below
  `eval_fraction`, so the hold-out never moves when other files are added.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import itertools
import multiprocessing
import os
import time
from typing import Any, Callable, Iterable, Iterator

import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core.dataset_builder import FileReaderBuilder

from albert_jax.data import corpus, example_bytes, instances, masking, shard_writer
from albert_jax.data.dataset_settings import DATASET_VERSION, DatasetSettings
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError

SPLITS = ("eval", "train")  # eval first: an empty eval split fails before the long train split.
# Text per work unit: ~32k tokens, i.e. ~2,500 examples of 512 tokens at dupe_factor 40 (~8 MB
# serialized; short documents make more, shorter examples) per block in flight, 2 per process;
# big enough to hold many documents for the random-document draw, small enough that the 1.3 MB
# demo corpus still spreads over several cores.
BLOCK_CHARACTERS = 128 * 1024


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


class AlbertPretraining(FileReaderBuilder):
    """SOP/NSP instances with n-gram masks (SPEC 1.3-1.5), `train` and `eval` splits.

    Construct with `make_builder(config)`; its builder config, the `DatasetSettings`, comes
    from the run config. Build with `build_from_config` (TFDS's `download_and_prepare` is not
    used: its writer shuffles a split in memory and needs TensorFlow past 1 GB).
    Metadata (metadata.json): the special token ids and vocab size (for dynamic masking and
    `data inspect`), and per-split counts of what the build did.
    """

    VERSION = tfds.core.Version(DATASET_VERSION)
    RELEASE_NOTES = {DATASET_VERSION: "SPEC 1 instances and masks; held-out documents in `eval`."}

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        # TFDS's own lookup needs the `importlib_resources` backport for a class in an installed
        # package (it is not a TFDS dependency); the answer is simply this file.
        return epath.Path(__file__)

    def __init__(self, *, config: DatasetSettings, num_processes: int | None = None,
                 tokenizer: Tokenizer | None = None, **kwargs: Any):
        self.num_processes = num_processes or os.cpu_count() or 1
        self._tokenizer = tokenizer
        super().__init__(config=config, **kwargs)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            settings = self.builder_config
            self._tokenizer = Tokenizer.load(settings.tokenizer, lower=settings.do_lower_case,
                                             comma_rule=settings.comma_rule)
        return self._tokenizer

    def _info(self) -> tfds.core.DatasetInfo:
        settings = self.builder_config
        return tfds.core.DatasetInfo(
            builder=self,
            description="ALBERT pretraining examples (arXiv 1909.11942): sentence pairs with "
                        "n-gram masked-LM targets and sentence-order labels.",
            features=example_features(settings.seq_len, settings.max_predictions),
            metadata=tfds.core.MetadataDict(),
            homepage="https://github.com/google-research/albert",
        )

    def _download_and_prepare(self, dl_manager: Any, download_config: Any = None) -> None:
        raise NotImplementedError(
            "build albert_pretraining with `albert-jax data build` (builder.build_from_config)")

    def write(self, writer: shard_writer.ShardWriter) -> None:
        """Builds every split into `writer`, then the metadata (last)."""
        tokenizer = self.tokenizer
        self.info.metadata.update(
            vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id, unk_id=tokenizer.unk_id,
            settings=self.builder_config.as_dict(),
            splits={})
        splits = SPLITS if self.builder_config.eval_fraction > 0 else ("train",)
        self.info.set_splits(tfds.core.SplitDict(
            [writer.write_split(split, self._serialized_examples(split)) for split in splits]))
        writer.finish(self.info)

    def _serialized_examples(self, split: str) -> Iterator[bytes]:
        """The examples of `split`, serialized as TFDS does, in block order; counts what it did
        into the metadata at the end."""
        settings = self.builder_config
        counts = collections.Counter()
        reading = corpus.CorpusStats()
        blocks = _document_blocks(settings, split, reading)
        # From the metadata, as dynamic masking (pipeline.py) makes them: the same masking.
        masking_settings = masking.MaskingSettings.from_metadata(self.info.metadata)
        task = _BlockTask(settings=settings, masking_settings=masking_settings,
                          split_index=SPLITS.index(split))
        results = _map_in_order(task, enumerate(blocks), self.num_processes,
                                initializer=_set_worker_tokenizer, initargs=(self.tokenizer,))
        for result in results:
            counts.update(result.counts)
            yield from result.examples
        if not counts["instances"]:
            raise ValueError(
                f"the {split!r} split of corpus {settings.corpus!r} has no examples "
                f"({counts['documents']} documents; corpus: {reading.report()}); "
                + ("raise --config.data.eval_fraction or use a bigger corpus" if split == "eval"
                   else "use a corpus with multi-sentence documents (blank line between them)"))
        self.info.metadata["splits"][split] = dict(counts) | {"corpus": reading.report()}


def make_builder(config: ml_collections.ConfigDict, *,
                 num_processes: int | None = None) -> AlbertPretraining:
    """The builder of a run config (checks it and the tokenizer file; builds nothing)."""
    settings = DatasetSettings.from_run_config(config)
    tokenizer = Tokenizer.load(config.data.tokenizer, lower=config.data.do_lower_case,
                               comma_rule=settings.comma_rule)
    if tokenizer.vocab_size > config.data.vocab_size:
        raise ConfigError(
            f"tokenizer {config.data.tokenizer} has {tokenizer.vocab_size} pieces but "
            f"config.data.vocab_size={config.data.vocab_size} (the model's embedding rows): set "
            f"--config.data.vocab_size={tokenizer.vocab_size}")
    return AlbertPretraining(config=settings, data_dir=os.fspath(config.data.dir),
                             file_format=settings.file_format, num_processes=num_processes,
                             tokenizer=tokenizer)


def build_from_config(config: ml_collections.ConfigDict, *, num_processes: int | None = None) -> str:
    """`albert-jax data build`: builds the dataset of `config` unless it exists; returns its folder.

    Prints what it did: documents, sentences and instances per split, skipped input and why,
    shards, seconds and examples per second. Shards hold about `config.data.shard_bytes` of
    serialized examples.
    """
    builder = make_builder(config, num_processes=num_processes)
    if builder.is_prepared():
        splits = ", ".join(f"{name} {info.num_examples}" for name, info in builder.info.splits.items())
        print(f"dataset exists: {builder.data_dir} ({splits} examples); nothing to do "
              f"(delete the folder to rebuild)")
        return builder.data_dir
    print(f"building {builder.data_dir}\n  from {builder.builder_config.description}\n"
          f"  with {builder.num_processes} processes")
    start = time.time()
    with shard_writer.ShardWriter(builder.data_dir, dataset_name=builder.name,
                                  file_format=builder.builder_config.file_format,
                                  staging_dir=config.data.get("staging_dir"),
                                  shard_bytes=int(config.data.get("shard_bytes",
                                                                  shard_writer.SHARD_BYTES))
                                  ) as writer:
        builder.write(writer)
    seconds = time.time() - start
    total = 0
    for split, counts in builder.info.metadata["splits"].items():
        total += counts["instances"]
        split_info = builder.info.splits[split]
        print(f"  {split}: {counts['documents']} documents, {counts['sentences']} sentences, "
              f"{counts['instances']} instances ({counts['blocks']} blocks x "
              f"{config.data.dupe_factor} passes) in {split_info.num_shards} shards of "
              f"{split_info.num_bytes / 2**20:.1f} MB; "
              f"{counts['empty_documents']} documents empty after tokenization, skipped")
    print(f"  corpus read: {builder.info.metadata['splits']['train']['corpus']}")
    print(f"  {total} examples in {seconds:.1f}s ({total / seconds:.0f} examples/s)")
    return builder.data_dir


# ---------------------------------------------------------------------------------------------
# The work: blocks of documents in, serialized examples out (runs in worker processes).

def _is_eval_document(source_name: str, document_index: int, eval_fraction: float) -> bool:
    digest = hashlib.blake2b(f"{source_name}\0{document_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < eval_fraction * 2.0 ** 64


def _document_blocks(settings: DatasetSettings, split: str,
                     reading: corpus.CorpusStats) -> Iterator[list[list[str]]]:
    """The documents of `split`, in corpus order, in blocks of >= BLOCK_CHARACTERS (but the last)."""
    block, characters = [], 0
    for source in corpus.list_sources(settings.corpus):
        source_name = os.path.basename(source.rstrip("/"))
        for document_index, document in enumerate(corpus.read_documents(source, reading)):
            if _is_eval_document(source_name, document_index, settings.eval_fraction) != (split == "eval"):
                continue
            block.append(document)
            characters += sum(map(len, document))
            if characters >= BLOCK_CHARACTERS:
                yield block
                block, characters = [], 0
    if block:
        yield block


@dataclasses.dataclass
class _BlockResult:
    examples: list[bytes]  # serialized as TFDS does, over all passes, in pass order
    counts: dict[str, int]


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


_WORKER_TOKENIZER: list[Tokenizer] = []  # set once per process by `_set_worker_tokenizer`


def _set_worker_tokenizer(tokenizer: Tokenizer) -> None:
    _WORKER_TOKENIZER[:] = [tokenizer]


@dataclasses.dataclass(frozen=True)
class _BlockTask:
    """Tokenize a block, then `dupe_factor` passes of instances (SPEC 1.3) and masks (SPEC 1.4)."""
    settings: DatasetSettings
    masking_settings: masking.MaskingSettings
    split_index: int

    def __call__(self, indexed_block: tuple[int, list[list[str]]]) -> _BlockResult:
        block_index, documents = indexed_block
        tokenizer, settings = _WORKER_TOKENIZER[0], self.settings
        tokenized, sentences = [], 0
        for document in documents:
            encoded = [ids for ids in map(tokenizer.encode, document) if ids.size]
            sentences += len(encoded)
            if encoded:
                tokenized.append(encoded)
        special_ids = self.masking_settings.special_ids
        serialize = _example_serializer(settings.seq_len, settings.max_predictions)
        examples: list[bytes] = []
        for dupe_pass in range(settings.dupe_factor):
            rng = np.random.default_rng(np.random.SeedSequence(
                [settings.seed, self.split_index, block_index, dupe_pass]))
            for instance in instances.create_instances(
                    tokenized, rng, max_seq_length=settings.seq_len,
                    short_seq_prob=settings.short_seq_prob,
                    sentence_objective=settings.sentence_objective,
                    reference_compat=settings.reference_compat,
                    cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id):
                boundary = masking.token_boundary(instance.tokens, tokenizer.word_start, special_ids)
                examples.append(serialize(masking.mask_instance(instance, boundary, rng,
                                                                self.masking_settings)))
        counts = dict(documents=len(documents), sentences=sentences, instances=len(examples),
                      blocks=1, empty_documents=len(documents) - len(tokenized))
        return _BlockResult(examples=examples, counts=counts)


def _map_in_order(function: Callable[[Any], Any], tasks: Iterable[Any], processes: int, *,
                  initializer: Callable[..., None], initargs: tuple) -> Iterator[Any]:
    """`map(function, tasks)` over worker processes, in task order, <= 2 tasks/process in flight.

    `Pool.imap` would read all of `tasks` (the whole corpus) ahead of the workers; this window
    keeps memory bounded. A worker that dies raises BrokenProcessPool instead of hanging. One
    task (or one process) runs inline, without a pool.
    """
    tasks = iter(tasks)
    first = list(itertools.islice(tasks, 2))
    if processes <= 1 or len(first) < 2:
        initializer(*initargs)
        yield from map(function, itertools.chain(first, tasks))
        return
    # spawn: the parent may hold threads (JAX, TFDS) that make fork unsafe.
    with concurrent.futures.ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"),
            initializer=initializer, initargs=initargs) as pool:
        pending: collections.deque[concurrent.futures.Future] = collections.deque()
        for task in itertools.chain(first, tasks):
            pending.append(pool.submit(function, task))
            if len(pending) >= 2 * processes:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
