"""The TFDS builder that turns a corpus into ALBERT pretraining examples (SPEC 1), sharded.

  albert-jax data build --config=configs/pretrain.py:size=base     # `build_from_config`

writes `<config.data.dir>/albert_pretraining/<config name>/1.0.0/` with ArrayRecord shards (or
TFRecord, which needs TensorFlow) of the SPEC 1.5 features and two splits, `train` and `eval`.
Read it with `pipeline.make_iterator`, or with plain TFDS (no TensorFlow needed):

  tfds.data_source("albert_pretraining/<config name>", data_dir=config.data.dir)
  tfds.builder_from_directory(builder.dataset_dir(config))

The config name ends in a hash of everything that changes the data (the corpus files' names and
sizes, the tokenizer file's bytes, seq_len, masking and instance settings, dupe_factor, seed,
format), so two different configs never share a folder, and a finished folder is reused as is
(also from another machine where the corpus lies under another path).

How the work is cut up (bounded memory, every core, deterministic):
- The main process streams the corpus source by source (`corpus.read_documents`) and cuts the
  document stream of each split into blocks of about BLOCK_CHARACTERS of text (documents are
  never split; blocks may span sources). Only a few blocks are in memory at a time: neither the
  corpus nor corpus x dupe_factor is ever held.
- Worker processes (one per core, `spawn`) tokenize a block and run `dupe_factor` passes of
  SPEC 1.3 instance creation + SPEC 1.4 masking over it. The SOP/NSP "random other document"
  (SPEC 1.3.5a) is drawn from the same block, not the whole corpus: a block holds tens to
  thousands of documents, the reference's own advice for big corpora (shard the input, SPEC
  1.6a) gives the same locality, and it is what keeps memory bounded.
- Pass p of block b of split s uses `np.random.SeedSequence([seed, s, b, p])`: passes differ
  (target lengths, pairs, masks), and results come back in block order, so the shards are
  byte-identical for one config whatever the number of processes.
- Documents go to `eval` by a hash of (source file name, document index in it) below
  `eval_fraction`, so the hold-out never moves when other files are added.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import itertools
import multiprocessing
import os
import platform
import time
from typing import Any, Callable, Iterable, Iterator

import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from albert_jax.data import corpus, instances, masking
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError

NAME = "albert_pretraining"
DATASET_VERSION = "1.0.0"
SPLITS = ("eval", "train")  # eval first: an empty eval split fails before the long train split.
FORMATS = ("array_record", "tfrecord")
OBJECTIVES = ("sop", "nsp", "none")
# Text per work unit: ~32k tokens, i.e. ~2,500 examples of 512 tokens at dupe_factor 40 (~20 MB
# of features) per block in flight; big enough to hold many documents for the random-document
# draw, small enough that the 1.3 MB demo corpus still spreads over several cores.
BLOCK_CHARACTERS = 128 * 1024
_BASE_CONFIG_FIELDS = frozenset(field.name for field in dataclasses.fields(tfds.core.BuilderConfig))


@dataclasses.dataclass(eq=False)
class PretrainingConfig(tfds.core.BuilderConfig):
    """Everything that changes the written examples; `name` is derived from it by `from_config`."""
    corpus: str = corpus.DEMO
    corpus_signature: str = ""  # file names and sizes (a changed file gets a new folder)
    tokenizer: str = ""
    tokenizer_sha256: str = ""
    do_lower_case: bool = True
    seq_len: int = 512
    max_predictions: int = 20
    masked_lm_prob: float = 0.15
    max_ngram: int = 3
    favor_shorter_ngram: bool = True
    short_seq_prob: float = 0.1
    dupe_factor: int = 40
    sentence_objective: str = "sop"
    reference_compat: bool = False
    eval_fraction: float = 0.01
    seed: int = 12345
    file_format: str = "array_record"

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> "PretrainingConfig":
        """The builder config of a run config; checks the values and the tokenizer file first."""
        data = config.data
        _check_settings(config)
        tokenizer_path = epath.Path(data.tokenizer)
        if not tokenizer_path.exists():
            raise FileNotFoundError(
                f"config.data.tokenizer={data.tokenizer!r} does not exist; train one with "
                f"`albert-jax tokenizer train --config=...` (same config) or point "
                f"--config.data.tokenizer at a SentencePiece model such as 30k-clean.model")
        settings = dict(
            corpus=data.corpus, corpus_signature=_corpus_signature(data.corpus),
            tokenizer=os.fspath(data.tokenizer),
            tokenizer_sha256=hashlib.sha256(tokenizer_path.read_bytes()).hexdigest(),
            do_lower_case=bool(data.do_lower_case), seq_len=int(config.seq_len),
            max_predictions=int(data.max_predictions), masked_lm_prob=float(data.masked_lm_prob),
            max_ngram=int(data.max_ngram), favor_shorter_ngram=bool(data.favor_shorter_ngram),
            short_seq_prob=float(data.short_seq_prob), dupe_factor=int(data.dupe_factor),
            sentence_objective=str(data.sentence_objective),
            reference_compat=bool(data.reference_compat), eval_fraction=float(data.eval_fraction),
            seed=int(config.seed), file_format=str(data.format))
        # Paths are not part of the identity: a moved corpus or a copied tokenizer file (same
        # names, sizes and bytes) gives the same data, so it finds the same folder.
        identity = {key: value for key, value in settings.items()
                    if key not in ("corpus", "tokenizer")}
        digest = hashlib.sha256(repr(sorted(identity.items())).encode()).hexdigest()[:12]
        name = (f"seq{settings['seq_len']}_pred{settings['max_predictions']}_"
                f"dupe{settings['dupe_factor']}_{settings['sentence_objective']}_{digest}")
        description = ", ".join(f"{key}={value!r}" for key, value in settings.items())
        return cls(name=name, description=description, **settings)


def _check_settings(config: ml_collections.ConfigDict) -> None:
    data = config.data
    problems = []
    if config.seq_len < 8:
        problems.append(f"seq_len={config.seq_len} (need >= 8: [CLS] A [SEP] B [SEP])")
    if data.max_predictions < 1:
        problems.append(f"data.max_predictions={data.max_predictions} (need >= 1)")
    if not 0.0 < data.masked_lm_prob <= 1.0:
        problems.append(f"data.masked_lm_prob={data.masked_lm_prob} (need 0 < p <= 1)")
    if data.max_ngram < 1:
        problems.append(f"data.max_ngram={data.max_ngram} (need >= 1)")
    if not 0.0 <= data.short_seq_prob <= 1.0:
        problems.append(f"data.short_seq_prob={data.short_seq_prob} (need 0 <= p <= 1)")
    if data.dupe_factor < 1:
        problems.append(f"data.dupe_factor={data.dupe_factor} (need >= 1)")
    if data.sentence_objective not in OBJECTIVES:
        problems.append(f"data.sentence_objective={data.sentence_objective!r} (one of {OBJECTIVES})")
    if not 0.0 <= data.eval_fraction < 1.0:
        problems.append(f"data.eval_fraction={data.eval_fraction} (need 0 <= f < 1)")
    if data.format not in FORMATS:
        problems.append(f"data.format={data.format!r} (one of {FORMATS})")
    if problems:
        raise ConfigError("cannot build pretraining data: " + "; ".join(problems))
    if data.format == "tfrecord":
        try:
            import tensorflow  # noqa: F401  (TFDS writes TFRecord files through TensorFlow)
        except ImportError:
            raise ConfigError(
                "config.data.format='tfrecord' needs TensorFlow: `pip install albert-jax[tf]`, or "
                "keep the default 'array_record' (what the grain pipeline reads)") from None


def _corpus_signature(corpus_spec: str) -> str:
    """The corpus sources in order: file names with sizes, TFDS names, or the demo corpus with
    the Python version it comes from."""
    parts = []
    for source in corpus.list_sources(corpus_spec):
        if source == corpus.DEMO:
            parts.append(f"{source}@python{platform.python_version()}")
        elif source.startswith(corpus.TFDS_PREFIX):
            parts.append(source)
        else:
            parts.append(f"{os.path.basename(source)}:{os.path.getsize(source)}")
    return ";".join(parts)


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


class AlbertPretraining(tfds.core.GeneratorBasedBuilder):
    """SOP/NSP instances with n-gram masks (SPEC 1.3-1.5), `train` and `eval` splits.

    Construct with `make_builder(config)`; the builder config comes from the run config.
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

    def __init__(self, *, config: PretrainingConfig, num_processes: int | None = None,
                 tokenizer: Tokenizer | None = None, **kwargs: Any):
        self.num_processes = num_processes or os.cpu_count() or 1
        self._tokenizer = tokenizer
        super().__init__(config=config, **kwargs)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            config = self.builder_config
            self._tokenizer = Tokenizer.load(config.tokenizer, lower=config.do_lower_case)
        return self._tokenizer

    def _info(self) -> tfds.core.DatasetInfo:
        config = self.builder_config
        return tfds.core.DatasetInfo(
            builder=self,
            description="ALBERT pretraining examples (arXiv 1909.11942): sentence pairs with "
                        "n-gram masked-LM targets and sentence-order labels.",
            features=example_features(config.seq_len, config.max_predictions),
            metadata=tfds.core.MetadataDict(),
            homepage="https://github.com/google-research/albert",
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Any]:
        del dl_manager  # Nothing to download: the corpus is read where it lies.
        tokenizer = self.tokenizer
        self.info.metadata.update(
            vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id, unk_id=tokenizer.unk_id,
            settings={field.name: getattr(self.builder_config, field.name)
                      for field in dataclasses.fields(PretrainingConfig)
                      if field.name not in _BASE_CONFIG_FIELDS},
            splits={})
        splits = SPLITS if self.builder_config.eval_fraction > 0 else ("train",)
        return {split: self._generate_examples(split) for split in splits}

    def _generate_examples(self, split: str) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        config = self.builder_config
        counts = collections.Counter()
        reading = corpus.CorpusStats()
        blocks = _document_blocks(config, split, reading)
        task = _BlockTask(settings=_MaskingSettings.from_config(config),
                          split_index=SPLITS.index(split))
        results = _map_in_order(task, enumerate(blocks), self.num_processes,
                                initializer=_set_worker_tokenizer, initargs=(self.tokenizer,))
        for block_index, result in enumerate(results):
            counts.update(result.counts)
            for row in range(result.counts["instances"]):
                yield f"{block_index}:{row}", {name: values[row]
                                               for name, values in result.features.items()}
        if not counts["instances"]:
            raise ValueError(
                f"the {split!r} split of corpus {config.corpus!r} has no examples "
                f"({counts['documents']} documents; corpus: {reading.report()}); "
                + ("raise --config.data.eval_fraction or use a bigger corpus" if split == "eval"
                   else "use a corpus with multi-sentence documents (blank line between them)"))
        self.info.metadata["splits"][split] = dict(counts) | {"corpus": reading.report()}


def make_builder(config: ml_collections.ConfigDict, *,
                 num_processes: int | None = None) -> AlbertPretraining:
    """The builder of a run config (checks it and the tokenizer file; builds nothing)."""
    builder_config = PretrainingConfig.from_config(config)
    tokenizer = Tokenizer.load(config.data.tokenizer, lower=config.data.do_lower_case)
    if tokenizer.vocab_size > config.data.vocab_size:
        raise ConfigError(
            f"tokenizer {config.data.tokenizer} has {tokenizer.vocab_size} pieces but "
            f"config.data.vocab_size={config.data.vocab_size} (the model's embedding rows): set "
            f"--config.data.vocab_size={tokenizer.vocab_size}")
    return AlbertPretraining(config=builder_config, data_dir=os.fspath(config.data.dir),
                             file_format=builder_config.file_format, num_processes=num_processes,
                             tokenizer=tokenizer)


def dataset_dir(config: ml_collections.ConfigDict) -> str:
    """The folder holding dataset_info.json for `config` (whether built or not yet).

    Same as `make_builder(config).data_dir`, without constructing a TFDS builder."""
    return os.path.join(os.fspath(config.data.dir), NAME,
                        PretrainingConfig.from_config(config).name, DATASET_VERSION)


def build_from_config(config: ml_collections.ConfigDict, *,
                      num_processes: int | None = None) -> str:
    """`albert-jax data build`: builds the dataset of `config` unless it exists; returns its folder.

    Prints what it did: documents, sentences and instances per split, skipped input and why,
    seconds and examples per second.
    """
    builder = make_builder(config, num_processes=num_processes)
    if builder.is_prepared():
        splits = ", ".join(f"{name} {info.num_examples}" for name, info in builder.info.splits.items())
        print(f"dataset exists: {builder.data_dir} ({splits} examples); nothing to do "
              f"(delete the folder to rebuild)")
        return builder.data_dir
    tfds.disable_progress_bar()
    print(f"building {builder.data_dir}\n  from corpus {config.data.corpus!r} with "
          f"{builder.num_processes} processes")
    start = time.time()
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    seconds = time.time() - start
    total = 0
    for split, counts in builder.info.metadata["splits"].items():
        total += counts["instances"]
        print(f"  {split}: {counts['documents']} documents, {counts['sentences']} sentences, "
              f"{counts['instances']} instances ({counts['blocks']} blocks x "
              f"{config.data.dupe_factor} passes); "
              f"{counts['empty_documents']} documents empty after tokenization, skipped")
    print(f"  corpus read: {builder.info.metadata['splits']['train']['corpus']}")
    print(f"  {total} examples in {seconds:.1f}s ({total / seconds:.0f} examples/s)")
    return builder.data_dir


# ---------------------------------------------------------------------------------------------
# The work: blocks of documents in, stacked features out (runs in worker processes).

def _is_eval_document(source_name: str, document_index: int, eval_fraction: float) -> bool:
    digest = hashlib.blake2b(f"{source_name}\0{document_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < eval_fraction * 2.0 ** 64


def _document_blocks(config: PretrainingConfig, split: str,
                     reading: corpus.CorpusStats) -> Iterator[list[list[str]]]:
    """The documents of `split`, in corpus order, in blocks of >= BLOCK_CHARACTERS (but the last)."""
    block, characters = [], 0
    for source in corpus.list_sources(config.corpus):
        source_name = os.path.basename(source.rstrip("/"))
        for document_index, document in enumerate(corpus.read_documents(source, reading)):
            if _is_eval_document(source_name, document_index, config.eval_fraction) != (split == "eval"):
                continue
            block.append(document)
            characters += sum(map(len, document))
            if characters >= BLOCK_CHARACTERS:
                yield block
                block, characters = [], 0
    if block:
        yield block


@dataclasses.dataclass(frozen=True)
class _MaskingSettings:
    """What a worker needs besides the tokenizer (small and picklable)."""
    seed: int
    dupe_factor: int
    seq_len: int
    max_predictions: int
    masked_lm_prob: float
    max_ngram: int
    favor_shorter_ngram: bool
    short_seq_prob: float
    sentence_objective: str
    reference_compat: bool

    @classmethod
    def from_config(cls, config: PretrainingConfig) -> "_MaskingSettings":
        return cls(**{field.name: getattr(config, field.name)
                      for field in dataclasses.fields(cls)})


@dataclasses.dataclass
class _BlockResult:
    features: dict[str, np.ndarray]  # name -> [instances, ...] over all passes, in pass order
    counts: dict[str, int]


_WORKER_TOKENIZER: list[Tokenizer] = []  # set once per process by `_set_worker_tokenizer`


def _set_worker_tokenizer(tokenizer: Tokenizer) -> None:
    _WORKER_TOKENIZER[:] = [tokenizer]


@dataclasses.dataclass(frozen=True)
class _BlockTask:
    """Tokenize a block, then `dupe_factor` passes of instances (SPEC 1.3) and masks (SPEC 1.4)."""
    settings: _MaskingSettings
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
        special_ids = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
        rows: list[dict[str, np.ndarray]] = []
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
                masked = masking.mask_sequence(
                    instance.tokens, boundary, rng, max_predictions=settings.max_predictions,
                    masked_lm_prob=settings.masked_lm_prob, max_ngram=settings.max_ngram,
                    favor_shorter_ngram=settings.favor_shorter_ngram,
                    vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                    special_ids=special_ids)
                rows.append(masking.to_features(instance, masked, boundary,
                                                seq_len=settings.seq_len,
                                                max_predictions=settings.max_predictions))
        features = {name: np.stack([row[name] for row in rows]) for name in rows[0]} if rows else {}
        counts = dict(documents=len(documents), sentences=sentences, instances=len(rows),
                      blocks=1,
                      empty_documents=len(documents) - len(tokenized))
        return _BlockResult(features=features, counts=counts)


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
