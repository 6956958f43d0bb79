"""Documents from text files, TFDS text datasets, or the built-in demo corpus.

A document is a `list[str]` of its sentences (non-empty, stripped). Sources:

  "demo"                              the demo corpus (see `demo_documents`)
  "corpus/*.txt", "corpus/", "a.txt,b.gz"   text files (SPEC 1.2: one sentence per line, a blank
                                      line between documents; `.gz` is decompressed)
  "gs://bucket/corpus/*.txt", "gs://bucket/corpus/"   the same in a bucket (through etils.epath;
                                      a bucket glob takes `*`, `?`, `[...]` but not `**`: give
                                      the folder to read it recursively)
  "wikipedia/20230601.en", "bookcorpus", "tfds:NAME:SPLIT"   TFDS text datasets (needs the
                                      [tf] extra: `pip install albert-jax[tf]`)

Reading never crashes or hangs on bad input: it is counted in a `CorpusStats`.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import glob
import gzip
import hashlib
import io
import json
import os
import re
import sys
import sysconfig
import warnings
from typing import IO, Iterator

import numpy as np
from absl import logging
from etils import epath

DEMO = "demo"
TFDS_PREFIX = "tfds:"
MAX_LINE_BYTES = 1 << 20  # Longer lines are skipped (and counted): no real sentence is 1 MB.
# A file without blank lines would otherwise be one unbounded document; longer documents are cut
# into pieces of this many sentences (SOP only pairs neighbouring sentences, so nothing is lost).
MAX_DOCUMENT_SENTENCES = 10_000
# TFDS bookcorpus has one sentence per example and no book boundaries: every this many
# consecutive lines form one document.
BOOKCORPUS_LINES_PER_DOCUMENT = 256
_TFDS_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[A-Za-z0-9_.\-]+)?(:[\d.]+)?$")
_FILE_SUFFIXES = (".txt", ".text", ".gz", ".json", ".jsonl", ".md")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")  # gs://, s3://...: read through etils.epath
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) before whitespace
# and an upper-case letter, digit or opening quote/bracket; "e.g. foo" and "3.5" stay whole.
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))(?<!\be\.g\.)(?<!\bi\.e\.)\s+(?=[A-Z0-9\"'(\[])")


@dataclasses.dataclass
class CorpusStats:
    """Counters of what reading saw; bad input ends up here instead of crashing."""
    sources: int = 0
    documents: int = 0
    sentences: int = 0
    empty_documents: int = 0  # boundaries with no sentence in between (e.g. 2 blank lines), skipped
    split_documents: int = 0  # documents cut at MAX_DOCUMENT_SENTENCES
    skipped_long_lines: int = 0  # lines over MAX_LINE_BYTES, skipped
    invalid_utf8_lines: int = 0  # decoded with U+FFFD replacement characters
    truncated_files: int = 0  # unreadable past some point (e.g. a cut-off .gz); the rest skipped

    def report(self) -> str:
        problems = [f"{value} {field.name.replace('_', ' ')}"
                    for field in dataclasses.fields(self)[3:]  # The counters after `sentences`.
                    if (value := getattr(self, field.name))]
        return (f"{self.documents} documents, {self.sentences} sentences from {self.sources} "
                f"sources" + (f"; {', '.join(problems)}" if problems else ""))


def list_sources(corpus: str) -> list[str]:
    """Expands a corpus spec (see the module docstring) into sources for `read_documents`.

    Files come sorted (directories recursively); a comma-separated list keeps its order.
    """
    sources = []
    for pattern in (part.strip() for part in corpus.split(",")):
        if not pattern:
            continue
        if pattern == DEMO or pattern.startswith(TFDS_PREFIX):
            # "tfds:NAME" reads the train split; "tfds:NAME:SPLIT" may slice, e.g. train[:10%].
            sources.append(pattern if pattern == DEMO or pattern.count(":") >= 2
                           else pattern + ":train")
            continue
        files = _matching_files(pattern)
        if files:
            sources.extend(sorted(files))
        elif _TFDS_NAME.match(pattern) and not pattern.endswith(_FILE_SUFFIXES):
            sources.append(f"{TFDS_PREFIX}{pattern}:train")
        else:
            raise ValueError(
                f"corpus pattern {pattern!r} matched no file; give a glob, a directory, a "
                f"comma-separated list of these, a TFDS text dataset name, or 'demo'")
    if not sources:
        raise ValueError(f"corpus {corpus!r} names no source")
    return sources


def _matching_files(pattern: str) -> list[str]:
    """The files a pattern names: a directory's files (recursively), a glob's, or the file."""
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


def source_size(source: str) -> int:
    """Bytes of a text-file source of `list_sources` (local or in a bucket)."""
    return epath.Path(source).stat().length


def sized_sources(corpus: str) -> list[tuple[str, int | None]]:
    """`list_sources` with each text file's bytes; None for the demo corpus and TFDS names.

    Listing a bucket and reading its sizes are requests: a caller that needs both the dataset's
    identity and the log line lists once and hands this to both."""
    return [(source, None if source == DEMO or source.startswith(TFDS_PREFIX)
             else source_size(source)) for source in list_sources(corpus)]


def describe(corpus_spec: str, sources: list[tuple[str, int | None]] | None = None) -> str:
    """One line for logs: the spec, its text files and their bytes, and the other sources.

    `sources` is `sized_sources(corpus_spec)` where the caller has it already."""
    sources = sized_sources(corpus_spec) if sources is None else sources
    sizes = [size for _, size in sources if size is not None]
    others = [source for source, size in sources if size is None]
    parts = ([f"{len(sizes)} text file{'s' * (len(sizes) != 1)}, {sum(sizes):,} bytes"]
             if sizes else []) + others
    return f"corpus {corpus_spec!r}: {'; '.join(parts)}"


def iter_documents(corpus: str, stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """The documents of every source of `corpus`, in order."""
    for source in list_sources(corpus):
        yield from read_documents(source, stats)


def sample_sentences(sources: list[str], num_sentences: int, seed: int,
                     stats: CorpusStats | None = None) -> Iterator[str]:
    """At most `num_sentences` sentences of `sources` (from `list_sources`), without reading
    the rest: the sources are visited in an order drawn from `seed`, each from its start, and
    reading stops once `num_sentences` are yielded. The same sources and seed give the same
    sentences; `stats.sources` counts the sources opened.

    A corpus of many files gives a sample of whole files (a sentence budget of ~10M reads ~1 GB
    of a TB corpus); a single file gives its first `num_sentences` sentences.
    """
    order = np.random.default_rng(seed).permutation(len(sources))
    remaining = num_sentences
    for index in order.tolist():
        for document in read_documents(sources[index], stats):
            for sentence in document[:remaining]:
                yield sentence
            remaining -= min(len(document), remaining)
            if not remaining:
                return


def read_documents(source: str, stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """Streams the documents of one source (from `list_sources`) in bounded memory."""
    stats = CorpusStats() if stats is None else stats
    stats.sources += 1
    if source == DEMO:
        documents = demo_documents()
    elif source.startswith(TFDS_PREFIX):
        documents = _tfds_documents(source)
    else:
        documents = _text_file_documents(source, stats)
    for document in documents:
        stats.documents += 1
        stats.sentences += len(document)
        yield document


def _text_file_documents(path: str, stats: CorpusStats) -> Iterator[list[str]]:
    # SPEC 1.2: one sentence per line; a blank (or whitespace-only) line ends a document.
    with epath.Path(path).open("rb") as raw, (
            gzip.GzipFile(fileobj=raw) if path.endswith(".gz")
            # A bucket's file object has no readline(size): buffer it (a local file is one).
            else contextlib.nullcontext(raw if isinstance(raw, io.BufferedIOBase)
                                        else io.BufferedReader(raw))) as file:
        document: list[str] = []
        previous_blank = True  # A blank line right after a boundary is an empty document.
        for line in _bounded_lines(file, path, stats):
            sentence = line.strip()
            if sentence:
                document.append(sentence)
                if len(document) == MAX_DOCUMENT_SENTENCES:
                    stats.split_documents += 1
                    yield document
                    document = []
            elif document:
                yield document
                document = []
            elif previous_blank:  # (After a cut at MAX_DOCUMENT_SENTENCES it is no empty one.)
                stats.empty_documents += 1
            previous_blank = not sentence
        if document:
            yield document


def _bounded_lines(file: IO[bytes] | io.BufferedIOBase, path: str,
                   stats: CorpusStats) -> Iterator[str]:
    """Decoded lines, never holding more than MAX_LINE_BYTES of one line in memory."""
    while True:
        try:
            line = file.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES:
                stats.skipped_long_lines += 1
                while line and not line.endswith(b"\n"):  # Drain the rest of the long line.
                    line = file.readline(MAX_LINE_BYTES)
                continue
        except (OSError, EOFError) as error:  # e.g. gzip.BadGzipFile, a .gz cut off mid-stream
            stats.truncated_files += 1
            logging.warning("%s: %s; skipping the rest of this file", path, error)
            return
        if not line:
            return
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError:
            stats.invalid_utf8_lines += 1
            yield line.decode("utf-8", errors="replace")


def split_sentences(paragraph: str) -> list[str]:
    """A simple rule-based sentence splitter (see _SENTENCE_END) for running text."""
    return [sentence.strip() for sentence in _SENTENCE_END.split(" ".join(paragraph.split()))
            if sentence.strip()]


def _tfds_documents(source: str) -> Iterator[list[str]]:
    """Documents of a TFDS text dataset: one example ("text" feature) per document, split into
    paragraphs at newlines and into sentences by `split_sentences` (wikipedia: one article per
    document); bookcorpus (one sentence per example, no book boundaries) is grouped into documents
    of BOOKCORPUS_LINES_PER_DOCUMENT lines."""
    _, name, split = source.split(":", 2)
    try:
        import tensorflow  # noqa: F401  (TFDS reads these TFRecord datasets through TensorFlow)
    except ImportError:
        raise ImportError(
            f"reading the TFDS dataset {name!r} needs TensorFlow: `pip install albert-jax[tf]` "
            f"(or give text files: no file or directory named {name!r} exists)") from None
    import tensorflow_datasets as tfds
    dataset = tfds.load(name, split=split, shuffle_files=False, try_gcs=True)
    texts = (example["text"].decode("utf-8", errors="replace")
             for example in tfds.as_numpy(dataset))
    if name.split("/")[0] == "bookcorpus":
        document = []
        for text in texts:
            if text.strip():
                document.append(text.strip())
            if len(document) == BOOKCORPUS_LINES_PER_DOCUMENT:
                yield document
                document = []
        if document:
            yield document
        return
    for text in texts:
        document = [sentence for paragraph in text.split("\n")
                    for sentence in split_sentences(paragraph)]
        if document:
            yield document


# ---------------------------------------------------------------------------------------------
# The demo corpus: English prose that every Python installation carries, built at run time.

_DEMO_SKIP_DIRECTORIES = frozenset({"site-packages", "dist-packages", "__pycache__", "test",
                                    "tests", "idle_test", "turtledemo"})
# Lines that are not prose: doctests, reST markup and headings, tables, option and field lists.
_NOT_PROSE_LINE = re.compile(r"^(>>>|\.\.\.|\.\. |[-=+~*^#|]{3,}|[=+|]|:\w[\w ]*:|\$ |%|-{1,2}\w)")
_BULLET = re.compile(r"^[*+-] ")
_PROSE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:'\"()-")
_MIN_SENTENCE_WORDS = 3
_MIN_PROSE_FRACTION = 0.9  # of a sentence's characters in _PROSE_CHARS; code falls below it


# Where a built demo corpus is kept for the next process: building it takes ~5 s, and `make demo`
# alone starts three processes that read it.
DEMO_CACHE_DIR = os.path.join("~", ".cache", "albert_jax", "demo_corpus")


@functools.cache
def _demo_corpus() -> tuple[tuple[str, ...], ...]:
    """The demo documents: from DEMO_CACHE_DIR if a process with the same Python and the same
    code of this module built them before, else built and left there (a cache file that cannot
    be read is built again; a folder that cannot be written only costs the next process ~5 s)."""
    path = _demo_cache_path()
    try:
        with open(path, encoding="utf-8") as file:
            cached = json.load(file)
        if isinstance(cached, list) and all(isinstance(document, list) for document in cached):
            return tuple(tuple(document) for document in cached)
    except (OSError, ValueError):
        pass
    documents = _build_demo_corpus()
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.partial"  # renamed over: a reader sees all or nothing
        with open(partial, "w", encoding="utf-8") as file:
            json.dump(documents, file)
        os.replace(partial, path)
    return documents


def _demo_cache_path() -> str:
    """DEMO_CACHE_DIR's file for this Python (version, standard library) and this module's code."""
    with open(__file__, "rb") as file:
        code = file.read()
    key = hashlib.sha256(b"\0".join((sys.version.encode(),
                                      sysconfig.get_paths()["stdlib"].encode(), code)))
    return os.path.join(os.path.expanduser(DEMO_CACHE_DIR), f"{key.hexdigest()[:16]}.json")


def _build_demo_corpus() -> tuple[tuple[str, ...], ...]:
    root = sysconfig.get_paths()["stdlib"]
    documents = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = sorted(name for name in subdirectories
                                   if name not in _DEMO_SKIP_DIRECTORIES)
        for name in sorted(names):
            if name.endswith(".py"):
                documents.extend(_module_documents(os.path.join(directory, name)))
    return tuple(documents)


def demo_documents() -> Iterator[list[str]]:
    """The demo corpus: docstrings and help texts of the installed Python standard library.

    Real English prose available offline and not copied into this repository. Each stdlib module
    (sorted, tests excluded) is parsed with `ast` (nothing is imported); every module, class and
    function docstring with at least two sentences is one document, and the one-sentence
    docstrings of a module together form one more; each `pydoc` help topic (the language
    reference text in `pydoc_data/topics.py`) is one document. Doctests, reST markup, tables,
    indented blocks and code-like sentences are dropped. Same output on every call with the same
    Python (CPython 3.11.7: 3,890 documents, 17,346 sentences, 1.4 MB of text, enough for a
    SentencePiece vocabulary of at most 6,607 pieces; built in ~5 s, then kept in memory and in
    DEMO_CACHE_DIR for later processes).
    """
    for document in _demo_corpus():
        yield list(document)


def _module_documents(path: str) -> list[tuple[str, ...]]:
    with open(path, "rb") as file:
        source = file.read()
    if b'"""' not in source and b"'''" not in source:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. invalid escape sequences in old modules
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    texts = [ast.get_docstring(node, clean=True) for node in ast.walk(tree)
             if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    if path.endswith(os.path.join("pydoc_data", "topics.py")):  # `topics = {"name": "text", ...}`
        texts += [value.value for node in tree.body if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Dict) for value in node.value.values
                  if isinstance(value, ast.Constant) and isinstance(value.value, str)]
    documents, summaries = [], []
    for text in filter(None, texts):
        sentences = _prose_sentences(text)
        if len(sentences) >= 2:
            documents.append(tuple(sentences))
        else:
            summaries.extend(sentences)
    if summaries:
        documents.append(tuple(summaries))
    return documents


def _prose_sentences(text: str) -> list[str]:
    """The sentences of the running-text paragraphs of a docstring or help topic."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
        lines = paragraph.split("\n")
        first = lines[0].lstrip()
        indent = len(lines[0]) - len(first)
        bullet = _BULLET.match(first)
        if indent and not bullet:
            continue  # An indented block: code, a quote, a parameter list.
        continuation = indent + (2 if bullet else 0)  # Bullet text continues 2 columns right.
        if any(len(line) - len(line.lstrip()) != continuation for line in lines[1:]):
            continue  # Mixed indentation: a definition list or code after a heading.
        if any(_NOT_PROSE_LINE.match(line.lstrip()) for line in lines[bool(bullet):]) or (
                not bullet and _NOT_PROSE_LINE.match(first)):
            continue
        running_text = " ".join([first[2:] if bullet else first] + lines[1:])
        for sentence in split_sentences(running_text):
            prose_chars = sum(char in _PROSE_CHARS for char in sentence)
            if (len(sentence.split()) >= _MIN_SENTENCE_WORDS and sentence[-1] in ".!?"
                    and prose_chars >= _MIN_PROSE_FRACTION * len(sentence)):
                sentences.append(sentence)
    return sentences
