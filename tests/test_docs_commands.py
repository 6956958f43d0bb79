"""The docs as a user copies them: every command in a shell block of README.md and docs/*.md
parses as written, and every relative link points to a file (and heading) that exists.

A command is parsed, never run: `albert-jax ...` by `cli.check_command_line` (the command
exists, each flag is one it reads, --config loads, every --config.KEY=VALUE names a key and
converts), `python -m launch.{tpu,gpu,local} ...` by the launcher's own `parse_args`, and the
albert-jax command after its `--` like any other. Paths, buckets and TPU names in the docs are
placeholders: nothing is read from them.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from albert_jax import cli
from launch import gpu, local, tpu

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINKED = [*DOCS, REPO / "ARCHITECTURE.md"]
SHELL_BLOCKS = ("", "bash", "sh", "shell")  # ```text / ```console hold output and transcripts
LAUNCHERS = {"launch.tpu": tpu, "launch.gpu": gpu, "launch.local": local}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _shell_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command line) for each line of the file's shell blocks, continuations
    joined."""
    text = path.read_text(encoding="utf-8")
    lines = []
    for block in _FENCE.finditer(text):
        if block.group(1) not in SHELL_BLOCKS:
            continue
        number = text.count("\n", 0, block.start(2)) + 1
        pending, start = "", number
        for offset, line in enumerate(block.group(2).splitlines()):
            if not pending:
                start = number + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            lines.append((start, pending + line))
            pending = ""
    return lines


def _commands() -> list[tuple[str, list[str]]]:
    """("FILE:LINE", argv) for every albert-jax or launcher command of the docs."""
    found = []
    for path in DOCS:
        for number, line in _shell_lines(path):
            argv = shlex.split(line, comments=True)
            if argv[:1] == ["albert-jax"] or argv[:3] in (["python", "-m", name]
                                                          for name in LAUNCHERS):
                found.append((f"{path.relative_to(REPO)}:{number}", argv))
    return found


COMMANDS = _commands()


def test_the_docs_have_commands_to_check():
    """The extraction itself: a change of the fences would otherwise make the test vacuous."""
    assert len(COMMANDS) >= 40, [where for where, _ in COMMANDS]
    assert any(argv[:2] == ["python", "-m"] for _, argv in COMMANDS)


def _check_albert_jax(argv: list[str]) -> None:
    try:
        cli.check_command_line(argv)
    except Exception as error:  # one message naming the command, whatever the parser raised
        pytest.fail(f"{shlex.join(argv)}\n  does not parse: {type(error).__name__}: {error}")


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_documented_command_parses(where, argv, monkeypatch):
    monkeypatch.chdir(REPO)  # config files are named relative to the repository root
    if argv[0] == "albert-jax":
        _check_albert_jax(argv)
        return
    launcher = LAUNCHERS[argv[2]]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            _, albert_jax_args = launcher.parse_args(argv[3:])
    except SystemExit:  # argparse's error(): usage and message on stderr
        pytest.fail(f"{shlex.join(argv)}\n  does not parse: {errors.getvalue().strip()}")
    if albert_jax_args:
        _check_albert_jax(["albert-jax", *albert_jax_args])


# --- The check itself refuses what it should -------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    ("albert-jax pretrian --config=configs/pretrain.py", "unknown command 'pretrian'"),
    ("albert-jax pretrain --config=configs/pretrain.py --config.optim.lrr=0.1", "lrr"),
    ("albert-jax pretrain --config=configs/pretrain.py --config.batch_size=many", "batch_size"),
    ("albert-jax pretrain --config=configs/nope.py --workdir=w", "nope.py"),
    ("albert-jax evaluate --workdir=w --output=o", "--output is not a flag of `albert-jax "
                                                   "evaluate`"),
    ("albert-jax plan --config=configs/pretrain.py --nojsn", "nojsn"),
])
def test_a_command_that_does_not_parse_is_refused(argv, message, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(Exception) as error:
        cli.check_command_line(shlex.split(argv))
    assert message in str(error.value)


def test_the_command_line_refuses_a_flag_its_command_does_not_read():
    # The same check in `albert-jax` itself: one line, before any flag is parsed.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["albert-jax", "predict", "--workdir=w", "--input=in.csv", "--split=test"])
    assert str(exit_.value) == ("albert-jax predict: error: --split is not a flag of "
                                "`albert-jax predict`, which reads --workdir, --input, --output, "
                                "--top_k, --step, --embeddings")


def test_a_command_that_parses_gives_its_config(monkeypatch):
    monkeypatch.chdir(REPO)
    config = cli.check_command_line(shlex.split(
        "albert-jax pretrain --config=configs/pretrain.py:size=large --workdir=gs://b/r "
        "--config.optim.lr=1e-4 --config.model_overrides.num_hidden_layers=6 --nomultihost"))
    assert (config.model, config.optim.lr, config.model_overrides.num_hidden_layers) == (
        "albert-large-v2", 1e-4, 6)
    assert cli.check_command_line(["albert-jax", "evaluate", "--workdir=w"]) is None


# --- Links ---------------------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(heading) for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def _links() -> list[tuple[str, Path, str]]:
    """("FILE: TARGET", the linking file, target) for every relative link outside code blocks."""
    found = []
    for path in LINKED:
        text = _FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):  # https:, mailto:
                found.append((f"{path.relative_to(REPO)}: {target}", path, target))
    return found


LINKS = _links()


@pytest.mark.parametrize("where, path, target", LINKS, ids=[where for where, _, _ in LINKS])
def test_every_relative_link_points_to_what_exists(where, path, target):
    # docs/performance.md, linked from the README, is written on another branch: this fails
    # until the two are merged.
    file_part, _, anchor = target.partition("#")
    linked = (path.parent / file_part).resolve() if file_part else path
    assert linked.exists(), f"{where}: {linked.relative_to(REPO)} does not exist"
    if anchor:
        assert anchor in _anchors(linked), f"{where}: no heading #{anchor} in {linked.name}"
