"""The order of the suite's files for xdist: the longest first, from a run's JUnit XML."""
from pathlib import Path

from tests.file_order import file_seconds, longest_first, seconds_from_junit, write_table

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_short" name="test_a" time="1.5"/>
<testcase classname="tests.test_long.TestGroup" name="test_b" time="30.0"/>
<testcase classname="tests.test_long" name="test_c" time="12.25"/>
<testcase classname="tests.test_short" name="test_d" time="0.5"/>
</testsuite></testsuites>
"""


def test_a_files_seconds_add_its_cases_classes_included(tmp_path):
    (tmp_path / "suite.xml").write_text(JUNIT)
    assert seconds_from_junit(tmp_path / "suite.xml") == {"test_short.py": 2.0,
                                                         "test_long.py": 42.25}


def test_longest_first_and_files_not_in_the_table_last_in_their_order():
    seconds = {"test_b.py": 10.0, "test_c.py": 300.0, "test_a.py": 45.0}
    assert longest_first(["test_new2.py", "test_a.py", "test_b.py", "test_new1.py", "test_c.py"],
                         seconds) == ["test_c.py", "test_a.py", "test_b.py", "test_new2.py",
                                      "test_new1.py"]


def test_the_table_written_reads_back(tmp_path):
    table = tmp_path / "file_seconds.txt"
    write_table({"test_short.py": 2.0, "test_long.py": 42.25}, table)
    assert table.read_text().splitlines()[1:] == ["42 test_long.py", "2 test_short.py"]
    assert file_seconds(table) == {"test_long.py": 42.0, "test_short.py": 2.0}
    assert file_seconds(tmp_path / "missing.txt") == {}


def test_the_suites_table_names_only_files_that_exist():
    assert set(file_seconds()) <= {path.name for path in Path(__file__).parent.glob("test_*.py")}
