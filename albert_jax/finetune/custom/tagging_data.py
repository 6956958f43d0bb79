"""Tagged sentences of a user's files: CoNLL columns, JSON Lines or Parquet (token_classification).

  sentences = tagging_data.read_file("train.conll", TagColumns(), scheme="iob2")
  labels = tagging_data.label_list(sentences)                # "O" first, then sorted
  for chunk in tagging_data.iter_sentence_chunks("new.conll", columns, labelled=False):
      ...                                                    # predict: bounded memory

Formats, by the file's extension:
  .conll, .txt  one token per line, whitespace-separated columns: the token in the first, the
                tag in the last (or in column `tag_column`, 0-based); a blank line ends a
                sentence; `-DOCSTART-` lines (CoNLL-2003's document marks) are skipped.
  .jsonl, .parquet  one sentence per row: a list of tokens (column `tokens`) and a list of tags
                (column `tags`), and an id column if `id` names one.
Every path goes through etils.epath (local or gs://). Tags are read in `scheme` (iob2, iob1 or
bioes) and kept as IOB2: an I-X (or E-X) that does not go on an entity of type X begins one, as
conlleval reads it, and S-X is B-X. A sentence's `source` is "<file>:<line>": the line of its
first token (JSON Lines: its row's line; Parquet: the row number from 1).

Each fault is one ValueError naming the file and line: a token without a tag, a tag not of the
scheme's form, an empty token, as many tokens as tags not, a tag outside the label list (dev and
test are read against the training file's), a file with no sentence.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Iterable, Iterator, Sequence

from etils import epath

from albert_jax.finetune.core import tables
from albert_jax.finetune.core.examples import Sentence

SCHEMES: dict[str, tuple[str, ...]] = {"iob2": ("B", "I"), "iob1": ("B", "I"),
                                       "bioes": ("B", "I", "E", "S")}
CONLL_EXTENSIONS = (".conll", ".txt")
TABLE_EXTENSIONS = (".jsonl", ".parquet")
OUTSIDE = "O"
_DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"([A-Z])-(\S+)")


@dataclasses.dataclass(frozen=True)
class TagColumns:
    """Where the tokens and tags are: CoNLL `tag_column` (0-based; -1 the last), the JSON Lines
    and Parquet column names `tokens`, `tags` and `id` ("" = the 0-based sentence number)."""

    tokens: str = "tokens"
    tags: str = "tags"
    id: str = ""
    tag_column: int = -1


def check_extension(path: tables.Table) -> str:
    """The file's extension, checked; "" for a HuggingFace dataset (a table of token lists)."""
    if tables.is_hf_dataset(path):
        return ""
    assert isinstance(path, str)  # a HubSplit is a HuggingFace dataset
    extension = os.path.splitext(path)[1].lower()
    if extension not in CONLL_EXTENSIONS + TABLE_EXTENSIONS:
        raise ValueError(f"{path}: unknown file type {extension or '(no extension)'!r}; use "
                         f"{', '.join(CONLL_EXTENSIONS + TABLE_EXTENSIONS)} (.conll: one token "
                         "and its tag per line, a blank line between sentences)")
    return extension


def to_iob2(tags: Sequence[str], scheme: str, where: Sequence[str]) -> tuple[str, ...]:
    """`tags` of `scheme` as IOB2; `where[i]` names tag i in errors ("file:line")."""
    allowed = SCHEMES[scheme]
    converted, previous_prefix, previous_kind = [], OUTSIDE, None
    for tag, place in zip(tags, where):
        if tag == OUTSIDE:
            converted.append(OUTSIDE)
            previous_prefix, previous_kind = OUTSIDE, None
            continue
        match = _TAG.fullmatch(tag)
        if not match or match.group(1) not in allowed:
            forms = ", ".join(f"{prefix}-X" for prefix in allowed)
            raise ValueError(f"{place}: tag {tag!r} is not of the {scheme} form (O, {forms}); "
                             "set config data.tag_scheme to the file's scheme (iob2, iob1, "
                             "bioes)")
        prefix, kind = match.groups()
        goes_on = prefix in ("I", "E") and previous_prefix in ("B", "I") and previous_kind == kind
        converted.append(f"{'I' if goes_on else 'B'}-{kind}")
        previous_prefix, previous_kind = prefix, kind
    return tuple(converted)


class _SentenceChecker:
    """Checks and converts the raw tokens and tags of one file's sentences."""

    def __init__(self, path: tables.Table, scheme: str, labels: Sequence[str] | None,
                 labelled: bool):
        if scheme not in SCHEMES:
            raise ValueError(f"config data.tag_scheme={scheme!r}: use one of "
                             f"{', '.join(SCHEMES)}")
        self.path, self.scheme, self.labelled = path, scheme, labelled
        self.labels = None if labels is None else frozenset(labels)
        self.count = 0

    def __call__(self, sentence_id: str | None, tokens: list[str], tags: list[str] | None,
                 lines: list[int]) -> Sentence:
        where = [f"{self.path}:{line}" for line in lines]
        for token, place in zip(tokens, where):
            if not token.strip():
                raise ValueError(f"{place}: an empty token {token!r}; every word needs text")
        if tags is not None:
            tags = to_iob2(tags, self.scheme, where)
            for tag, place in zip(tags, where):
                if self.labels is not None and tag not in self.labels:
                    raise ValueError(f"{place}: tag {tag!r} is not one of the {len(self.labels)} "
                                     "tags of the training file (or config data.labels): "
                                     f"{', '.join(sorted(self.labels))}")
        sentence = Sentence(str(self.count) if sentence_id is None else sentence_id,
                            tuple(tokens), tags, where[0])
        self.count += 1
        return sentence


def _conll_sentences(path: str, columns: TagColumns, labelled: bool
                     ) -> Iterator[tuple[None, list[str], list[str] | None, list[int]]]:
    """(None, tokens, tags or None, lines) of each sentence of a CoNLL file."""
    tokens, tags, lines = [], [], []
    with epath.Path(path).open("r", encoding="utf-8-sig") as file:
        for number, line in enumerate(file, 1):
            fields = line.split()
            if fields and fields[0] == _DOCSTART:
                fields = []
            if fields:
                if labelled:
                    if len(fields) < 2:
                        raise ValueError(f"{path}:{number}: token {fields[0]!r} has no tag (one "
                                         "column); a line holds a token and its tag")
                    try:
                        tags.append(fields[columns.tag_column])
                    except IndexError:
                        raise ValueError(f"{path}:{number}: {len(fields)} columns, no column "
                                         f"{columns.tag_column} (config data.tag_column)"
                                         ) from None
                tokens.append(fields[0])
                lines.append(number)
            elif tokens:
                yield None, tokens, tags if labelled else None, lines
                tokens, tags, lines = [], [], []
    if tokens:
        yield None, tokens, tags if labelled else None, lines


def _strings(value: Any, where: str, column: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}: column {column!r} is not a list of strings: "
                         f"{json.dumps(value, default=str)[:60]}")
    return list(value)


def _table_sentences(path: tables.Table, columns: TagColumns, labelled: bool
                     ) -> Iterator[tuple[str | None, list[str], list[str] | None, list[int]]]:
    """(id, tokens, tags or None, lines) of each row of a JSON Lines or Parquet file."""
    for chunk in tables.iter_row_chunks(path):
        for line, row in chunk:
            where = f"{path}:{line}"
            if columns.tokens not in row:
                raise ValueError(f"{where}: no column {columns.tokens!r} (config data.tokens); "
                                 f"the row's columns are {', '.join(map(repr, row))}")
            tokens = _strings(row[columns.tokens], where, columns.tokens) or []
            if not tokens:
                raise ValueError(f"{where}: column {columns.tokens!r} holds no token")
            tags = _strings(row.get(columns.tags), where, columns.tags)
            if labelled and tags is None:
                raise ValueError(f"{where}: no column {columns.tags!r} (config data.tags); "
                                 "every sentence of a training or dev file needs its tags")
            if tags is not None and len(tags) != len(tokens):
                raise ValueError(f"{where}: {len(tokens)} tokens but {len(tags)} tags; "
                                 "every token needs one tag")
            sentence_id = None
            if columns.id:
                if row.get(columns.id) is None:
                    raise ValueError(f"{where}: no column {columns.id!r} (config data.id)")
                sentence_id = str(row[columns.id])
            yield sentence_id, tokens, tags if labelled else None, [line] * len(tokens)


def iter_sentence_chunks(path: tables.Table, columns: TagColumns, *, scheme: str = "iob2",
                         labels: Sequence[str] | None = None, labelled: bool = True,
                         chunk_size: int = tables.DEFAULT_CHUNK_ROWS
                         ) -> Iterator[list[Sentence]]:
    """The sentences of `path` in file order, in lists of at most `chunk_size`.

    labels: the tags a tag must be one of (None: any, for the training file); labelled False:
    a file to predict on, whose tags (if any) are not read.
    """
    extension = check_extension(path)
    if extension and not epath.Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    check = _SentenceChecker(path, scheme, labels, labelled)
    if extension in CONLL_EXTENSIONS:
        assert isinstance(path, str)  # a HubSplit has no extension
        raw = _conll_sentences(path, columns, labelled)
    else:
        raw = _table_sentences(path, columns, labelled)
    chunk = []
    try:
        for sentence_id, tokens, tags, lines in raw:
            chunk.append(check(sentence_id, tokens, tags, lines))
            if len(chunk) == chunk_size:
                yield chunk
                chunk = []
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason}); save the file as UTF-8"
                         ) from None
    if chunk:
        yield chunk


def read_file(path: tables.Table, columns: TagColumns, *, scheme: str = "iob2",
              labels: Sequence[str] | None = None, labelled: bool = True) -> list[Sentence]:
    """Every sentence of `path` (see `iter_sentence_chunks`); a file with none is an error."""
    sentences = [sentence for chunk in iter_sentence_chunks(
        path, columns, scheme=scheme, labels=labels, labelled=labelled) for sentence in chunk]
    if not sentences:
        raise ValueError(f"{path}: no sentences; expected one token (and its tag) per line, a "
                         "blank line between sentences (.jsonl: one sentence per line)")
    return sentences


def label_list(sentences: Iterable[Sentence], given: Sequence[str] = ()) -> tuple[str, ...]:
    """The tags in class order: `given` (config data.labels, IOB2), which must hold every
    training tag, else "O" then the other training tags sorted."""
    sentences = list(sentences)
    seen = {tag for sentence in sentences for tag in sentence.known_tags()}
    if given:
        for sentence in sentences:
            for tag, token_number in zip(sentence.known_tags(), range(len(sentence.known_tags()))):
                if tag not in given:
                    raise ValueError(f"{sentence.source}: tag {tag!r} (word {token_number}) is "
                                     f"not in config data.labels ({', '.join(given)})")
        return tuple(given)
    return (OUTSIDE,) + tuple(sorted(seen - {OUTSIDE}))
