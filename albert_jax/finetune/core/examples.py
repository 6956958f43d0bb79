"""The examples the readers of every benchmark give the features: a text (pair) to classify or
score, a question with options to choose from, a sentence to tag word by word. Each has an `id`:
the name its prediction carries in predictions.jsonl and in the benchmark's submission file.

  TextExample:    GLUE (glue/data.py), a user's classification or regression table
                  (custom/data.py).
  ChoiceQuestion: RACE (race/data.py), a user's multiple-choice table (custom/data.py).
  Sentence:       a user's tagged sentences (custom/tagging_data.py).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One text, or a pair of texts, with its label.

    Attributes:
      id: the id written in prediction files: the file's own index/id column, else the 0-based
        row number among its data rows.
      text_a: the first (or only) text, as in the file.
      text_b: the second text; None for a single-text task (CoLA, SST-2, most own data).
      label: the label string as in the file ("entailment", "0"; a regression's number as text,
        "3.800"); None for an unlabelled file.
      source: "<file path>:<line number>" (or the TFDS split and record) for error messages.
    """

    id: str
    text_a: str
    text_b: str | None
    label: str | None
    source: str


@dataclasses.dataclass(frozen=True)
class ChoiceQuestion:
    """One multiple-choice question with its context (`features.multiple_choice_features` takes
    them).

    Attributes:
      id: RACE: "<split>/<level>/<file name>-<question number from 0>", e.g.
        "dev/high/1234.txt-0"; a table: its id column, else the 0-based row number.
      article: the context ("" when a table has none). RACE's name.
      question: the question ("" when a table has none); a "_" marks a blank the option fills
        (SPEC 8.4).
      options: the options, in order (RACE: A-D); every question of a file has as many.
      answer: the index of the right option; None when the data has no answers.
      source: "<file path>:<line>" for error messages; "" where the reader names the file in
        its own messages (RACE).
      level: RACE's "middle" (RACE-M) or "high" (RACE-H); None for a table's question.
    """

    id: str
    article: str
    question: str
    options: tuple[str, ...]
    answer: int | None
    source: str = ""
    level: str | None = None


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence: words and their IOB2 tags (None in a file without tags)."""

    id: str
    tokens: tuple[str, ...]
    tags: tuple[str, ...] | None
    source: str

    def known_tags(self) -> tuple[str, ...]:
        """The tags of a sentence that has them (training data, labelled features)."""
        if self.tags is None:
            raise ValueError(f"{self.source}: a sentence without tags where tags are needed")
        return self.tags
