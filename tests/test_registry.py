"""Tasks found by name (issue 27): every fine-tuning task a registered class; a user's class by
path; the entry points name no task."""
import pathlib
import re

import pytest

from albert_jax.errors import ConfigError
from albert_jax.finetune import registry
from albert_jax.finetune.classification import ClassificationTask, RegressionTask
from albert_jax.finetune.multiple_choice import MultipleChoiceTask
from albert_jax.finetune.task import FinetuneTask
from albert_jax.finetune.token_classification import TokenClassificationTask

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "albert_jax"
GLUE = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def test_every_task_is_registered_with_its_family():
    assert set(registry.names()) == {*GLUE, "race", "squad", "classification", "regression",
                                     "multiple_choice", "token_classification"}
    for name in GLUE:
        family = RegressionTask if name == "stsb" else ClassificationTask
        assert issubclass(registry.get(name), family), name
    assert issubclass(registry.get("race"), MultipleChoiceTask)
    assert issubclass(registry.get("multiple_choice"), MultipleChoiceTask)
    assert issubclass(registry.get("regression"), RegressionTask)
    assert issubclass(registry.get("token_classification"), TokenClassificationTask)
    assert all(issubclass(registry.get(name), FinetuneTask) for name in registry.names())


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
        "from albert_jax.finetune.glue_task import MrpcTask\n"
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
    assert registry.get("albert_jax.finetune.race_task:RaceTask") is registry.get("race")


@pytest.mark.parametrize("path", ["finetune/run.py", "cli.py", "train/plan.py",
                                  "train/loop.py", "finetune/task.py", "finetune/registry.py"])
def test_the_entry_points_name_no_task(path):
    """No branch on a task's name outside the task's own file (ARCHITECTURE.md)."""
    source = (PACKAGE / path).read_text()
    names = "|".join((*GLUE, "race", "squad", "classification", "regression",
                      "multiple_choice"))
    assert not re.findall(rf"""["']({names})["']""", source)
    assert "task ==" not in source and "config.task in" not in source
