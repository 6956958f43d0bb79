"""Tables of examples: the rows of a CSV, TSV, JSON Lines or Parquet file, read in chunks (a file
of any size in bounded memory), and the text examples or choice questions that named columns make
of them. A user's own files (custom/data.py) are read with them, and every task's
`albert-jax predict` reads an input table with them.

  for chunk in tables.iter_example_chunks(path, "classification", tables.Columns(text_a="text"),
                                          labelled=False):
      ...                                        # a million rows in bounded memory
  for chunk in tables.iter_row_chunks(path):     # [(line, {column: cell})], any columns
      ...

Formats, by the file's extension:
  .csv      a header row, then one row per example; quoting as Python's csv module reads it, so
            a quoted field may hold commas, quotes ("") and newlines.
  .tsv      a header row; tab-separated, NO quoting (as GLUE's files): a quote is text.
  .jsonl    one JSON object per line; blank lines are skipped.
  .parquet  read with pyarrow (a dependency of tensorflow-datasets), in row batches.
  HuggingFace `datasets`: a folder written by `Dataset.save_to_disk` (a DatasetDict's: one
            split's folder, `folder/train`), one `.arrow` file of a dataset, or a split of
            `datasets.load_dataset(name, config)` (`HubSplit`; offline: its local cache).
            `datasets` is imported only for these.
Files are UTF-8 (a byte-order mark is ignored), local or in a bucket (gs://, read through
etils.epath). "Line" in messages and in an example's `source` is the file's physical line where
the row starts (a CSV row with a newline in a quoted field spans several); for Parquet it is the
row number from 1.

Values: text cells that are JSON/Parquet numbers or booleans become their JSON text (`3`, `2.5`,
`true`). Classification labels are strings the same way: a JSON `1` and a CSV `1` are the same
label "1". Regression labels are numbers or numeric strings. A multiple-choice label is the
0-based index of the right option (an integer, or a string of digits) or else the option's text.

Every fault in a file is one ValueError naming the file, the line and the value: a missing
column (with the file's columns), an empty text, a label outside the label list, a non-numeric
regression label, a malformed JSON line, a CSV row with the wrong number of fields, a question
whose option count differs from the file's first question. Messages name the config key of the
column (`config data.text_a`): a user's own files take their columns from the config.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from typing import Any, Iterator, Literal, Mapping, Sequence, TypeVar

from etils import epath

from albert_jax.errors import ConfigError
from albert_jax.finetune.core.examples import ChoiceQuestion, TextExample
from albert_jax.finetune.core.text_files import open_text

# What the rows of a table become: TextExamples with a class label or a number, ChoiceQuestions.
KINDS: tuple[str, ...] = ("classification", "regression", "multiple_choice")
EXTENSIONS: tuple[str, ...] = (".csv", ".tsv", ".jsonl", ".parquet")
DEFAULT_CHUNK_ROWS = 8192  # Rows per chunk of `iter_example_chunks`: a few MB of text.

Row = Mapping[str, Any]
Item = TypeVar("Item")
_SHOWN_CHARS = 60  # A value quoted in an error message is cut to this many characters.
_SHOWN_LABELS = 20  # An error lists at most this many labels of the label list.


@dataclasses.dataclass(frozen=True)
class HubSplit:
    """A split of `datasets.load_dataset(name, config)` as a table (config data.hf_dataset,
    data.hf_config); `split` may be a slice such as "train[:10%]"."""

    name: str
    config: str
    split: str

    def __str__(self) -> str:
        return f"{self.name}{'/' + self.config if self.config else ''}[{self.split}]"


Table = str | HubSplit  # a path (local or gs://), or a split of a HuggingFace dataset


@dataclasses.dataclass(frozen=True)
class Columns:
    """Which column holds what; "" = not used (a user's own files: from the config, custom/data.py
    `columns`).

    Attributes:
      text_a, text_b: the text (pair) of classification and regression; text_b "" = one text.
      label: the label column (optional in unlabelled files).
      id: the id column; "" = the 0-based row number.
      context, question: multiple choice; either may be "".
      options: multiple choice: one name = a column holding a list of options (a JSON list in
        CSV/TSV); several names = one column per option, in option order.
    """

    text_a: str = ""
    text_b: str = ""
    label: str = ""
    id: str = ""
    context: str = ""
    question: str = ""
    options: tuple[str, ...] = ()


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown task kind {kind!r}; use one of {', '.join(KINDS)}")


def shown(value: Any) -> str:
    """`value` as an error message quotes it: its repr, cut to a few dozen characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 4] + "...'"


def in_chunks(items: Sequence[Item], chunk_rows: int) -> Iterator[Sequence[Item]]:
    """`items` in consecutive slices of at most `chunk_rows` (a whole file read by a
    benchmark's own reader, handed to `albert-jax predict` as a table's chunks are)."""
    for start in range(0, len(items), chunk_rows):
        yield items[start:start + chunk_rows]


# --- Rows of a file ------------------------------------------------------------------------------

def _extension(path: str) -> str:
    extension = os.path.splitext(path)[1].lower()
    if extension not in EXTENSIONS:
        raise ValueError(f"{path}: unknown file type {extension or '(no extension)'!r}; use "
                         f"{', '.join(EXTENSIONS)} (.jsonl: one JSON object per line), a "
                         "`datasets` folder (save_to_disk) or an .arrow file")
    return extension


def is_hf_dataset(table: Table) -> bool:
    """Whether `table` is read through HuggingFace `datasets`: a hub split, an .arrow file, or
    a folder (save_to_disk)."""
    return (isinstance(table, HubSplit) or table.lower().endswith(".arrow")
            or epath.Path(table).is_dir())


def check_exists(table: Table, key: str) -> None:
    """FileNotFoundError naming config data.`key` if the file or folder `table` is not there (a
    hub split is checked when it loads)."""
    if not isinstance(table, HubSplit) and not epath.Path(table).exists():
        raise FileNotFoundError(f"config data.{key}={table}: no such file or folder")


def _datasets() -> Any:
    try:
        import datasets  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ImportError("reading a HuggingFace dataset needs the `datasets` package: pip "
                          "install datasets (or 'albert-jax[datasets]')") from None
    return datasets


def _load_hf_dataset(table: Table) -> Any:
    """The `datasets.Dataset` of `table` (is_hf_dataset); one ValueError for a folder that is
    not one dataset or a split the hub dataset lacks."""
    datasets = _datasets()
    if isinstance(table, HubSplit):
        try:
            return datasets.load_dataset(table.name, table.config or None, split=table.split)
        except ValueError as error:  # "Unknown split "x". Should be one of [...]."
            raise ValueError(f"config data.hf_dataset: {table}: {error}") from None
    if table.lower().endswith(".arrow"):
        return datasets.Dataset.from_file(table)
    folder = epath.Path(table)
    if (folder / "dataset_dict.json").exists():
        splits = json.loads((folder / "dataset_dict.json").read_bytes()).get("splits", [])
        raise ValueError(f"{table}: a DatasetDict folder; name one split's folder: "
                         + ", ".join(f"{table.rstrip('/')}/{split}" for split in splits))
    if not (folder / "state.json").exists():
        raise ValueError(f"{table}: a folder, but not one of `Dataset.save_to_disk` (no "
                         "state.json); give a dataset folder, an .arrow file or a file of "
                         f"{', '.join(EXTENSIONS)}")
    return datasets.load_from_disk(table)


def _hf_dataset_rows(table: Table, batch_rows: int) -> Iterator[tuple[int, Row]]:
    line = 0
    for batch in _load_hf_dataset(table).iter(batch_size=batch_rows):
        names = list(batch)
        for values in zip(*batch.values()):
            line += 1
            yield line, dict(zip(names, values))


def _header(path: str, names: list[str]) -> list[str]:
    names = [name.strip() for name in names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{path}:1: the header names column(s) {', '.join(map(repr, repeated))} "
                         f"more than once; every column needs its own name")
    return names


def _delimited_rows(path: str, delimiter: str, quoting: Literal[0, 1, 2, 3]
                    ) -> Iterator[tuple[int, Row]]:
    """Rows of a CSV/TSV file with a header row, each with the physical line it starts on."""
    separated = "tab-separated" if delimiter == "\t" else "comma-separated"
    # utf-8-sig: UTF-8, ignoring a byte-order mark if an editor added one.
    with open_text(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, delimiter=delimiter, quoting=quoting)
        try:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}: empty file; expected a header row naming the "
                                 f"columns, then one {separated} row per example")
            header = _header(path, header)
            end_of_last_row = reader.line_num
            for fields in reader:
                # csv counts lines as it reads them; the row started after the previous one ended.
                line, end_of_last_row = end_of_last_row + 1, reader.line_num
                if not fields:  # A blank line holds no example.
                    continue
                if len(fields) != len(header):
                    raise ValueError(
                        f"{path}:{line}: {len(fields)} fields, but the header has {len(header)} "
                        f"({', '.join(header)}); first field {shown(fields[0])}"
                        + ("; a tab inside a text breaks a TSV row (TSV has no quoting)"
                           if delimiter == "\t" else
                           "; quote a field that holds a comma, a quote or a newline"))
                yield line, dict(zip(header, fields))
        except csv.Error as error:
            raise ValueError(f"{path}:{reader.line_num}: not readable as {separated} values "
                             f"({error})") from None


def _jsonl_rows(path: str) -> Iterator[tuple[int, Row]]:
    with open_text(path, encoding="utf-8-sig") as file:
        for line_number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg} at column "
                                 f"{error.colno}): {shown(line.rstrip())}; each line must be "
                                 f"one JSON object") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_number}: a JSON {type(row).__name__}, not an "
                                 f"object: {shown(line.rstrip())}; each line must be one JSON "
                                 'object such as {"text": "...", "label": "..."}')
            yield line_number, row


def _parquet_rows(path: str, batch_rows: int) -> Iterator[tuple[int, Row]]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError(f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`, or "
                          f"use .csv, .tsv or .jsonl)") from None
    with epath.Path(path).open("rb") as file:  # pyarrow reads a gs:// file through it too
        try:
            parquet_file = pyarrow.parquet.ParquetFile(file)
        except pyarrow.ArrowException as error:
            raise ValueError(f"{path}: not a Parquet file ({error})") from None
        line = 0
        for batch in parquet_file.iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                line += 1
                yield line, row


def _file_rows(path: str, batch_rows: int) -> Iterator[tuple[int, Row]]:
    """The rows of a CSV, TSV, JSON Lines or Parquet file, by its extension."""
    extension = _extension(path)
    if not epath.Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if extension == ".csv":
        return _delimited_rows(path, ",", csv.QUOTE_MINIMAL)
    if extension == ".tsv":
        return _delimited_rows(path, "\t", csv.QUOTE_NONE)
    if extension == ".jsonl":
        return _jsonl_rows(path)
    return _parquet_rows(path, batch_rows)


def iter_row_chunks(path: Table,
                    chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[list[tuple[int, Row]]]:
    """The rows of `path` in chunks of at most `chunk_rows`, read lazily (bounded memory).

    Yields:
      lists of (line, row): `line` is the physical line where the row starts (Parquet and
      datasets: the row number from 1); `row` maps column names to cells (strings for CSV/TSV,
      JSON values for .jsonl, Python values for Parquet and datasets).
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} must be at least 1")
    if is_hf_dataset(path):
        rows = _hf_dataset_rows(path, chunk_rows)
    else:
        assert isinstance(path, str)  # a HubSplit is always read through datasets
        rows = _file_rows(path, chunk_rows)
    chunk = []
    try:
        for line_and_row in rows:
            chunk.append(line_and_row)
            if len(chunk) == chunk_rows:
                yield chunk
                chunk = []
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start} of a block: {error.reason}); "
                         f"save the file as UTF-8") from None
    if chunk:
        yield chunk


def column_names(path: Table) -> tuple[str, ...]:
    """The columns of the first row of `path` (none for an empty file)."""
    first_chunk = next(iter_row_chunks(path, 1), [])
    return tuple(first_chunk[0][1]) if first_chunk else ()


# --- Rows -> examples ---------------------------------------------------------------------------

def _cell_text(value: Any) -> str | None:
    """A cell as text; None for a missing value (JSON null, Parquet null, a NaN float)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)  # true, 3, 2.5: JSON's text of the value.
    raise TypeError(type(value).__name__)


class _RowReader:
    """Turns the rows of one file into TextExamples or ChoiceQuestions, checking every value."""

    def __init__(self, path: Table, kind: str, columns: Columns, label_list: Sequence[str] | None,
                 labelled: bool, num_choices: int | None):
        check_kind(kind)
        self.path, self.kind, self.columns, self.labelled = path, kind, columns, labelled
        self.label_list = None if label_list is None else tuple(label_list)
        self.known_labels = None if label_list is None else frozenset(label_list)
        # The option count every question must have, and where it comes from (for messages).
        self.num_choices = num_choices
        self.num_choices_source = "the training data"
        self.rows_read = 0

    def _column(self, row: Row, where: str, column: str, key: str) -> Any:
        if column not in row:
            raise ValueError(f"{where}: no column {column!r} (config data.{key}); the file's "
                             f"columns are {', '.join(map(repr, row)) or '(none)'}")
        return row[column]

    def _text(self, row: Row, where: str, column: str, key: str) -> str:
        value = self._column(row, where, column, key)
        try:
            text = _cell_text(value)
        except TypeError:
            raise ValueError(f"{where}: column {column!r} holds a {type(value).__name__}, not a "
                             f"text: {shown(value)}") from None
        if text is None or not text.strip():
            raise ValueError(f"{where}: column {column!r} (config data.{key}) is empty: "
                             f"{shown(text)}; every example needs its text")
        return text

    def _label(self, row: Row, where: str) -> Any:
        """The raw label cell, or None for an unlabelled row of an unlabelled file."""
        column = self.columns.label
        if not self.labelled and (not column or column not in row):
            return None
        if not column:
            raise ConfigError(f"config data.label is empty: name the label column of {self.path}")
        value = self._column(row, where, column, "label")
        is_missing = value is None or (isinstance(value, (str, float))
                                       and not (_cell_text(value) or "").strip())
        if is_missing:
            if self.labelled:
                raise ValueError(f"{where}: column {column!r} (config data.label) is empty; "
                                 f"every example of a training or dev file needs a label")
            return None
        return value

    def _class_label(self, value: Any, where: str) -> str | None:
        if value is None:
            return None
        try:
            label = _cell_text(value)
        except TypeError:
            raise ValueError(f"{where}: label {shown(value)} is a {type(value).__name__}, not "
                             f"a class name") from None
        if self.known_labels is not None and label not in self.known_labels:
            assert self.label_list is not None  # set with known_labels
            listed = ", ".join(map(repr, self.label_list[:_SHOWN_LABELS]))
            if len(self.label_list) > _SHOWN_LABELS:
                listed += f" and {len(self.label_list) - _SHOWN_LABELS} more"
            raise ValueError(f"{where}: label {shown(label)} is not one of the "
                             f"{len(self.label_list)} labels ({listed}); the labels are those of "
                             f"the training file, or config data.labels")
        return label

    def _regression_label(self, value: Any, where: str) -> str | None:
        if value is None:
            return None
        number = None
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        if number is None or not math.isfinite(number):
            raise ValueError(f"{where}: regression label {shown(value)} is not a finite number")
        return value.strip() if isinstance(value, str) else json.dumps(value)

    def _options(self, row: Row, where: str) -> tuple[str, ...]:
        names = self.columns.options
        if len(names) > 1:
            options = tuple(self._text(row, where, name, "options") for name in names)
        else:
            value = self._column(row, where, names[0], "options")
            if isinstance(value, str):  # CSV/TSV: the list is written as JSON.
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    value = None
            if not isinstance(value, (list, tuple)):
                raise ValueError(
                    f"{where}: column {names[0]!r} (config data.options) is not a list of "
                    f"options: {shown(row[names[0]])}; give a JSON list such as "
                    f'["red", "blue"], or name one column per option: '
                    f"--config.data.options=option_a,option_b")
            texts: list[str] = []
            for number, option in enumerate(value):
                try:
                    text = _cell_text(option)
                except TypeError:
                    text = None
                if text is None or not text.strip():
                    raise ValueError(f"{where}: option {number} of column {names[0]!r} is empty "
                                     f"or not a text: {shown(option)}")
                texts.append(text)
            options = tuple(texts)
        if len(options) < 2:
            raise ValueError(f"{where}: {len(options)} option(s); a multiple-choice question "
                             f"needs at least 2")
        if self.num_choices is None:
            self.num_choices, self.num_choices_source = len(options), f"{where} (the first row)"
        elif len(options) != self.num_choices:
            raise ValueError(f"{where}: {len(options)} options, but {self.num_choices_source} "
                             f"has {self.num_choices}; every question needs the same number of "
                             f"options")
        return options

    def _answer(self, value: Any, options: tuple[str, ...], where: str) -> int | None:
        """An integer (or a string of digits) is the option's index; anything else its text."""
        if value is None:
            return None
        index = None
        if isinstance(value, int) and not isinstance(value, bool):
            index = value
        elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
            index = int(value)
        if index is not None:
            if not 0 <= index < len(options):
                raise ValueError(f"{where}: answer index {index} is out of range: the "
                                 f"{len(options)} options are numbered 0..{len(options) - 1}")
            return index
        matches = [number for number, option in enumerate(options) if option == value]
        if len(matches) != 1:
            problem = ("is neither an option index nor the text of an option" if not matches
                       else f"is the text of options {matches[0]} and {matches[1]}")
            raise ValueError(f"{where}: answer {shown(value)} {problem}; give the 0-based "
                             f"index of the right option or its exact text")
        return matches[0]

    def __call__(self, line: int, row: Row) -> TextExample | ChoiceQuestion:
        where = f"{self.path}:{line}"
        columns = self.columns
        if columns.id:
            example_id = self._text(row, where, columns.id, "id")
        else:
            example_id = str(self.rows_read)
        self.rows_read += 1
        label = self._label(row, where)
        if self.kind == "multiple_choice":
            options = self._options(row, where)
            return ChoiceQuestion(
                id=example_id,
                article=(self._text(row, where, columns.context, "context")
                         if columns.context else ""),
                question=(self._text(row, where, columns.question, "question")
                          if columns.question else ""),
                options=options, answer=self._answer(label, options, where), source=where)
        return TextExample(
            id=example_id, text_a=self._text(row, where, columns.text_a, "text_a"),
            text_b=self._text(row, where, columns.text_b, "text_b") if columns.text_b else None,
            label=(self._class_label(label, where) if self.kind == "classification"
                   else self._regression_label(label, where)),
            source=where)


def iter_example_chunks(path: Table, kind: str, columns: Columns, *,
                        label_list: Sequence[str] | None = None, labelled: bool = True,
                        num_choices: int | None = None,
                        chunk_rows: int = DEFAULT_CHUNK_ROWS
                        ) -> Iterator[list[Any]]:  # TextExamples or ChoiceQuestions by `kind`
    """The examples of `path` in file order, in chunks of at most `chunk_rows` (bounded memory).

    Args:
      path: a .csv, .tsv, .jsonl or .parquet file.
      kind: "classification" and "regression" give `TextExample`s (label: the label string, or the
        number's text for regression; None when unlabelled), "multiple_choice" `ChoiceQuestion`s.
      columns: where the fields are (`Columns`; a user's own files: custom/data.py `columns`).
      label_list: classification: the labels a label must be one of (None: any, for the
        training file before its label list is known).
      labelled: False for a file to predict on: the label column may be absent or empty (a
        label that is there is still checked).
      num_choices: multiple choice: the option count every question must have (the training
        file's); None: that of the file's first question.
    """
    read_row = _RowReader(path, kind, columns, label_list, labelled, num_choices)
    for chunk in iter_row_chunks(path, chunk_rows):
        yield [read_row(line, row) for line, row in chunk]


def read_file(path: Table, kind: str, columns: Columns, *,
              label_list: Sequence[str] | None = None, labelled: bool = True,
              num_choices: int | None = None) -> list[Any]:  # TextExamples or ChoiceQuestions
    """All examples of `path` (see `iter_example_chunks`); an empty file is an error."""
    examples = [example for chunk in iter_example_chunks(
        path, kind, columns, label_list=label_list, labelled=labelled, num_choices=num_choices)
        for example in chunk]
    if not examples:
        raise ValueError(f"{path}: no examples (only a header, or no lines); expected one row "
                         f"per example")
    return examples
