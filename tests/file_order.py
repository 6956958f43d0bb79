"""The order in which pytest-xdist hands test files to its workers: the longest first.

`make test` runs two workers and gives each a whole file at a time (`--dist loadfile`). xdist's
own order is by the number of tests in a file, so a file of one long test (the accelerator
check's smoke, the bucket pipeline) came last and one worker ran it alone while the other had
finished: the run's wall time was the sum of the work plus that tail. Handing out the longest
files first (the longest-processing-time rule) leaves only short files for the end.

The seconds come from a run of the whole suite (its JUnit XML) and need not be exact: a file
missing from the table (a new one) is taken as short and runs at the end. To write the table
anew after a suite run:

    pytest -n 2 --dist loadfile --junitxml=/tmp/suite.xml tests
    python -m tests.file_order /tmp/suite.xml
"""
from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.txt")


def file_seconds(table: Path = TABLE) -> dict[str, float]:
    """{test file name (`test_model.py`): seconds of all its tests} from the table's
    `SECONDS NAME` lines; {} where there is no table."""
    if not table.exists():
        return {}
    seconds = {}
    for line in table.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            value, name = line.split()
            seconds[name] = float(value)
    return seconds


def longest_first(names: list[str], seconds: dict[str, float]) -> list[str]:
    """`names` (test file names, each once) ordered by their seconds, longest first; names
    missing from `seconds` last, in their given order."""
    return sorted(names, key=lambda name: -seconds.get(name, 0.0))


def seconds_from_junit(junit_xml: Path) -> dict[str, float]:
    """{test file name: the summed `time` of its test cases} of a pytest JUnit XML report."""
    seconds: dict[str, float] = collections.defaultdict(float)
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((part for part in module if part.startswith("test_")), None)
        if name is not None:
            seconds[f"{name}.py"] += float(case.get("time", 0.0))
    return dict(seconds)


def write_table(seconds: dict[str, float], table: Path = TABLE) -> None:
    """The table, longest first, with the command that makes it."""
    lines = ["# seconds of each test file in a whole-suite run, longest first: tests/file_order.py"]
    lines += [f"{seconds[name]:.0f} {name}" for name in longest_first(list(seconds), seconds)]
    table.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.file_order SUITE_JUNIT.xml")
    write_table(seconds_from_junit(Path(sys.argv[1])))
