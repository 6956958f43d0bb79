"""How a tokenizer turns text into ids beyond its own file: one record, made once, passed whole.

  settings = TextSettings.from_config(config.data)          # a run's keys, checked
  settings = TextSettings.recorded(model_path, fallback)    # what a workdir keeps beside its model
  tokenizer = Tokenizer.load(path, settings)                # tokenizers/tokenizer.py

The record is what every path from text to ids needs besides the model file: the kind of file
(`data.tokenizer_kind`), lower-casing (`data.do_lower_case`, SPEC 2.2), accents
(`data.keep_accents`), the digit-comma rule (`data.comma_rule`, SPEC 2.3) and where whole words
start for n-gram masking (`data.word_boundaries`, SPEC 1.4.2). A workdir keeps it as JSON beside its SentencePiece model
or WordPiece vocabulary (`record_path`), so a run that reads the workdir later tokenizes as the
run that wrote it: fine-tuning from it, evaluate, predict, export. A fine-tuning config leaves
its text keys None ("the checkpoint's", `config_keys` skips them), so the settings of its
`init_from` apply unless the run sets a key itself (finetune/core/pretrained.py).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from etils import epath

from albert_jax.data.tokenizers.preprocessing import (
    COMMA_RULES,
    DEFAULT_COMMA_RULE,
    WORD_BOUNDARIES,
    check_comma_rule,
)
from albert_jax.errors import ConfigError

KINDS = ("sentencepiece", "wordpiece")
_MODEL_SUFFIX = ".model"
_CONFIG_KEYS = {"kind": "tokenizer_kind"}  # a field's config.data key, where not its own name


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """A tokenizer's text settings; picklable, compared field by field.

    Attributes:
      kind: "sentencepiece" (a `.model` file, SPEC 2.1) or "wordpiece" (a BERT vocabulary,
        SPEC 2.5).
      do_lower_case: whether text is lower-cased before tokenizing (SPEC 2.2).
      keep_accents: False: SPEC 2.2 exactly (NFKD, combining marks dropped); True: the marks
        are kept (HF AlbertTokenizer's keep_accents; for WordPiece, BertTokenizer's
        strip_accents=False: lower-casing no longer strips accents).
      comma_rule: "reference" or "hf", the SPEC 2.3 digit-comma rule (SentencePiece only).
      word_boundaries: "reference" (SPEC 1.4.2's `_is_start_piece_sp`) or "spaces" (a piece
        starts a word where the text has a space, in every script; `is_start_piece`). A
        WordPiece vocabulary's words start at its pieces but "##" continuations either way.
    """
    kind: str = KINDS[0]
    do_lower_case: bool = True
    keep_accents: bool = False
    comma_rule: str = DEFAULT_COMMA_RULE
    word_boundaries: str = WORD_BOUNDARIES[0]

    @classmethod
    def from_config(cls, data: Any) -> "TextSettings":
        """The settings of `config.data` (a key it lacks or leaves None keeps its default),
        checked."""
        settings = cls(**config_keys(data))
        settings.check()
        return settings

    @classmethod
    def recorded(cls, model_path: str, fallback: "TextSettings") -> "TextSettings":
        """The record kept beside `model_path` (`read_record`) over `fallback`: a key the record
        lacks (a workdir written before the key was recorded) keeps `fallback`'s value."""
        return dataclasses.replace(fallback, **(read_record(model_path) or {}))

    def check(self) -> None:
        """ConfigError naming the key and the value of the first wrong one."""
        if self.kind not in KINDS:
            raise ConfigError(f"config data.tokenizer_kind={self.kind!r}; use one of {list(KINDS)}")
        check_comma_rule(self.comma_rule)
        if self.word_boundaries not in WORD_BOUNDARIES:
            raise ConfigError(f"config data.word_boundaries={self.word_boundaries!r}; use "
                              f"{WORD_BOUNDARIES[0]!r} (SPEC 1.4.2) or {WORD_BOUNDARIES[1]!r} "
                              "(whole words in every script)")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def record(self) -> bytes:
        """The JSON kept beside a workdir's model file, which `read_record` reads back."""
        return (json.dumps(self.as_dict(), indent=2) + "\n").encode("utf-8")


def config_keys(data: Any) -> dict[str, Any]:
    """The settings `config.data` sets, by field name (`data.tokenizer_kind` is `kind`): a key
    it lacks, or leaves None (a fine-tuning config's placeholder: "the checkpoint's"), is not
    set."""
    defaults = TextSettings().as_dict()
    keys = {}
    for name, default in defaults.items():
        value = data.get(_CONFIG_KEYS.get(name, name))
        if value is not None:
            keys[name] = type(default)(value)
    return keys


def record_path(model_path: str) -> str:
    """The record kept beside a workdir's tokenizer model (`Tokenizer.files`)."""
    return f"{model_path}.json"


def read_record(model_path: str) -> dict[str, Any] | None:
    """The settings recorded beside `model_path`, only the keys it holds (an older workdir's
    record holds only the digit-comma rule); None without a record (a model that is not a
    workdir's copy). Raises ValueError, naming the file, for a record we cannot read."""
    path = epath.Path(record_path(model_path))
    if not path.exists():
        return None
    fields = {field.name for field in dataclasses.fields(TextSettings)}
    try:
        record = json.loads(path.read_text())
        record = {key: value for key, value in record.items() if key in fields}
    except (ValueError, AttributeError):
        record = {}
    if (record.get("comma_rule") not in COMMA_RULES or record.get("kind", KINDS[0]) not in KINDS
            or record.get("word_boundaries", WORD_BOUNDARIES[0]) not in WORD_BOUNDARIES):
        raise ValueError(f"{path} records no tokenizer settings we can read (want e.g. "
                         f"{json.dumps(TextSettings().as_dict())}); fix or delete it")
    return record


def check_kind(path: str, kind: str) -> None:
    """Raises ConfigError when `path` is not named as a file of `kind`: a SentencePiece model's
    name ends in .model, a WordPiece vocabulary's does not."""
    if kind not in KINDS:
        raise ConfigError(f"config data.tokenizer_kind={kind!r}; use one of {list(KINDS)}")
    named = "sentencepiece" if os.fspath(path).endswith(_MODEL_SUFFIX) else "wordpiece"
    if named != kind:
        want = ("a name ending in .model" if kind == "sentencepiece"
                else "another name, e.g. .../vocab.txt")
        raise ConfigError(
            f"config data.tokenizer={path!r} names a {named} file but data.tokenizer_kind="
            f"{kind!r}; give data.tokenizer {want}")
