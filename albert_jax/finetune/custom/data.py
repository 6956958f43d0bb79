"""A user's own files (configs/custom.py): classification, regression and multiple-choice
examples read from CSV, TSV, JSON Lines or Parquet files or HuggingFace `datasets` (a
save_to_disk folder, an .arrow file, or data.hf_dataset's splits), with the columns named in the
config's `data` section; the splits and the label list every kind of them shares (tagging too).

  train = custom_data.read_split(config.data, "classification", "train")
  labels = custom_data.label_list(train, config.data.labels)   # saved as labels.json
  dev = custom_data.read_split(config.data, "classification", "dev", label_list=labels)

The files are tables (core/tables.py reads them, in any of its formats); this module turns
the config's `data` section into the columns to read, the split files and the label list, and
reads back the label list a finished run kept in its workdir (`labels_in_workdir`).
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

import ml_collections
from etils import epath

from albert_jax.errors import ConfigError
from albert_jax.finetune.core import tables
from albert_jax.finetune.core.examples import ChoiceQuestion, TextExample
from albert_jax.train import workdir as workdir_names


def columns(data: Mapping[str, Any], kind: str) -> tables.Columns:
    """The columns of config section `data` (configs/custom.py) for task kind `kind`."""
    tables.check_kind(kind)
    keys = (("context", "question", "options") if kind == "multiple_choice"
            else ("text_a", "text_b")) + ("label", "id")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ConfigError(f"config data has no {', '.join(missing)}: a {kind} task needs "
                          f"the data section of configs/custom.py:kind={kind}")
    if kind == "multiple_choice":
        options = name_list(data["options"], "data.options")
        if not options:
            raise ConfigError("config data.options is empty: name the column that holds the "
                              "list of options, or the option columns (a comma list)")
        return tables.Columns(label=data["label"], id=data["id"], context=data["context"],
                                 question=data["question"], options=options)
    if not data["text_a"]:
        raise ConfigError("config data.text_a is empty: name the column that holds the text")
    return tables.Columns(text_a=data["text_a"], text_b=data["text_b"], label=data["label"],
                                 id=data["id"])


def name_list(value: str | Sequence[str], key: str) -> tuple[str, ...]:
    """A list of names from a config value: a sequence, a JSON list (`["a, b", "c"]`, for names
    with commas) or a comma list (`a,b, c`, each name stripped). "" is the empty list.

    Raises ConfigError naming `key` for an empty or repeated name.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                raise ConfigError(f"config {key}={text!r} is not a JSON list ({error})") from None
            if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
                raise ConfigError(f"config {key}={text!r}: give a JSON list of strings")
        else:
            value = [name.strip() for name in text.split(",")] if text else []
    names = tuple(value)
    if any(not name for name in names):
        raise ConfigError(f"config {key}={value!r} has an empty name")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"config {key} names {', '.join(map(repr, repeated))} more than once")
    return names


SPLIT_FILE_KEYS = {"train": "train_file", "dev": "dev_file", "test": "test_file"}
# The splits of data.hf_dataset that train and dev read when their keys are empty (no test).
HUB_SPLITS = {"train": "train", "dev": "validation"}


def split_table(data: Mapping[str, Any], split: str) -> tables.Table | None:
    """The table of `split` (train, dev or test): config data.<split>_file, a file or a
    `datasets` folder; with data.hf_dataset, that key names the dataset's split (default
    HUB_SPLITS). None: the split has none."""
    name = data[SPLIT_FILE_KEYS[split]]
    if data.get("hf_dataset"):
        name = name or HUB_SPLITS.get(split, "")
        return (tables.HubSplit(data["hf_dataset"], data.get("hf_config", ""), name) if name
                else None)
    return name or None


def check_split_tables(data: Mapping[str, Any], formats: str) -> None:
    """ConfigError if train or dev has no table (`formats`: what the message offers),
    FileNotFoundError for a file or folder that is not there."""
    for split in ("train", "dev"):
        if split_table(data, split) is None:
            key = SPLIT_FILE_KEYS[split]
            raise ConfigError(f"config data.{key} is empty: give your {split} file "
                              f"(--config.data.{key}=FILE: {formats}, a `datasets` folder), or "
                              "data.hf_dataset=NAME")
    for split, key in SPLIT_FILE_KEYS.items():
        table = split_table(data, split)
        if table is not None:
            tables.check_exists(table, key)


def custom_file_splits(config: ml_collections.ConfigDict
                       ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(eval splits, test splits) of a task on the user's own files: dev, and test where
    config.data.test_file names one."""
    return ("dev",), (("test",) if split_table(config.data, "test") is not None else ())


def read_split(data: Mapping[str, Any], kind: str, split: str, *,
               label_list: Sequence[str] | None = None,
               num_choices: int | None = None) -> list[TextExample] | list[ChoiceQuestion]:
    """The examples of `split_table(data, split)` (split: train, dev or test) with the config's
    columns.

    Train and dev need labels; test labels are optional. Give dev and test the training data's
    `label_list` (classification) and `num_choices` (multiple choice). Raises ConfigError when
    the file key is empty, FileNotFoundError when the file is missing.
    """
    if split not in SPLIT_FILE_KEYS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLIT_FILE_KEYS)}")
    key = SPLIT_FILE_KEYS[split]
    table = split_table(data, split)
    if table is None:
        raise ConfigError(f"config data.{key} is empty: give the {split} file "
                          f"(--config.data.{key}=FILE, one of {', '.join(tables.EXTENSIONS)}, "
                          "or a `datasets` folder)")
    tables.check_exists(table, key)
    return tables.read_file(table, kind, columns(data, kind), label_list=label_list,
                            labelled=split != "test", num_choices=num_choices)


# --- The label list -------------------------------------------------------------------------

def label_list(train_examples: Iterable[TextExample],
               labels: str | Sequence[str] = "") -> tuple[str, ...]:
    """The classification label list (class i is labels[i]).

    Args:
      train_examples: the training examples.
      labels: config data.labels (see `name_list`): when given, the list in its order, and
        every training label must be in it; when empty, the sorted set of the training labels
        (Python's string order: "10" before "9").

    Raises:
      ConfigError for a bad data.labels, ValueError naming the example for a training label
      outside it or when fewer than 2 labels result.
    """
    given = name_list(labels, "data.labels")
    examples = list(train_examples)
    if given:
        known = frozenset(given)
        for example in examples:
            if example.label not in known:
                raise ValueError(f"{example.source}: label {tables.shown(example.label)} is not in "
                                 f"config data.labels ({', '.join(map(repr, given))})")
        result = given
    else:
        # (every training row has its label: the file is read with labelled=True)
        result = tuple(sorted({example.label for example in examples if example.label is not None}))
    if len(result) < 2:
        where = "config data.labels" if given else (
            f"the training file {examples[0].source.rsplit(':', 1)[0]}" if examples else
            "the training data")
        raise ValueError(f"{where} has {len(result)} label(s) ({', '.join(map(repr, result))}); "
                         f"classification needs at least 2 (is config data.label the right "
                         f"column?)")
    return result


def labels_json(labels: Sequence[str]) -> str:
    """The text of a workdir's labels.json: a JSON list of the label strings, in class order."""
    return json.dumps(list(labels), ensure_ascii=False, indent=1) + "\n"


def labels_from_json(text: str, source: str) -> tuple[str, ...]:
    """The label list in labels.json text; `source` (the file) names it in errors."""
    try:
        labels = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not a JSON list of labels ({error})") from None
    if (not isinstance(labels, list) or len(labels) < 2
            or not all(isinstance(label, str) for label in labels)
            or len(set(labels)) != len(labels)):
        raise ValueError(f"{source}: expected a JSON list of 2 or more distinct label strings, "
                         f"got {tables.shown(labels)}")
    return tuple(labels)


def labels_in_workdir(run_dir: epath.Path) -> tuple[str, ...]:
    """The label list (multiple choice: the option indices; tagging: the tags) a finished run
    kept in its labels.json."""
    path = run_dir / workdir_names.LABELS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the run in {run_dir} keeps its label "
                                "list there; it was deleted or the run never started")
    # Decoded here: epath's text mode on gs:// ignores `encoding`.
    return labels_from_json(path.read_bytes().decode("utf-8"), str(path))
