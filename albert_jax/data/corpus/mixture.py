"""A language mixture: `data.corpus` as a dict of group name -> corpus spec, and the sampling
share of each group (what `data build` and `tokenizer train` weigh the groups by).

  groups = corpus_groups(config.data.corpus, ReadSettings.from_config(config.data))
  sizes = count_groups(groups, 32 << 20, os.cpu_count())       # one read of the whole text
  p, q = sampling_shares([size.characters for size in sizes], config.data.mixture_alpha)

A plain corpus is one group named "". A group named by a language code (`hi`, `th`, `pt-BR`:
two or three letters, optionally with subtags, as data.language takes them) reads its text in
that language (its `data.language`); any other name (`wiki`, `news_en`) keeps `data.language`
(and `data.language_column`).

The shares are the exponentially smoothed sampling of mBERT (alpha 0.7) and XLM-R / mT5 (alpha
0.3): a group of n_i characters out of N has share p_i = n_i / N and is sampled with
q_i = p_i^alpha / sum_j p_j^alpha. alpha 1 keeps the sizes, alpha 0 makes every group equal;
a group's text is seen r_i = q_i / p_i times as often as in the plain concatenation.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
from typing import Any, Iterable, Iterator, Sequence

from albert_jax.data.corpus import parts, reading, sources
from albert_jax.data.corpus.settings import ReadSettings
from albert_jax.data.corpus.stats import CorpusStats
from albert_jax.errors import ConfigError

MIXTURE_ALPHA = 0.7  # mBERT's exponent (data.mixture_alpha's default)


@dataclasses.dataclass(frozen=True)
class Group:
    """One group of a mixture: its name ("" for a plain corpus), corpus spec, reading settings
    (data.language the name where it is a language code) and sources with their bytes
    (`sources.sized_sources`)."""
    name: str
    corpus: str
    reading: ReadSettings
    sources: tuple[tuple[str, int | None], ...]

    @property
    def language(self) -> str:
        """The group's language as the report names it: a code, or the record field of each."""
        column = self.reading.language_column
        return f"{self.reading.language} (+ column {column!r})" if column else self.reading.language


@dataclasses.dataclass(frozen=True)
class TextSize:
    """What a group's text is, as read: characters of its sentences, and sentences."""
    characters: int
    sentences: int


def corpus_groups(corpus: str, settings: ReadSettings) -> list[Group]:
    """The groups of `corpus` (a mixture's in order; one group "" for any other spec), their
    sources listed and sized. Lists every group before anything is read: a group that names
    nothing is one ConfigError line."""
    specs = sources.group_specs(corpus)
    if not specs[0][0]:
        return [Group("", corpus, settings, tuple(sources.sized_sources(corpus)))]
    return [Group(name, spec, settings.for_group(name),
                  tuple(sources.with_sizes(sources.group_sources(name, spec))))
            for name, spec in specs]


def is_mixture(groups: Sequence[Group]) -> bool:
    return bool(groups[0].name)


def flat_sources(groups: Sequence[Group]) -> list[tuple[str, int | None]]:
    """Every group's sized sources, in order: the corpus's `sized_sources`."""
    return [source for group in groups for source in group.sources]


def check_alpha(alpha: float) -> None:
    if not alpha >= 0:
        raise ConfigError(f"config.data.mixture_alpha={alpha}: give an exponent >= 0 (0.7: "
                          f"mBERT's; 0.3: XLM-R's and mT5's; 1: the groups as large as they "
                          f"are; 0: every group equal)")


def mixture_identity(groups: Sequence[Group]) -> str:
    """What a mixture's groups add to a dataset's identity ("" for a plain corpus): each group's
    name, language and number of sources (the corpus signature names the sources in order)."""
    if not is_mixture(groups):
        return ""
    return "; ".join(f"{group.name} [{group.language}]: {len(group.sources)}" for group in groups)


def count_text(group: Group, stats: CorpusStats | None = None) -> TextSize:
    """Reads all of `group`'s text once, as a build reads it (what it saw counted into
    `stats`). Raises ConfigError for a group without a sentence (a mixture cannot weigh an
    empty group)."""
    return _check_not_empty(group, count_sources([source for source, _ in group.sources],
                                                group.reading, stats))


def count_groups(groups: Sequence[Group], part_bytes: int, num_processes: int,
                 stats: CorpusStats | None = None) -> list[TextSize]:
    """`count_text` of every group, its sources cut into parts of about `part_bytes`
    (`parts.plan_parts`) and read on `num_processes` processes."""
    jobs = [(group.name, (part,), group.reading) for group in groups
            for part, _ in parts.plan_parts(list(group.sources), group.reading, part_bytes)]
    counted = count_in_parallel([(job_parts, settings) for _, job_parts, settings in jobs],
                                num_processes)
    if stats is not None:
        for _, seen in counted:
            stats.add(seen)
    return sum_by_group(groups, [name for name, _, _ in jobs], [size for size, _ in counted])


def count_in_parallel(jobs: Sequence[tuple[Sequence[str], ReadSettings]], num_processes: int
                      ) -> list[tuple[TextSize, dict[str, Any]]]:
    """The text of each job's parts read with its settings, and what reading saw
    (`dataclasses.asdict` of its CorpusStats), in job order; on a pool of `num_processes`
    processes (inline for one process or one job)."""
    if num_processes <= 1 or len(jobs) <= 1:
        return [_count_job(job) for job in jobs]
    # spawn: the parent may hold threads (JAX, TFDS) that make fork unsafe.
    with concurrent.futures.ProcessPoolExecutor(
            min(num_processes, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_count_job, jobs, chunksize=max(1, len(jobs) // (8 * num_processes))))


def _count_job(job: tuple[Sequence[str], ReadSettings]) -> tuple[TextSize, dict[str, Any]]:
    job_parts, settings = job
    stats = CorpusStats()
    return count_sources(job_parts, settings, stats), dataclasses.asdict(stats)


def count_sources(part_names: Iterable[str], settings: ReadSettings,
                  stats: CorpusStats | None = None) -> TextSize:
    """The text of `part_names` (sources, or parts of `plan_parts`), read with `settings`."""
    characters = sentences = 0
    for part in part_names:
        for document in reading.read_documents(part, settings, stats):
            characters += sum(map(len, document))
            sentences += len(document)
    return TextSize(characters, sentences)


def sum_by_group(groups: Sequence[Group], names: Sequence[str],
                 sizes: Sequence[TextSize]) -> list[TextSize]:
    """Each group's text: the `sizes` of the parts of group `names[i]` added up. ConfigError
    for a group without text."""
    return [_check_not_empty(group, TextSize(
        sum(size.characters for name, size in zip(names, sizes) if name == group.name),
        sum(size.sentences for name, size in zip(names, sizes) if name == group.name)))
        for group in groups]


def _check_not_empty(group: Group, size: TextSize) -> TextSize:
    """`size`, the whole text of `group`; ConfigError if it holds no text."""
    if not size.characters:
        raise ConfigError(f"config.data.corpus: the mixture's group {group.name!r} "
                          f"({group.corpus!r}) holds no text: give it a corpus with sentences, "
                          f"or leave it out")
    return size


def sampling_shares(characters: Sequence[int], alpha: float) -> tuple[list[float], list[float]]:
    """(p, q) of groups of `characters` each: p_i = n_i / N, q_i = p_i^alpha / sum_j p_j^alpha."""
    check_alpha(alpha)
    total = sum(characters)
    shares = [size / total for size in characters]
    weights = [share ** alpha for share in shares]
    return shares, [weight / sum(weights) for weight in weights]


def sample_mixture(groups: Sequence[Group], sizes: Sequence[TextSize], alpha: float,
                   num_sentences: int, seed: int, stats: CorpusStats | None = None
                   ) -> Iterator[str]:
    """About `num_sentences` sentences of the groups (or as many as they hold, if fewer), q_i of
    them from group i, group after group: each group's by `reading.sample_sentences` (its
    sources in an order drawn from `seed`), repeated from its start where the group holds fewer
    sentences than its share (an up-sampled small language counts that much more)."""
    _, q = sampling_shares([size.characters for size in sizes], alpha)
    total = min(num_sentences, sum(size.sentences for size in sizes))
    for group, size, share in zip(groups, sizes, q):
        remaining = round(share * total)
        while remaining > 0:
            wanted = min(remaining, size.sentences)
            yield from reading.sample_sentences([source for source, _ in group.sources], wanted,
                                                seed, stats, group.reading)
            remaining -= wanted
