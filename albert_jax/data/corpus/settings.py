"""How a corpus's text becomes documents of sentences: the `data.*` reading keys, checked.

  settings = ReadSettings.from_config(config.data)    # ConfigError in one line on a bad value

  data.text_column      the field of a record that holds its text ("text"; OSCAR's "content")
  data.documents        "blank_lines": a blank line ends a document; "records": each Parquet
                        row, JSON line, HF or TFDS example (or a text file's line) is one
                        document, its newlines separating paragraphs. "": the format's own
                        (blank_lines for text files, records for every other format)
  data.sentences        "lines": each non-empty line is one sentence (SPEC 1.2); "segmenter":
                        each line is a paragraph cut into sentences by `segmenter.py`. "": the
                        format's own (lines for text files, segmenter for every other format)
  data.language         the ISO 639 code whose sentence rules the segmenter applies ("en")
  data.language_column  a record field holding each record's own language code (FineWeb-2's
                        "language"); "": none, data.language for every record

So BERT-format text is blank_lines + lines (SPEC 1.2, the defaults of a text file), CC-100 is
blank_lines + segmenter, Wikipedia, FineWeb, C4 and OSCAR are records + segmenter.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from albert_jax.data.corpus import segmenter
from albert_jax.errors import ConfigError

DOCUMENTS = ("blank_lines", "records")
SENTENCES = ("lines", "segmenter")
FORMAT_DEFAULT = ""  # data.documents / data.sentences: the format's own way


@dataclasses.dataclass(frozen=True)
class ReadSettings:
    """The reading keys of a run config (see the module docstring); picklable."""
    text_column: str = "text"
    documents: str = FORMAT_DEFAULT
    sentences: str = FORMAT_DEFAULT
    language: str = "en"
    language_column: str = ""

    @classmethod
    def from_config(cls, data: Any) -> "ReadSettings":
        """The settings of `config.data` (a key it lacks keeps its default); checked."""
        defaults = cls()
        settings = cls(**{field.name: str(data.get(field.name, getattr(defaults, field.name)))
                          for field in dataclasses.fields(cls)})
        settings.check()
        return settings

    def check(self) -> None:
        """ConfigError naming the key and the value the first wrong one has."""
        if not self.text_column:
            raise ConfigError("config.data.text_column is empty: give the field of each record "
                              "that holds its text (\"text\"; OSCAR's is \"content\")")
        for key, value, choices in (("documents", self.documents, DOCUMENTS),
                                    ("sentences", self.sentences, SENTENCES)):
            if value not in (FORMAT_DEFAULT, *choices):
                raise ConfigError(f"config.data.{key}={value!r}: give one of {list(choices)}, or "
                                  f"\"\" for the corpus format's own")
        segmenter.split_sentences("", self.language)  # ConfigError for a wrong language code

    def resolved(self, *, records_format: bool) -> "ReadSettings":
        """These settings with the format's own documents and sentences where they are ""
        (`records_format`: Parquet, JSON Lines, Arrow, HF, TFDS; not a text file)."""
        return dataclasses.replace(
            self, documents=self.documents or ("records" if records_format else "blank_lines"),
            sentences=self.sentences or ("segmenter" if records_format else "lines"))

    def for_group(self, name: str) -> "ReadSettings":
        """These settings for a mixture's group `name`: data.language = `name` where it is a
        language code (`hi`, `pt-BR`), else as they are."""
        try:
            segmenter.sentencex_language(name)
        except ConfigError:
            return self
        return dataclasses.replace(self, language=name)

    def identity(self) -> str:
        """The keys that differ from their defaults, "key=value;..." ("" for the defaults): what
        a dataset's name hashes, so that the defaults keep the name datasets had before."""
        defaults = ReadSettings()
        return ";".join(f"{field.name}={getattr(self, field.name)}"
                        for field in dataclasses.fields(self)
                        if getattr(self, field.name) != getattr(defaults, field.name))
