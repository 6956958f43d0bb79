"""What the reference settings do to a corpus that is not English, counted on a sample of its
text, and one line naming the key to set where they damage it.

  for line in warnings(tokenizer, sample):   # `tokenizer train`, `data build`, `data inspect`
      print(line)                            # a sample of SAMPLE_SENTENCES is plenty

Two counts, each only while its key is at the reference's value:
- keep_accents False: the characters SPEC 2.2's accent step drops (NFKD, then every character
  with a combining class: the Hindi virama, Thai tone marks, Japanese dakuten, Vietnamese tones).
- word_boundaries "reference" (SentencePiece): the pieces SPEC 1.4.2's rule makes word starts
  where "spaces" would not (a Hindi or Russian word masked piece by piece).
A share over `DROPPED_SHARE` of the characters or `EXTRA_START_SHARE` of the pieces prints the
line, with the first example of the sample. Measured at the defaults (characters dropped, extra
word starts) with a model of 500 pieces trained on tests/multilingual_text.py: Hindi 4.0% and
73%, Thai 9.5% and 0% (every Thai piece is a word either way), Japanese 10.3% and 0%, Russian
2.8% and 76%, Korean 0% and 72%, Vietnamese 31% and 1.9%, French 3.8% and 0%, English 0% and
0%; the demo corpus's English (Python's docstrings, 4,000 pieces) 0% and 0.4-0.5% in three
samples of 2,000 sentences (digits inside numbers: '▁200' '7').
"""
from __future__ import annotations

import unicodedata
from typing import Iterable

import numpy as np

from albert_jax.data.tokenizers.preprocessing import strip_accents
from albert_jax.data.tokenizers.tokenizer import SentencePieceTokenizer, Tokenizer

SAMPLE_SENTENCES = 2_000  # sentences of a corpus counted (`data build`, `data inspect`)
DROPPED_SHARE = 0.001  # of the characters read: a few accented names in an English text stay below
EXTRA_START_SHARE = 0.05  # of the pieces: digits inside numbers in an English text stay below
_EXAMPLE_CHARS = 12  # a longer word (a Thai sentence has no spaces) is shown around its mark


def warnings(tokenizer: Tokenizer, sentences: Iterable[str]) -> list[str]:
    """`TextDamage.warnings` of `sentences` (a sample of a corpus) for `tokenizer`."""
    return TextDamage(tokenizer).add_all(sentences).warnings()


class TextDamage:
    """Counts, over the texts given to `add`, what the tokenizer's reference settings change."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        settings = tokenizer.settings
        # WordPiece strips accents only when it lower-cases (BERT's BasicTokenizer).
        self._count_accents = not settings.keep_accents and (
            settings.kind == "sentencepiece" or settings.do_lower_case)
        self._extra_start: np.ndarray | None = None
        self._spaces_start: np.ndarray | None = None
        if isinstance(tokenizer, SentencePieceTokenizer) and settings.word_boundaries == "reference":
            self._spaces_start = tokenizer.word_starts("spaces")
            self._extra_start = tokenizer.word_start & ~self._spaces_start
        self.characters = self.dropped = self.pieces = self.extra_starts = 0
        self.accent_example: tuple[str, str] | None = None
        self.start_example: tuple[str, int, list[str]] | None = None

    def add_all(self, texts: Iterable[str]) -> "TextDamage":
        for text in texts:
            self.add(text)
        return self

    def add(self, text: str) -> None:
        self.characters += len(text)
        if self._count_accents and not text.isascii():
            dropped = _combining_marks(text)
            self.dropped += dropped
            if dropped and self.accent_example is None:
                self.accent_example = _accent_example(text)
        if self._extra_start is not None and self._spaces_start is not None:
            ids = self._tokenizer.encode(text)
            self.pieces += len(ids)
            extra = int(self._extra_start[ids].sum())
            self.extra_starts += extra
            if extra and self.start_example is None:
                self.start_example = self._start_example(ids)

    def _start_example(self, ids: np.ndarray) -> tuple[str, int, list[str]]:
        """The first word (pieces from one "spaces" start to the next) that SPEC 1.4.2 cuts:
        its text, how many words it makes of it, its pieces."""
        assert self._spaces_start is not None
        starts = np.flatnonzero(self._spaces_start[ids]).tolist() + [len(ids)]
        if starts[0] != 0:
            starts.insert(0, 0)
        for begin, end in zip(starts, starts[1:]):
            words = int(self._tokenizer.word_start[ids[begin:end]].sum())
            if words > 1:
                pieces = self._tokenizer.id_to_piece(ids[begin:end])
                return "".join(pieces).lstrip("\u2581"), words, pieces
        raise AssertionError("an extra word start lies in some word")

    def warnings(self) -> list[str]:
        """One line per key whose reference value changes more of the text than its share."""
        lines = []
        if self.accent_example and self.dropped > DROPPED_SHARE * self.characters:
            original, changed = self.accent_example
            lines.append(
                f"warning: SPEC 2.2's accent step drops {self.dropped / self.characters:.1%} of "
                f"the characters of this text, e.g. {original!r} -> {changed!r}; set "
                f"--config.data.keep_accents=True to keep them")
        if self.start_example and self.extra_starts > EXTRA_START_SHARE * self.pieces:
            word, words, pieces = self.start_example
            lines.append(
                f"warning: SPEC 1.4.2's word starts cut {self.extra_starts / self.pieces:.0%} of "
                f"the pieces of this text off the word they are part of, e.g. {word!r} is "
                f"masked as {words} words {pieces}; set "
                f"--config.data.word_boundaries=spaces to mask whole words")
        return lines


def _combining_marks(text: str) -> int:
    """How many characters SPEC 2.2's accent step drops from `text`."""
    return sum(1 for char in unicodedata.normalize("NFKD", text) if unicodedata.combining(char))


def _accent_example(text: str) -> tuple[str, str]:
    """The first word of `text` that the accent step changes, before and after (after the
    SentencePiece model's NFKC, as the model sees it: "が" -> "か", not "か" and a lone mark)."""
    word = next(word for word in text.split() if _combining_marks(word))
    if len(word) > _EXAMPLE_CHARS:
        first = next(index for index, char in enumerate(word) if _combining_marks(char))
        word = word[max(0, first - _EXAMPLE_CHARS // 2):first + _EXAMPLE_CHARS // 2]
    return word, unicodedata.normalize("NFKC", strip_accents(word))
