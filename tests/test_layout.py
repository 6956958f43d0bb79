"""ARCHITECTURE.md's layout is the tree: every module under albert_jax/ is named there, under
its own folder, and every module named there exists.

The layout is the page's first code block after "## Layout". A line that starts with a path,
`albert_jax/train/`, opens that folder (`albert_jax/errors.py`: that module); a line indented by
two spaces, `  reporting/`, opens a folder inside the last one (`  (top)`: the last one itself);
every `name.py` on it and on the lines below belongs to the open folder. A package's
`__init__.py` need not be named.
"""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "albert_jax"
OPENS_FOLDER = re.compile(r"^(albert_jax/\S*)")
OPENS_SUBFOLDER = re.compile(r"^  (\(top\)|\w+/)\s")
# A module name; not a path's last part (configs/custom.py), a pattern (*_task.py) or a
# class by path (file.py:Class).
MODULE = re.compile(r"(?<![/*\w.])(\w+\.py)\b(?!:\w)")


def _layout() -> str:
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return text.split("\n## Layout", 1)[1].split("```", 2)[1]


def named_modules(layout: str) -> set[str]:
    """The module paths the layout names, relative to the repository: {"albert_jax/errors.py",
    "albert_jax/train/reporting/metrics.py", ...}."""
    named, top, folder = set(), None, None
    for line in layout.splitlines():
        if match := OPENS_FOLDER.match(line):
            top = folder = match.group(1)
            if top.endswith(".py"):
                named.add(top)
                top = folder = None
            line = line[match.end():]
        elif (match := OPENS_SUBFOLDER.match(line)) and top is not None:
            folder = top if match.group(1) == "(top)" else top + match.group(1)
            line = line[match.end():]
        elif not line.startswith(" "):
            folder = None  # configs/, launch/, ...: not of the package
        if folder is not None:
            named.update(folder + name for name in MODULE.findall(line))
    return named


def test_the_parser_reads_the_layout_format():
    layout = ("albert_jax/errors.py    the errors (not errors2.py)\n"
              "albert_jax/train/       loop.py, step.py (train and eval\n"
              "                        steps), flops.py\n"
              "  reporting/            metrics.py\n"
              "  (top)                 __init__.py\n"
              "albert_jax/cli.py       the entry point\n"
              "configs/                glue.py\n")
    assert named_modules(layout) == {
        "albert_jax/errors.py", "albert_jax/train/loop.py", "albert_jax/train/step.py",
        "albert_jax/train/flops.py", "albert_jax/train/reporting/metrics.py",
        "albert_jax/train/__init__.py", "albert_jax/cli.py"}


def test_every_module_is_named_in_the_layout_and_every_named_module_exists():
    modules = {path.relative_to(REPO).as_posix() for path in PACKAGE.rglob("*.py")
               if path.name != "__init__.py"}
    named = named_modules(_layout())
    assert sorted(modules - named) == [], "modules missing from ARCHITECTURE.md's layout"
    assert sorted(named - modules - {str(path.relative_to(REPO)) for path in
                                     PACKAGE.rglob("__init__.py")}) == [], (
        "ARCHITECTURE.md's layout names modules that do not exist")
