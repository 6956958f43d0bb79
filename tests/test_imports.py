"""The package structure drawn from the imports (ARCHITECTURE.md): every import of ours points
down the layer table, finetune/'s families import only its core and kinds, and no module imports
itself back through others."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "albert_jax"

# ARCHITECTURE.md's table, lowest first: a unit imports only units of strictly lower rows.
LAYERS = [
    {"errors", "files", "distributed"},
    {"file_lock"},
    {"model", "data"},
    {"config"},
    {"train"},
    {"convert"},
    {"pretraining"},
    {"finetune"},
    {"ablation"},
    {"cli"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every albert_jax module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("albert_jax"):
            if node.module == "albert_jax":
                found.update(f"albert_jax.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
                # `from albert_jax.model import layers` imports the module albert_jax.model.layers.
                found.update(f"{node.module}.{alias.name}" for alias in node.names
                             if (PACKAGE.parent / node.module.replace(".", "/")
                                 / f"{alias.name}.py").exists())
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("albert_jax."))
    return found


GRAPH = {_module_name(path): _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def _unit(module: str) -> str:
    return module.split(".")[1]


def test_every_unit_is_in_the_layer_table():
    assert {_unit(module) for module in GRAPH if module != "albert_jax"} == set(RANK)


# finetune/'s folders: what the families share, lowest first; every other folder is a family.
FINETUNE = "albert_jax.finetune"
SHARED = ["core", "kinds"]


def _finetune_folder(module: str) -> str | None:
    """`glue` for albert_jax.finetune.glue.task; None outside finetune's folders (run.py, ...)."""
    parts = module.split(".")
    is_folder = (len(parts) > 2 and parts[1] == "finetune"
                 and (PACKAGE / "finetune" / parts[2]).is_dir())
    return parts[2] if is_folder else None


def test_finetune_has_its_shared_folders_and_families():
    folders = {_finetune_folder(module) for module in GRAPH} - {None}
    assert set(SHARED) <= folders and len(folders - set(SHARED)) >= 4


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _finetune_folder(m)))
def test_a_family_imports_only_the_core_and_the_kinds(module):
    # core imports only core; kinds only core (and kinds); a family core, kinds and itself:
    # never another family, nor the package's entry points (run.py, demo.py, fill_mask.py).
    folder = _finetune_folder(module)
    allowed = set(SHARED[:SHARED.index(folder) + 1]) if folder in SHARED else {*SHARED, folder}
    wrong = sorted(target for target in GRAPH[module]
                   if target.startswith(FINETUNE) and _finetune_folder(target) not in allowed)
    assert not wrong, (f"{module} imports {wrong}: a folder of finetune/ imports only "
                       f"{', '.join(sorted(allowed))} (ARCHITECTURE.md)")


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != "albert_jax"))
def test_imports_point_down_the_layers(module):
    upward = sorted(target for target in GRAPH[module]
                    if _unit(target) != _unit(module) and RANK[_unit(target)] >= RANK[_unit(module)])
    assert not upward, f"{module} imports {upward}, which are not below it in ARCHITECTURE.md"


def test_no_module_imports_itself_back():
    # Depth-first search for a cycle over module -> imported module (packages included: a
    # package's __init__ runs when any of its modules is imported).
    def package_of(module: str) -> str:
        return module.rsplit(".", 1)[0]

    edges = {module: {target for target in targets if target in GRAPH}
             for module, targets in GRAPH.items()}
    for module in GRAPH:
        if package_of(module) in GRAPH and package_of(module) != module:
            edges[module].add(package_of(module))
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if target == module or target.startswith(module + "."):
                continue  # a package importing its own modules
            if state.get(target) == "open":
                raise AssertionError("import cycle: " + " -> ".join(
                    path[path.index(target):] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


# data/'s jobs, and what each may import of the others (ARCHITECTURE.md): the corpus knows no
# tokenizer; the tokenizers read a corpus only where a vocabulary is trained from it; the build
# reads both; the input reads the build's masking and the dataset's settings, never the builder;
# inspection (`data inspect`) looks at all of them.
DATA = "albert_jax.data"
DATA_JOBS = {
    "corpus": set(),
    "tokenizers": {"corpus"},
    "building": {"corpus", "tokenizers"},
    "input": {"building"},
}
DATA_TRAINING_MODULE = f"{DATA}.tokenizers.training"  # the one tokenizer module that reads a corpus
DATA_INPUT_READS = {f"{DATA}.building", f"{DATA}.building.masking",
                    f"{DATA}.building.dataset_settings"}


def _data_job(module: str) -> str | None:
    """`building` for albert_jax.data.building.builder; None outside data/'s job folders."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "data" and parts[2] in DATA_JOBS else None


def test_data_has_its_four_jobs_as_folders():
    assert {_data_job(module) for module in GRAPH} - {None} == set(DATA_JOBS)
    assert all((PACKAGE / "data" / job / "__init__.py").exists() for job in DATA_JOBS)
    # One file outside the folders: data inspect, which reads all four.
    assert sorted(path.name for path in (PACKAGE / "data").glob("*.py")) == ["__init__.py",
                                                                            "inspection.py"]


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _data_job(m)))
def test_data_jobs_import_one_way(module):
    job = _data_job(module)
    allowed = DATA_JOBS[job] | {job}
    wrong = sorted(target for target in GRAPH[module]
                   if target.startswith(DATA + ".") and _data_job(target) not in allowed)
    assert not wrong, f"{module} imports {wrong}: data/{job}/ imports only {sorted(allowed)}"
    if job == "tokenizers" and module not in (DATA_TRAINING_MODULE, f"{DATA}.tokenizers"):
        reads_corpus = sorted(target for target in GRAPH[module] if _data_job(target) == "corpus")
        assert not reads_corpus, f"{module} imports {reads_corpus}: only training.py reads a corpus"
    if job == "input":
        from_build = {target for target in GRAPH[module] if _data_job(target) == "building"}
        assert from_build <= DATA_INPUT_READS, (
            f"{module} imports {sorted(from_build - DATA_INPUT_READS)}: the input reads the "
            "build's masking and dataset settings, never the builder")


def test_nothing_in_data_imports_the_engine_or_the_tasks():
    for module, targets in GRAPH.items():
        if module.startswith(DATA):
            wrong = sorted(target for target in targets
                           if _unit(target) in ("train", "finetune", "pretraining", "convert"))
            assert not wrong, f"{module} imports {wrong}"
