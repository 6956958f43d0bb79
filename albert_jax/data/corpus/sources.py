"""A corpus spec expanded into its sources: files (local or gs://), HF folders, TFDS, the demo.

  "demo"                              the demo corpus (`demo.py`)
  "corpus/*.txt", "corpus/", "a.txt,b.parquet"   files: globs, folders (read recursively),
                                      comma-separated lists of these; the format of each file
                                      from its name (`file_format`)
  "gs://bucket/corpus/*.jsonl.zst", "gs://bucket/corpus/"   the same in a bucket (through
                                      etils.epath; a bucket glob takes `*`, `?`, `[...]` but not
                                      `**`: give the folder to read it recursively)
  "data/wiki_de"                      a HuggingFace `datasets` folder (`Dataset.save_to_disk`):
                                      its .arrow files in order
  "hf:wikimedia/wikipedia/20231101.de:train"   `hf:NAME[/CONFIG][:SPLIT]`: the Parquet files of
                                      a hub dataset's snapshot in the local HF cache, offline
                                      (`huggingface-cli download --repo-type=dataset NAME` first)
  "wikipedia/20230601.en", "bookcorpus", "tfds:NAME:SPLIT"   TFDS text datasets (needs the
                                      [tf] extra: `pip install albert-jax[tf]`)
  "{'hi': 'wiki/hi/*.parquet', 'en': 'hf:wikimedia/wikipedia/20231101.en'}"   a mixture: a dict
                                      of group name -> any spec above (`mixture.py` weighs the
                                      groups); its sources are its groups' in order
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re

from etils import epath

from albert_jax.errors import ConfigError

DEMO = "demo"
TFDS_PREFIX = "tfds:"
HF_PREFIX = "hf:"
COMPRESSIONS = ("gz", "zst", "xz", "bz2")
# A file's format from its name, after any compression suffix; any other name is text.
_FORMAT_OF_SUFFIX = {"parquet": "parquet", "jsonl": "jsonl", "json": "jsonl", "arrow": "arrow"}
_TFDS_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[A-Za-z0-9_.\-]+)?(:[\d.]+)?$")
_FILE_SUFFIXES = (".txt", ".text", ".gz", ".json", ".jsonl", ".md", ".parquet", ".zst", ".xz",
                  ".bz2", ".arrow")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")  # gs://, s3://...: read through etils.epath
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
_HF_SPLIT_FILE = re.compile(r"^(?P<split>[A-Za-z]+)[-_.]")  # train-00000-of-00041.parquet


def file_format(path: str) -> tuple[str, str]:
    """(format, compression) of a file from its name: format "parquet", "jsonl", "arrow" or
    "text"; compression one of COMPRESSIONS or "" (a.jsonl.zst -> ("jsonl", "zst"))."""
    name = os.path.basename(path).lower()
    stem, _, suffix = name.rpartition(".")
    compression = suffix if stem and suffix in COMPRESSIONS else ""
    if compression:
        stem, _, suffix = stem.rpartition(".")
    return (_FORMAT_OF_SUFFIX.get(suffix, "text") if stem else "text"), compression


def is_file_source(source: str) -> bool:
    """Whether a source of `list_sources` is a file (not the demo corpus or a TFDS name)."""
    return source != DEMO and not source.startswith(TFDS_PREFIX)


def group_specs(corpus: str) -> list[tuple[str, str]]:
    """(group name, corpus spec) of each group of a mixture (a spec starting with "{"), in its
    order; [("", corpus)] for any other spec. A mixture that is no dict of non-empty names to
    non-empty specs is one ConfigError line."""
    if not corpus.lstrip().startswith("{"):
        return [("", corpus)]
    example = "\"{'hi': 'wiki/hi/*.parquet', 'en': 'hf:wikimedia/wikipedia/20231101.en'}\""
    try:
        groups = ast.literal_eval(corpus.strip())
    except (ValueError, SyntaxError):
        groups = None
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"config.data.corpus={corpus!r} is not a mixture: give a dict of group "
                          f"name -> corpus spec, e.g. {example}")
    for name, spec in groups.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"config.data.corpus: the mixture's group name {name!r} is not a "
                              f"name: give a language code or a word, e.g. {example}")
        if not isinstance(spec, str) or not spec.strip() or spec.lstrip().startswith("{"):
            raise ConfigError(f"config.data.corpus: the mixture's group {name!r} has the corpus "
                              f"{spec!r}: give it a corpus spec (a glob, a folder, hf:NAME, a "
                              f"TFDS name or 'demo'), e.g. {example}")
    return list(groups.items())


def list_sources(corpus: str) -> list[str]:
    """Expands a corpus spec (see the module docstring) into sources for `read_documents`.

    Files come sorted (folders recursively); a comma-separated list keeps its order; a
    mixture's groups come in order, a group that names nothing one ConfigError line.
    """
    groups = group_specs(corpus)
    if groups[0][0]:
        return [source for name, spec in groups for source in group_sources(name, spec)]
    sources = []
    for pattern in (part.strip() for part in corpus.split(",")):
        if not pattern:
            continue
        if pattern == DEMO or pattern.startswith(TFDS_PREFIX):
            # "tfds:NAME" reads the train split; "tfds:NAME:SPLIT" may slice, e.g. train[:10%].
            sources.append(pattern if pattern == DEMO or pattern.count(":") >= 2
                           else pattern + ":train")
            continue
        if pattern.startswith(HF_PREFIX):
            sources.extend(hub_cache_files(pattern))
            continue
        files = _hf_folder_files(pattern)
        if files is None:
            files = sorted(_matching_files(pattern))
        if files:
            sources.extend(files)
        elif _TFDS_NAME.match(pattern) and not pattern.endswith(_FILE_SUFFIXES):
            sources.append(f"{TFDS_PREFIX}{pattern}:train")
        else:
            raise ValueError(
                f"corpus pattern {pattern!r} matched no file; give a glob, a folder, a "
                f"comma-separated list of these, hf:NAME, a TFDS text dataset name, or 'demo'")
    if not sources:
        raise ValueError(f"corpus {corpus!r} names no source")
    return sources


def group_sources(name: str, spec: str) -> list[str]:
    """`list_sources` of a mixture's group `name`; a spec that names nothing is one ConfigError
    line naming the group."""
    try:
        return list_sources(spec)
    except ValueError as error:
        raise ConfigError(f"config.data.corpus: the mixture's group {name!r}: {error}") from None


def _matching_files(pattern: str) -> list[str]:
    """The files a pattern names: a folder's files (recursively), a glob's, or the file."""
    if _URL.match(pattern):
        return _bucket_files(pattern)
    if os.path.isdir(pattern):
        return [os.path.join(directory, name)
                for directory, _, names in os.walk(pattern) for name in names]
    return [path for path in glob.glob(pattern, recursive=True) if os.path.isfile(path)]


def _bucket_files(pattern: str) -> list[str]:
    """`_matching_files` in a bucket. A folder is listed level by level (epath's `walk` drops
    the gs:// of the folders it yields); a glob is matched below its last literal folder."""
    if _GLOB_CHARACTERS.search(pattern) is None:
        path = epath.Path(pattern)
        if not path.is_dir():
            return [pattern] if path.exists() else []
        files: list[epath.Path] = []
        folders = [path]
        while folders:
            for entry in folders.pop().iterdir():
                (folders if entry.is_dir() else files).append(entry)
        return [os.fspath(file) for file in files]
    if "**" in pattern:
        raise ValueError(f"corpus pattern {pattern!r}: a bucket glob cannot take `**`; give the "
                         f"folder (read recursively) or `*` globs")
    scheme, rest = pattern.split("://", 1)
    parts = rest.split("/")
    literal = next(index for index, part in enumerate(parts) if _GLOB_CHARACTERS.search(part))
    base = epath.Path(f"{scheme}://{'/'.join(parts[:literal])}")
    return [os.fspath(path) for path in base.glob("/".join(parts[literal:])) if path.is_file()]


def _hf_folder_files(pattern: str) -> list[str] | None:
    """The .arrow files of a `datasets` `save_to_disk` folder, in the dataset's order; None when
    `pattern` is no such folder. A DatasetDict's folder (one folder a split) is refused in one
    line naming its splits."""
    if _GLOB_CHARACTERS.search(pattern) or pattern.endswith(_FILE_SUFFIXES):
        return None  # (a file's name: no requests to the bucket for it)
    folder = epath.Path(pattern)
    if (folder / "dataset_dict.json").exists():
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        raise ConfigError(f"config.data.corpus: {pattern} holds the splits {splits} of a "
                          f"HuggingFace DatasetDict: give one split's folder, e.g. "
                          f"{folder / (splits[0] if splits else 'train')}")
    state = folder / "state.json"
    if not state.exists():
        return None
    data_files = json.loads(state.read_text()).get("_data_files", [])
    return [os.fspath(folder / entry["filename"]) for entry in data_files]


def hub_cache(environ: os._Environ | dict[str, str] = os.environ) -> str:
    """The HF hub cache folder, as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub,
    else ~/.cache/huggingface/hub."""
    if environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(environ["HF_HUB_CACHE"])
    home = environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def hub_cache_files(spec: str) -> list[str]:
    """The Parquet files of `hf:NAME[/CONFIG][:SPLIT]` (SPLIT "train" if not given) in the local
    HF hub cache's snapshot of the dataset NAME ("owner/name" or "name"), sorted.

    CONFIG picks the files below a folder of that name (wikimedia/wikipedia's `20231101.de/`,
    FineWeb-2's `data/deu_Latn/`); SPLIT those below a folder of that name or whose name starts
    with it (`train-00000-of-00041.parquet`); a snapshot whose files name no split has one.
    Nothing is downloaded: a dataset not in the cache is one line saying how to get it."""
    body, _, split = spec[len(HF_PREFIX):].partition(":")
    split = split or "train"
    parts = [part for part in body.split("/") if part]
    cache = hub_cache()
    for name_parts in (parts[:2], parts[:1]):
        repo_folder = os.path.join(cache, "datasets--" + "--".join(name_parts))
        if name_parts and os.path.isdir(repo_folder):
            break
    else:
        raise ConfigError(
            f"config.data.corpus={spec!r}: the dataset {'/'.join(parts[:2])!r} is not in the "
            f"HuggingFace cache {cache} (HF_HUB_CACHE); download it first: `huggingface-cli "
            f"download --repo-type=dataset {'/'.join(parts[:2])}` (with --include for one "
            f"config), then build offline")
    config = "/".join(parts[len(name_parts):])
    snapshot = _snapshot(repo_folder, spec)
    files = sorted(os.path.relpath(os.path.join(directory, name), snapshot)
                   for directory, _, names in os.walk(snapshot, followlinks=True)
                   for name in names if name.endswith(".parquet"))
    if config:
        files = [file for file in files if f"/{config}/" in f"/{os.path.dirname(file)}/"]
    named_splits = {named for file in files if (named := _split_of(file)) is not None}
    if named_splits:
        files = [file for file in files if _split_of(file) == split]
    if not files:
        raise ConfigError(
            f"config.data.corpus={spec!r}: no Parquet file of config {config or '(none)'!r}, "
            f"split {split!r} in {snapshot}" + (f" (splits there: {sorted(named_splits)})"
                                                if named_splits else ""))
    return [os.path.join(snapshot, file) for file in files]


def _split_of(relative_path: str) -> str | None:
    """The split a snapshot file belongs to: a folder named like one, or its name's start."""
    folders = relative_path.split("/")[:-1]
    for folder in reversed(folders):
        if folder in ("train", "test", "validation", "valid", "dev"):
            return folder
    match = _HF_SPLIT_FILE.match(os.path.basename(relative_path))
    return match["split"] if match else None


def _snapshot(repo_folder: str, spec: str) -> str:
    """The snapshot `refs/main` names, else the only one."""
    snapshots = os.path.join(repo_folder, "snapshots")
    ref = os.path.join(repo_folder, "refs", "main")
    if os.path.isfile(ref):
        with open(ref) as file:
            return os.path.join(snapshots, file.read().strip())
    found = sorted(os.listdir(snapshots)) if os.path.isdir(snapshots) else []
    if len(found) != 1:
        raise ConfigError(f"config.data.corpus={spec!r}: {repo_folder} has no refs/main and "
                          f"{len(found)} snapshots; download the dataset again")
    return os.path.join(snapshots, found[0])


def source_size(source: str) -> int:
    """Bytes of a file source of `list_sources` (local or in a bucket)."""
    return epath.Path(source).stat().length


def sized_sources(corpus: str) -> list[tuple[str, int | None]]:
    """`list_sources` with each file's bytes; None for the demo corpus and TFDS names.

    Listing a bucket and reading its sizes are requests: a caller that needs both the dataset's
    identity and the log line lists once and hands this to both."""
    return with_sizes(list_sources(corpus))


def with_sizes(sources: list[str]) -> list[tuple[str, int | None]]:
    """Each source of `list_sources` with its bytes (None for the demo corpus and TFDS)."""
    return [(source, source_size(source) if is_file_source(source) else None)
            for source in sources]


def describe(corpus_spec: str, sources: list[tuple[str, int | None]] | None = None) -> str:
    """One line for logs: the spec, its files and their bytes, and the other sources.

    `sources` is `sized_sources(corpus_spec)` where the caller has it already."""
    sources = sized_sources(corpus_spec) if sources is None else sources
    sizes = [size for _, size in sources if size is not None]
    formats = sorted({file_format(source)[0] for source, size in sources if size is not None})
    others = [source for source, size in sources if size is None]
    kind = "text" if formats == ["text"] else "/".join(formats)
    parts = ([f"{len(sizes)} {kind} file{'s' * (len(sizes) != 1)}, {sum(sizes):,} bytes"]
             if sizes else []) + others
    return f"corpus {corpus_spec!r}: {'; '.join(parts)}"
