"""The demo corpus: English prose that every Python installation carries, built at run time.

  for document in demo_documents():    # list[str] sentences; the corpus spec "demo"

Its sentences are cut by `_docstring_sentences`, a rule for docstrings (a sentence ends at
`.!?` before a capital letter, a digit or an opening quote or bracket), not by the segmenter
that cuts the sentences of every other corpus: docstrings are English full of dotted names
(`os.path.join`, `str.split`) and "e.g.", which this rule keeps whole, and the filters below
(three words or more, a final `.!?`, mostly prose characters) were tuned with it. Keeping it
keeps the demo corpus, and so every demo build and the counts below, as they were.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import sysconfig
import warnings
from typing import Iterator

# A sentence of a docstring ends at . ! or ? (optionally followed by a closing quote or bracket)
# before whitespace and an upper-case letter, digit or opening quote/bracket; "e.g. foo" and "3.5"
# stay whole.
_DOCSTRING_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))(?<!\be\.g\.)(?<!\bi\.e\.)\s+(?=[A-Z0-9\"'(\[])")


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
        for sentence in _docstring_sentences(running_text):
            prose_chars = sum(char in _PROSE_CHARS for char in sentence)
            if (len(sentence.split()) >= _MIN_SENTENCE_WORDS and sentence[-1] in ".!?"
                    and prose_chars >= _MIN_PROSE_FRACTION * len(sentence)):
                sentences.append(sentence)
    return sentences


def _docstring_sentences(paragraph: str) -> list[str]:
    """The sentences of a paragraph of docstring prose (see _DOCSTRING_SENTENCE_END)."""
    return [sentence.strip()
            for sentence in _DOCSTRING_SENTENCE_END.split(" ".join(paragraph.split()))
            if sentence.strip()]
