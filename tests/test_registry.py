"""Tasks found by name: every fine-tuning task a registered class; a user's class by
path; the entry points name no task."""
import importlib.util
import pathlib
import re

import pytest

from albert_jax.errors import ConfigError
from albert_jax.finetune.core import registry
from albert_jax.finetune.core.task import FinetuneTask
from albert_jax.finetune.glue import data as glue
from albert_jax.finetune.kinds.classification import ClassificationTask, RegressionTask
from albert_jax.finetune.kinds.multiple_choice import MultipleChoiceTask
from albert_jax.finetune.kinds.token_classification import TokenClassificationTask

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "albert_jax"
CONFIGS = PACKAGE.parent / "configs"


def _load_config(config_file: str):
    """`configs/<file>:<arg>` as `--config=` loads it, with runlocal."""
    file_name, _, arg = config_file.partition(":")
    spec = importlib.util.spec_from_file_location(f"config_{file_name[:-3]}", CONFIGS / file_name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(",".join(filter(None, (arg, "runlocal"))))


def test_the_benchmarks_are_registered():
    # Each benchmark of SPEC 8 has at least one task; a new task needs no edit here.
    names = registry.names()
    assert {"race", "squad"} <= set(names) and set(glue.TASKS) <= set(names)
    assert {"classification", "regression", "multiple_choice"} <= set(names)


@pytest.mark.parametrize("name", registry.names())
def test_every_task_has_a_config_and_selects_by_one_of_its_metrics(name):
    task_class = registry.get(name)
    assert issubclass(task_class, FinetuneTask)
    assert task_class.config_file, f"{name}: no configs/ file runs it"
    config = _load_config(task_class.config_file)
    assert config.task == name
    metrics = task_class.metric_names(config)
    assert metrics and len(set(metrics)) == len(metrics)
    assert task_class.selection_metric(config) in metrics


@pytest.mark.parametrize("name", glue.TASKS)
def test_every_glue_row_is_a_task_of_its_family(name):
    family = RegressionTask if glue.labels(name) is None else ClassificationTask
    assert issubclass(registry.get(name), family), name
    assert registry.get(name).spec is glue.spec(name)
    assert registry.get(name).__name__ == f"{name.capitalize()}Task"


@pytest.mark.parametrize("name", glue.TASKS)
def test_a_glue_task_keeps_the_checkpoint_the_reference_keeps(name):
    # SPEC 8.1: the best dev checkpoint by matthew_corr (CoLA), pearson (STS-B), else accuracy.
    config = _load_config(f"glue.py:task={name}")
    expected = {"cola": "mcc", "stsb": "pearson"}.get(name, "accuracy")
    assert registry.get(name).selection_metric(config) == expected


def test_the_families():
    assert issubclass(registry.get("race"), MultipleChoiceTask)
    assert issubclass(registry.get("multiple_choice"), MultipleChoiceTask)
    assert issubclass(registry.get("regression"), RegressionTask)
    assert issubclass(registry.get("stsb"), RegressionTask)
    assert issubclass(registry.get("mnli"), ClassificationTask)
    assert issubclass(registry.get("token_classification"), TokenClassificationTask)


def test_a_task_file_imports_its_bases_from_the_package():
    # docs/adding-a-task.md: a user's file imports from albert_jax.finetune, whatever folder
    # of it the class lives in.
    import albert_jax.finetune as finetune
    assert finetune.registry is registry and finetune.FinetuneTask is FinetuneTask
    assert finetune.TokenClassificationTask is TokenClassificationTask
    for name, exported in [("classification", finetune.CustomClassificationTask),
                           ("regression", finetune.CustomRegressionTask),
                           ("multiple_choice", finetune.CustomMultipleChoiceTask),
                           ("token_classification", finetune.CustomTokenClassificationTask)]:
        assert registry.get(name) is exported
    assert set(finetune.__all__) <= set(vars(finetune))


def test_an_unknown_task_is_one_line_listing_the_names():
    with pytest.raises(ConfigError) as error:
        registry.get("mnli2")
    message = str(error.value)
    assert "\n" not in message and "task='mnli2' is not a task" in message
    assert all(name in message for name in registry.names())


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("mrpc")(type("Other", (FinetuneTask,), {}))


def test_a_class_by_path(tmp_path):
    (tmp_path / "mine.py").write_text(
        "from albert_jax.finetune.glue.task import MrpcTask\n"
        "class Mine(MrpcTask):\n    name = 'mine'\n"
        "NotATask = int\n")
    task_class = registry.get(f"{tmp_path / 'mine.py'}:Mine")
    assert task_class.__name__ == "Mine" and issubclass(task_class, registry.get("mrpc"))
    with pytest.raises(ConfigError, match="no FinetuneTask subclass called 'NotATask'"):
        registry.get(f"{tmp_path / 'mine.py'}:NotATask")
    with pytest.raises(ConfigError, match="does not exist"):
        registry.get(f"{tmp_path / 'gone.py'}:Mine")
    with pytest.raises(ConfigError, match="cannot import"):
        registry.get("no_such_package.module:Task")
    assert registry.get("albert_jax.finetune.race.task:RaceTask") is registry.get("race")


@pytest.mark.parametrize("path", ["finetune/run.py", "cli.py", "train/plan.py",
                                  "train/loop.py", "finetune/core/task.py",
                                  "finetune/core/registry.py"])
def test_the_entry_points_name_no_task(path):
    """No branch on a task's name outside the task's own file (ARCHITECTURE.md)."""
    source = (PACKAGE / path).read_text()
    names = "|".join(registry.names())
    assert not re.findall(rf"""["']({names})["']""", source)
    assert "task ==" not in source and "config.task in" not in source
