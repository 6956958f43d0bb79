"""What reading a corpus saw: counts of documents and sentences, and of the bad input skipped.

Reading never crashes or hangs on bad input: each kind is counted here, and the first one met is
named (file, and line, byte or row group) so that a user can look at it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable


@dataclasses.dataclass
class CorpusStats:
    """Counters of what reading saw; bad input ends up here instead of crashing.

    first_problem: where the first bad input was met ("a.jsonl line 7: malformed JSON"), or "".
    """
    sources: int = 0
    documents: int = 0
    sentences: int = 0
    empty_documents: int = 0  # boundaries with no sentence in between (e.g. 2 blank lines), skipped
    split_documents: int = 0  # documents cut at MAX_DOCUMENT_SENTENCES
    skipped_long_lines: int = 0  # lines over MAX_LINE_BYTES, skipped
    invalid_utf8_lines: int = 0  # decoded with U+FFFD replacement characters
    truncated_files: int = 0  # unreadable past some point (e.g. a cut-off .gz); the rest skipped
    malformed_json_lines: int = 0  # a JSON Lines line that is not a JSON object, skipped
    non_text_records: int = 0  # a record whose text is missing, null or not a string, skipped
    unreadable_row_groups: int = 0  # a Parquet row group (or Arrow batch) that fails to read
    unknown_languages: int = 0  # a record's language that is no language code: data.language used
    first_problem: str = ""

    def problem(self, counter: str, where: str) -> None:
        """Counts one bad input of kind `counter` (a field above), met at `where`."""
        setattr(self, counter, getattr(self, counter) + 1)
        if not self.first_problem:
            self.first_problem = f"{where}: {counter.replace('_', ' ').rstrip('s')}"

    def report(self) -> str:
        problems = [f"{getattr(self, name)} {name.replace('_', ' ')}" for name in _PROBLEMS
                    if getattr(self, name)]
        first = f" (the first: {self.first_problem})" if self.first_problem else ""
        return (f"{self.documents} documents, {self.sentences} sentences from {self.sources} "
                f"sources" + (f"; {', '.join(problems)}{first}" if problems else ""))

    def add(self, part: dict[str, Any]) -> None:
        """Adds the stats `part` (`dataclasses.asdict` of one read after this one): counts
        added, the first problem kept unless there was none."""
        for name, value in part.items():
            if name == "first_problem":
                self.first_problem = self.first_problem or value
            else:
                setattr(self, name, getattr(self, name) + value)

    @classmethod
    def merged(cls, parts: Iterable[dict[str, Any]]) -> "CorpusStats":
        """The sum of the stats of several units (`dataclasses.asdict` each, in unit order):
        counts added, the first problem of the first unit that met one."""
        total = cls()
        for part in parts:
            total.add(part)
        return total


# The counters after `sentences` (of bad or odd input), in report order.
_PROBLEMS = tuple(field.name for field in dataclasses.fields(CorpusStats)[3:-1])
