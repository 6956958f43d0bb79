"""Every `SPEC x.y` citation in the repository resolves to docs/SPEC.md.

docs/SPEC.md defines a *label* in one of two ways:
  - a heading whose text starts with a number: `## 1. Pretraining ...` defines "1",
    `### 1.4 Whole-word ...` defines "1.4";
  - a labelled item: a line, optionally a list bullet, that starts with the label in bold:
    `- **1.4.6** Picking ...` defines "1.4.6", `  - **1.3.5a** If ...` defines "1.3.5a".

A citation is the word SPEC, whitespace (a line break and a comment `#` may come between), then
a number `N(.N)*` with an optional letter: "SPEC 6.3", "SPEC 1.3.5a", "SPEC 1.6.b" (read as
"1.6b"). A range or list cites both ends: "SPEC 1.3.7-1.3.8", "SPEC 4.1/4.2"; a right end with
fewer parts replaces the last parts of the left one ("SPEC 3.2.1-3" cites 3.2.1 and 3.2.3).

A citation resolves only if its label is defined exactly: "SPEC 1.4.6" needs the item
**1.4.6**; the heading 1.4 alone does not do. Items must sit under their own heading (the
label of **1.4.6** starts with "1.4."), labels are unique, and every numbered section names
its sources on a "Source:" line.
"""
from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent
SPEC_PATH = REPO / "docs" / "SPEC.md"
CITING_DIRS = ("albert_jax", "configs", "launch", "benchmarks", "tests")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".txt"}

_NUMBER = r"(\d+(?:\.\d+)*)(?:\.?([a-z])(?![A-Za-z]))?"
CITATION = re.compile(r"(?<![A-Za-z0-9_])SPEC[\s#]+" + _NUMBER + r"(?:[-–/]" + _NUMBER + r")?")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s")
ITEM = re.compile(r"^\s*(?:[-*+]\s+)?\*\*(\d+(?:\.\d+)+[a-z]?)\*\*")


def cited_labels(text: str) -> list[tuple[int, str]]:
    """(line number, label) of every SPEC citation in `text`, ranges expanded to both ends."""
    found = []
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        left, left_letter, right, right_letter = match.groups()
        found.append((line, left + (left_letter or "")))
        if right is not None:
            left_parts, right_parts = left.split("."), right.split(".")
            if len(right_parts) < len(left_parts):
                right_parts = left_parts[:len(left_parts) - len(right_parts)] + right_parts
            found.append((line, ".".join(right_parts) + (right_letter or "")))
    return found


def defined_labels(spec_text: str) -> list[tuple[int, str, str | None]]:
    """(line number, label, enclosing heading label) of every heading and labelled item."""
    labels = []
    heading = None
    for line_number, line in enumerate(spec_text.splitlines(), start=1):
        if (match := HEADING.match(line)) is not None:
            heading = match.group(1)
            labels.append((line_number, heading, None))
        elif (match := ITEM.match(line)) is not None:
            labels.append((line_number, match.group(1), heading))
    return labels


def unresolved(citing_text: str, spec_text: str) -> list[tuple[int, str]]:
    known = {label for _, label, _ in defined_labels(spec_text)}
    return [(line, label) for line, label in cited_labels(citing_text) if label not in known]


def _citing_files() -> list[pathlib.Path]:
    this_file = pathlib.Path(__file__).resolve()
    files = []
    for directory in CITING_DIRS:
        for path in sorted((REPO / directory).rglob("*")):
            if (path.is_file() and path.suffix in TEXT_SUFFIXES and path.resolve() != this_file
                    and "__pycache__" not in path.parts):
                files.append(path)
    return files


def test_citation_parsing():
    text = ("x = 1  # SPEC 6.3\n"
            "# see SPEC 1.3.5a and SPEC 1.6.b, SPEC 1.4.4's weights\n"
            '"""SPEC 3.2.1-3 and SPEC 1.3.7-1.3.8, SPEC 4.1/4.2. SPEC 3.2.3."""\n'
            "# a long comment that ends in SPEC\n#   7.1 note a\n"
            "SPECIAL = 5; SPEC_7_1 = 2; the SPEC numbers\n")
    assert cited_labels(text) == [
        (1, "6.3"), (2, "1.3.5a"), (2, "1.6b"), (2, "1.4.4"),
        (3, "3.2.1"), (3, "3.2.3"), (3, "1.3.7"), (3, "1.3.8"), (3, "4.1"), (3, "4.2"),
        (3, "3.2.3"), (4, "7.1")]


def test_resolution_needs_the_exact_label():
    spec = ("# Title\n## 1. Data\nSource: x\n### 1.4 Masking\nSource: y\n"
            "- **1.4.6** Picking.\n  - **1.4.6a** Detail.\n")
    assert unresolved("# SPEC 1, SPEC 1.4, SPEC 1.4.6, SPEC 1.4.6a", spec) == []
    assert unresolved("# SPEC 1.4.7 and\n# SPEC 2.1", spec) == [(1, "1.4.7"), (2, "2.1")]
    assert unresolved("# SPEC 1.4.6b", spec) == [(1, "1.4.6b")]


def test_every_citation_resolves():
    spec_text = SPEC_PATH.read_text(encoding="utf-8")
    missing, total = [], 0
    for path in _citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        total += len(cited_labels(text))
        missing += [f"{path.relative_to(REPO)}:{line}: SPEC {label}"
                    for line, label in unresolved(text, spec_text)]
    assert total > 100, f"found only {total} SPEC citations; is the citation pattern broken?"
    assert not missing, ("these citations name no heading or **item** of docs/SPEC.md; add the "
                         "section there (numbers are stable) or fix the citation:\n  "
                         + "\n  ".join(missing))


def test_spec_document_structure():
    spec_text = SPEC_PATH.read_text(encoding="utf-8")
    labels = defined_labels(spec_text)
    seen: dict[str, int] = {}
    problems = []
    for line, label, heading in labels:
        if label in seen:
            problems.append(f"line {line}: label {label} already defined on line {seen[label]}")
        seen[label] = line
        if heading is not None and not (label.startswith(heading + ".")
                                        or re.fullmatch(re.escape(heading) + "[a-z]", label)):
            problems.append(f"line {line}: item {label} sits under heading {heading}")
    # Every numbered section names where to verify it before the next heading starts.
    lines = spec_text.splitlines()
    heading_lines = [index for index, text in enumerate(lines) if text.startswith("#")]
    for start, end in zip(heading_lines, heading_lines[1:] + [len(lines)]):
        if HEADING.match(lines[start]) and not any(
                text.startswith("Source:") for text in lines[start + 1:end]):
            problems.append(f"line {start + 1}: section {lines[start]!r} has no 'Source:' line")
    if re.search(r"\[S\d+", spec_text):
        problems.append("source ids like [S4] found: name the file or paper section instead")
    assert not problems, "docs/SPEC.md:\n  " + "\n  ".join(problems)
    assert {"0", "1", "8", "8.2", "9.3", "14"} <= set(seen)

