"""The TFDS builder that turns a corpus into ALBERT pretraining examples (SPEC 1), sharded.

  albert-jax data build --config=configs/pretrain.py:size=base     # `build_from_config`
  albert-jax data build --config=... --beam_pipeline_options="runner=DataflowRunner,..."

writes `dataset_settings.dataset_dir(config)` = `<config.data.dir>/albert_pretraining/<name>/2.0.0/`
(a local folder or gs://) with ArrayRecord shards (or TFRecord, which needs TensorFlow) of the
SPEC 1.5 features and two splits, `train` and `eval`; `<name>` is that of the
`dataset_settings.DatasetSettings` of the run config (its TFDS builder config), a hash of
everything that changes the data. Read it with `pipeline.make_iterator`, or with plain TFDS (no
TensorFlow needed):

  tfds.data_source("albert_pretraining/<name>", data_dir=config.data.dir)
  tfds.builder_from_directory(dataset_settings.dataset_dir(config))

One plan, two executors. The build is a list of units fixed by the config and the corpus alone,
never by the number of workers: consecutive corpus parts of about `data.unit_bytes` of text
(`corpus.plan_parts`: a file, or a byte range of a larger uncompressed text or JSON Lines file,
or a range of row groups of a larger Parquet file; a compressed file is whole; the demo corpus
and each shard file of a TFDS split are one unit each). `build_unit.build_unit` builds one unit into its own shard files and a manifest; a
local process pool (the default: one process per core, no Beam needed) or an Apache Beam
pipeline (`beam_build.py`: Dataflow, Flink, Spark, or Beam's local FnApiRunner) runs it over the
units, and this process finalizes: the units' shards renamed to TFDS's names in unit order, the
metadata last (dataset_info.json last of all: a folder without it is unfinished). No text or
example crosses between workers (no GroupByKey), so memory per worker is flat in the corpus
size, and the shards are byte-identical whoever ran the units and however many.

A mixture (`data.corpus` a dict of groups, `corpus.mixture`) is planned group by group (a unit
holds parts of one group); the groups' characters are counted once, before the first unit, a
unit at a time on the build's runner (a first Beam pipeline, or the pool), and kept in the
plan, so the pool, Beam and a resumed build pass each group's documents the same dupe_factor x
r_i times (`build_unit.document_passes`) and write the same bytes.

Resumable and safe: a build killed at any moment and run again builds only the units without a
manifest and ends with the same bytes (`_units/plan.json` records the plan; a folder left by
another plan is cleared first). One build per folder at a time: `<folder>/build.lock`
(`file_lock`) refuses a second one in one line.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import itertools
import json
import multiprocessing
import os
import time
from typing import Any

import ml_collections
import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core.dataset_builder import FileReaderBuilder

from albert_jax import file_lock, files
from albert_jax.data import corpus
from albert_jax.data.building import build_unit, masking, shard_writer
from albert_jax.data.building.dataset_settings import DATASET_VERSION, DatasetSettings
from albert_jax.data.tokenizers import Tokenizer, text_damage
from albert_jax.errors import ConfigError

LOCK_FILE = "build.lock"
PLAN_FILE = "plan.json"
COUNTS_FILE = "counts.json"  # a mixture's text per unit, as Beam's workers counted it
_IO_THREADS = 32  # manifests read and shards renamed at once (requests, on a bucket)


class DataBuildLocked(file_lock.LockHeld):
    """Another `albert-jax data build` is building the same folder."""


class AlbertPretraining(FileReaderBuilder):
    """SOP/NSP instances with n-gram masks (SPEC 1.3-1.5), `train` and `eval` splits.

    Construct with `make_builder(config)`; its builder config, the `DatasetSettings`, comes
    from the run config. Build with `build_from_config` (TFDS's `download_and_prepare` is not
    used: its writer shuffles a split in memory and needs TensorFlow past 1 GB).
    Metadata (metadata.json): the special token ids and vocab size (for dynamic masking and
    `data inspect`), and per-split counts of what the build did.
    """

    VERSION = tfds.core.Version(DATASET_VERSION)
    RELEASE_NOTES = {
        "1.0.0": "SPEC 1 instances and masks; held-out documents in `eval`.",
        DATASET_VERSION: "Built in units of corpus files (data.unit_bytes): blocks and seeds per "
                         "unit, the same bytes from the local pool and from Apache Beam.",
    }

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
            self._tokenizer = Tokenizer.load(settings.tokenizer, settings.text)
        return self._tokenizer

    def _info(self) -> tfds.core.DatasetInfo:
        settings = self.builder_config
        return tfds.core.DatasetInfo(
            builder=self,
            description="ALBERT pretraining examples (arXiv 1909.11942): sentence pairs with "
                        "n-gram masked-LM targets and sentence-order labels.",
            features=build_unit.example_features(settings.seq_len, settings.max_predictions),
            metadata=tfds.core.MetadataDict(),
            homepage="https://github.com/google-research/albert",
        )

    def _download_and_prepare(self, dl_manager: Any, download_config: Any = None) -> None:
        raise NotImplementedError(
            "build albert_pretraining with `albert-jax data build` (builder.build_from_config)")


def make_builder(config: ml_collections.ConfigDict, *, num_processes: int | None = None,
                 groups: list[corpus.Group] | None = None) -> AlbertPretraining:
    """The builder of a run config (checks it and the tokenizer file; builds nothing).
    `groups`: `corpus.corpus_groups` of the config's corpus, where the caller has them."""
    settings = DatasetSettings.from_run_config(config, groups=groups)
    tokenizer = Tokenizer.load(config.data.tokenizer, settings.text)
    if tokenizer.vocab_size > config.data.vocab_size:
        raise ConfigError(
            f"tokenizer {config.data.tokenizer} has {tokenizer.vocab_size} pieces but "
            f"config.data.vocab_size={config.data.vocab_size} (the model's embedding rows): set "
            f"--config.data.vocab_size={tokenizer.vocab_size}")
    return AlbertPretraining(config=settings, data_dir=os.fspath(config.data.dir),
                             file_format=settings.file_format, num_processes=num_processes,
                             tokenizer=tokenizer)



def build_from_config(config: ml_collections.ConfigDict, *, num_processes: int | None = None,
                      beam_pipeline_options: str | None = None) -> str:
    """`albert-jax data build`: builds the dataset of `config` unless it exists; returns its folder.

    Runs the units on a local process pool (`num_processes`, default one per core), or on Apache
    Beam with `beam_pipeline_options` ("runner=...,key=value,...", the flag TFDS's CLI takes).
    Prints what it did: documents, sentences and instances per split, skipped input and why,
    shards, seconds and examples per second.
    """
    groups = corpus.corpus_groups(config.data.corpus, corpus.ReadSettings.from_config(config.data))
    sources = corpus.flat_sources(groups)
    builder = make_builder(config, num_processes=num_processes, groups=groups)
    beam_options = None
    if beam_pipeline_options:
        from albert_jax.data.building import beam_build  # Apache Beam only where asked for
        beam_options = beam_build.pipeline_options(beam_pipeline_options)
        beam_build.check_paths_reach_workers(beam_options, {
            "data.corpus": [source for source, size in sources if size is not None],
            "data.dir": [os.fspath(config.data.dir)]})
    if builder.is_prepared():
        _print_existing(builder)
        return builder.data_dir
    # Before anything is written: a file without data.text_column is one line here.
    units = plan_units(groups, builder.builder_config.unit_bytes)
    dataset_dir = epath.Path(builder.data_dir)
    dataset_dir.mkdir(parents=True, exist_ok=True)
    lock = file_lock.acquire(
        dataset_dir / LOCK_FILE, error=DataBuildLocked,
        in_use=f"data folder {dataset_dir} is being built by another `albert-jax data build`",
        advice=f"Wait for that build to end or stop it; if no build uses this folder, delete "
               f"{dataset_dir / LOCK_FILE}")
    try:
        if builder.is_prepared():  # finished by the build that held the lock before
            _print_existing(builder)
            return builder.data_dir
        _build(builder, config, groups, units, beam_options, beam_pipeline_options)
    finally:
        lock.release()
    return builder.data_dir


def plan_units(groups: list[corpus.Group], unit_bytes: int) -> list[build_unit.Unit]:
    """The units of a build: each group's parts (`corpus.plan_parts`) made units, group after
    group, numbered in that order."""
    units: list[build_unit.Unit] = []
    for group in groups:
        parts = corpus.plan_parts(list(group.sources), group.reading, unit_bytes)
        units += make_units(parts, unit_bytes, group=group.name, first_index=len(units))
    return units


def make_units(sources: list[tuple[str, int | None]], unit_bytes: int, *, group: str = "",
               first_index: int = 0) -> list[build_unit.Unit]:
    """Consecutive sources (`corpus.plan_parts`) of about `unit_bytes` together (a unit closes
    once it holds that many bytes); the demo corpus and TFDS parts (no size) each alone. The
    units of `group`, numbered from `first_index`."""
    units: list[build_unit.Unit] = []
    held: list[str] = []
    held_bytes = 0

    def close() -> None:
        nonlocal held, held_bytes
        if held:
            units.append(build_unit.Unit(first_index + len(units), tuple(held), group))
        held, held_bytes = [], 0

    for source, size in sources:
        if size is None:
            close()
            held = [source]
            close()
            continue
        held.append(source)
        held_bytes += size
        if held_bytes >= unit_bytes:
            close()
    close()
    return units


def _plan_digest(settings: DatasetSettings, units: list[build_unit.Unit], shard_bytes: int) -> str:
    """What decides every file of the build: the dataset's identity (its name hashes the
    settings and the corpus files' names and sizes), the units (by file name: a moved corpus
    is the same plan) and the shard size."""
    plan = {"dataset": settings.name, "version": DATASET_VERSION, "shard_bytes": shard_bytes,
            "units": [[corpus.part_name(source) for source in unit.sources] for unit in units]}
    return hashlib.sha256(json.dumps(plan).encode()).hexdigest()[:16]


def build_context(builder: AlbertPretraining, config: ml_collections.ConfigDict,
                  units: list[build_unit.Unit],
                  groups: dict[str, build_unit.GroupPlan] | None = None
                  ) -> build_unit.BuildContext:
    """What every unit of `builder`'s build shares; records the tokenizer's ids and the settings
    in the builder's metadata (the masking is made from them, as dynamic masking makes it).
    `groups`: a mixture's `group_plans`; None: a plain corpus, dupe_factor passes."""
    settings, tokenizer = builder.builder_config, builder.tokenizer
    shard_bytes = int(config.data.shard_bytes)
    builder.info.metadata.update(
        vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id, unk_id=tokenizer.unk_id,
        settings=settings.as_dict(), splits={})
    return build_unit.BuildContext(
        settings=settings, tokenizer=tokenizer,
        masking_settings=masking.MaskingSettings.from_metadata(builder.info.metadata),
        dataset_dir=builder.data_dir, shard_bytes=shard_bytes,
        plan=_plan_digest(settings, units, shard_bytes),
        groups=groups or {"": build_unit.GroupPlan(settings.reading, float(settings.dupe_factor))},
        staging_dir=config.data.get("staging_dir"))


def mixture_table(settings: DatasetSettings, groups: list[corpus.Group],
                  sizes: list[corpus.TextSize]) -> list[dict[str, Any]]:
    """One row a group of a mixture: group, language, characters, p, q, r (r_i = q_i / p_i:
    its documents pass dupe_factor x r_i times on average)."""
    assert settings.mixture_alpha is not None  # (a mixture's settings)
    p, q = corpus.sampling_shares([size.characters for size in sizes], settings.mixture_alpha)
    return [dict(group=group.name, language=group.language, characters=size.characters,
                 p=p_i, q=q_i, r=q_i / p_i)
            for group, size, p_i, q_i in zip(groups, sizes, p, q)]


def group_plans(settings: DatasetSettings, groups: list[corpus.Group],
                table: list[dict[str, Any]]) -> dict[str, build_unit.GroupPlan]:
    """Each group's reading settings and passes, dupe_factor x r_i, by name."""
    return {group.name: build_unit.GroupPlan(group.reading, settings.dupe_factor * row["r"])
            for group, row in zip(groups, table)}


def _build(builder: AlbertPretraining, config: ml_collections.ConfigDict,
           groups: list[corpus.Group], units: list[build_unit.Unit], beam_options: Any,
           beam_pipeline_options: str | None) -> None:
    settings = builder.builder_config
    context = build_context(builder, config, units)
    recorded = _recorded_plan(context)
    if recorded is None:
        _clear_unfinished(context)
    sizes: list[corpus.TextSize] = []
    table: list[dict[str, Any]] = []
    if corpus.is_mixture(groups):
        # Counted once: a resumed build (on any runner) passes the groups as the first did.
        sizes = ([corpus.TextSize(**size) for size in recorded["sizes"]] if recorded
                 else count_mixture(groups, units, context.units_dir, beam_options,
                                    builder.num_processes))
        table = mixture_table(settings, groups, sizes)
        context = dataclasses.replace(context, groups=group_plans(settings, groups, table))
    if recorded is None:
        _record_plan(context, units, sizes)
    manifests = _read_manifests(context, units)
    pending = [unit for unit, manifest in zip(units, manifests) if manifest is None]
    where = (f"Apache Beam ({beam_pipeline_options})" if beam_options is not None
             else _plural(min(builder.num_processes, max(len(pending), 1)), "process"))
    print(f"building {builder.data_dir}\n  from {settings.description}\n"
          f"  {_plural(len(units), 'unit')} of at most {settings.unit_bytes / 2**20:.3g} MiB "
          "of text"
          + (f", {len(units) - len(pending)} built before" if len(pending) < len(units) else "")
          + f"; {len(pending)} to build with {where}")
    # What the reference text settings do to this corpus, on its first sentences (a mixture's:
    # as many from each group).
    sample = itertools.chain.from_iterable(corpus.sample_sentences(
        [part for unit in units if unit.group == group.name for part in unit.sources],
        text_damage.SAMPLE_SENTENCES // len(groups), settings.seed, settings=group.reading)
        for group in groups)
    for line in text_damage.warnings(builder.tokenizer, sample):
        print(f"  {line}")
    start = time.time()
    if beam_options is not None:
        from albert_jax.data.building import beam_build
        beam_build.run(context, pending, beam_options)
    else:
        _run_locally(context, pending, builder.num_processes)
    built = iter(_read_manifests(context, pending))
    _finalize(builder, context, units,
              [manifest if manifest is not None else next(built) for manifest in manifests], table)
    _print_report(builder, config, time.time() - start)


def count_mixture(groups: list[corpus.Group], units: list[build_unit.Unit],
                  units_dir: epath.Path, beam_options: Any = None,
                  num_processes: int = 1) -> list[corpus.TextSize]:
    """Each group's characters and sentences: its units' text counted on the build's runner (a
    first Beam pipeline, which gathers the counts in `units_dir`, or a pool of `num_processes`;
    a corpus of terabytes is not read by the launching machine alone), summed by group."""
    start = time.time()
    readings = {group.name: group.reading for group in groups}
    if beam_options is not None:
        from albert_jax.data.building import beam_build
        counts = beam_build.count(units, readings, units_dir / COUNTS_FILE, beam_options)
    else:
        counts = [size for size, _ in corpus.count_in_parallel(
            [(unit.sources, readings[unit.group]) for unit in units], num_processes)]
    sizes = corpus.sum_by_group(groups, [unit.group for unit in units], counts)
    print(f"  counted the characters of {_plural(len(groups), 'group')} "
          f"({_plural(len(units), 'unit')}) in {time.time() - start:.1f}s")
    return sizes


def _recorded_plan(context: build_unit.BuildContext) -> dict[str, Any] | None:
    """The plan file of a killed build of this plan (to resume), or None."""
    try:
        recorded = json.loads((context.units_dir / PLAN_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return recorded if recorded.get("plan") == context.plan else None


def _clear_unfinished(context: build_unit.BuildContext) -> None:
    """Clears a folder left by anything but a killed build of this plan (another plan, or an
    older layout), keeping the lock."""
    plan_path = context.units_dir / PLAN_FILE
    dataset_dir = epath.Path(context.dataset_dir)
    leftovers = [path for path in dataset_dir.iterdir() if path.name != LOCK_FILE]
    if leftovers:
        print(f"  removing the unfinished build in {dataset_dir} (no dataset_info.json, "
              f"{'another plan' if plan_path.exists() else 'no plan'})")
        for path in leftovers:
            path.rmtree() if path.is_dir() else path.unlink()
    context.units_dir.mkdir(parents=True, exist_ok=True)


def _record_plan(context: build_unit.BuildContext, units: list[build_unit.Unit],
                 sizes: list[corpus.TextSize]) -> None:
    """Records the plan (with a mixture's group sizes): a killed build resumes from it."""
    plan: dict[str, Any] = {"plan": context.plan, "units": [list(unit.sources) for unit in units]}
    if sizes:
        plan["sizes"] = [dataclasses.asdict(size) for size in sizes]
    files.write_atomically(context.units_dir / PLAN_FILE, json.dumps(plan, indent=1))


_WORKER_CONTEXT: list[build_unit.BuildContext] = []  # set once per process by `_set_context`


def _set_context(context: build_unit.BuildContext) -> None:
    _WORKER_CONTEXT[:] = [context]


def _build_unit_in_worker(unit: build_unit.Unit) -> dict[str, Any]:
    return build_unit.build_unit(_WORKER_CONTEXT[0], unit)


def _run_locally(context: build_unit.BuildContext, units: list[build_unit.Unit],
                 num_processes: int) -> None:
    """Builds `units` on a pool of `num_processes` worker processes, one unit at a time each
    (inline for one process or one unit). A worker that dies raises BrokenProcessPool; the units
    finished before keep their manifests."""
    if num_processes <= 1 or len(units) <= 1:
        for unit in units:
            _report_unit(build_unit.build_unit(context, unit), len(units))
        return
    # spawn: the parent may hold threads (JAX, TFDS) that make fork unsafe.
    with concurrent.futures.ProcessPoolExecutor(
            min(num_processes, len(units)), mp_context=multiprocessing.get_context("spawn"),
            initializer=_set_context, initargs=(context,)) as pool:
        for manifest in pool.map(_build_unit_in_worker, units):
            _report_unit(manifest, len(units))


def _report_unit(manifest: dict[str, Any], num_units: int) -> None:
    examples = build_unit.manifest_examples(manifest)
    print(f"  unit {manifest['unit'] + 1}/{num_units} built: {examples} examples", flush=True)


def _read_manifests(context: build_unit.BuildContext,
                    units: list[build_unit.Unit]) -> list[dict[str, Any] | None]:
    """The manifest of each unit built under this plan, or None; read in parallel (tens of
    thousands of units in a bucket are as many requests)."""
    with concurrent.futures.ThreadPoolExecutor(_IO_THREADS) as pool:
        return list(pool.map(lambda unit: build_unit.read_manifest(
            context.units_dir, unit.index, context.plan), units))


def _finalize(builder: AlbertPretraining, context: build_unit.BuildContext,
              units: list[build_unit.Unit], manifests: list[dict[str, Any] | None],
              table: list[dict[str, Any]]) -> None:
    """The units' shards renamed to TFDS's names in unit order, the metadata last (with a
    mixture's `table`, each group's instances added); then the units' folder removed."""
    settings = builder.builder_config
    missing = [unit.index for unit, manifest in zip(units, manifests) if manifest is None]
    if missing:
        raise RuntimeError(f"units {missing} of {builder.data_dir} were not built (the runner "
                           f"reported success): run the build again")
    built = [manifest for manifest in manifests if manifest is not None]  # every one of them
    corpus_report = corpus.CorpusStats.merged(manifest["corpus"] for manifest in built).report()
    splits = build_unit.SPLITS if settings.eval_fraction > 0 else ("train",)
    split_infos = []
    for split in splits:
        counts: collections.Counter[str] = collections.Counter()
        for manifest in built:
            counts.update(manifest["splits"][split]["counts"])
        if not counts["instances"]:
            raise ValueError(
                f"the {split!r} split of corpus {settings.corpus!r} has no examples "
                f"({counts['documents']} documents; corpus: {corpus_report}); "
                + ("raise --config.data.eval_fraction or use a bigger corpus" if split == "eval"
                   else "use a corpus with multi-sentence documents (blank line between them)"))
        builder.info.metadata["splits"][split] = dict(counts) | {"corpus": corpus_report}
        shards = [(context.units_dir, shard) for manifest in built
                  for shard in manifest["splits"][split]["shards"]]
        split_infos.append(shard_writer.adopt_split(
            epath.Path(builder.data_dir), builder.name, settings.file_format, split, shards,
            threads=_IO_THREADS))
    if table:
        instances: collections.Counter[str] = collections.Counter()
        for unit, manifest in zip(units, built):
            instances[unit.group] += build_unit.manifest_examples(manifest)
        builder.info.metadata["mixture"] = [row | {"instances": instances[row["group"]]}
                                            for row in table]
    builder.info.set_splits(tfds.core.SplitDict(split_infos))
    builder.info.write_to_directory(builder.data_dir)  # dataset_info.json last: now it is built
    context.units_dir.rmtree()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('s') else 's'}"


def _print_existing(builder: AlbertPretraining) -> None:
    splits = ", ".join(f"{name} {info.num_examples}" for name, info in builder.info.splits.items())
    print(f"dataset exists: {builder.data_dir} ({splits} examples); nothing to do "
          f"(delete the folder to rebuild)")


def _print_report(builder: AlbertPretraining, config: ml_collections.ConfigDict,
                  seconds: float) -> None:
    total = 0
    passes = (f"{config.data.dupe_factor} x r_i passes" if "mixture" in builder.info.metadata
              else f"{config.data.dupe_factor} passes")
    for split, counts in builder.info.metadata["splits"].items():
        total += counts["instances"]
        split_info = builder.info.splits[split]
        print(f"  {split}: {counts['documents']} documents, {counts['sentences']} sentences, "
              f"{counts['instances']} instances ({counts['blocks']} blocks x {passes}) in "
              f"{split_info.num_shards} shards of {split_info.num_bytes / 2**20:.1f} MB; "
              f"{counts['empty_documents']} documents empty after tokenization, skipped")
    print(f"  corpus read: {builder.info.metadata['splits']['train']['corpus']}")
    if "mixture" in builder.info.metadata:
        print(mixture_report(builder.info.metadata["mixture"], builder.builder_config))
    print(f"  {total} examples in {seconds:.1f}s ({total / seconds:.0f} examples/s)")


def mixture_report(table: list[dict[str, Any]], settings: DatasetSettings) -> str:
    """A mixture's table (`mixture_table` with instances), in Markdown: one row a group."""
    lines = [f"  mixture_alpha {settings.mixture_alpha}, dupe_factor {settings.dupe_factor}: "
             f"group i passes its documents dupe_factor x r_i times on average",
             "  | group | language | characters | p_i | q_i | r_i | instances |",
             "  |---|---|---:|---:|---:|---:|---:|"]
    lines += [f"  | {row['group']} | {row['language']} | {row['characters']:,} | "
              f"{row['p']:.4f} | {row['q']:.4f} | {row['r']:.3f} | {row['instances']:,} |"
              for row in table]
    return "\n".join(lines)
