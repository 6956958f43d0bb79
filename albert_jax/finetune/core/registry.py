"""Fine-tuning tasks found by name (after scenic's dataset registry and seqio's TaskRegistry).

Every task class registers itself where it is defined:

    @registry.register("sentiment")
    class SentimentTask(ClassificationTask): ...

and the entry points (finetune, evaluate, predict, plan, export) only look a name up with
`get(config.task)`. The built-in task modules are imported by `albert_jax.finetune`, so
importing the package fills the registry; there is no central table of module paths to edit.

A user's own task needs no edit of the package: `config.task` may name a class by path,
`path/to/my_task.py:MyTask` (a file, imported as a module of its own) or
`my_package.my_module:MyTask` (an importable module). The class must subclass `FinetuneTask`;
its `name` is what the console and the files show.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Callable, TypeVar

from albert_jax.errors import ConfigError
from albert_jax.finetune.core.task import FinetuneTask

_TASKS: dict[str, type[FinetuneTask]] = {}
TaskClass = TypeVar("TaskClass", bound=type[FinetuneTask])


def register(name: str) -> Callable[[TaskClass], TaskClass]:
    """Class decorator: makes the class the task called `name` (`--config.task=<name>`)."""

    def add(task_class: TaskClass) -> TaskClass:
        if name in _TASKS and _TASKS[name] is not task_class:
            raise ValueError(f"task {name!r} is registered twice: {_TASKS[name].__qualname__} "
                             f"and {task_class.__qualname__}")
        _TASKS[name] = task_class
        return task_class

    return add


def names() -> tuple[str, ...]:
    """The registered task names, sorted."""
    return tuple(sorted(_TASKS))


def get(name: str) -> type[FinetuneTask]:
    """The task class called `name`, or named by `file.py:Class` / `package.module:Class`.

    Raises ConfigError (one line, listing the names) for a name that is none of these.
    """
    if name in _TASKS:
        return _TASKS[name]
    if ":" in name:
        return _import_task(name)
    raise ConfigError(f"config task={name!r} is not a task; choose one of {', '.join(names())}, "
                      "or name your own FinetuneTask subclass as path/to/file.py:Class or "
                      "package.module:Class")


def _import_task(spec: str) -> type[FinetuneTask]:
    """The class of `file.py:Class` or `package.module:Class`."""
    where, _, class_name = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise ConfigError(f"config task={spec!r}: {where} does not exist")
            module_name = "albert_jax_user_task_" + os.path.splitext(os.path.basename(where))[0]
            module_spec = importlib.util.spec_from_file_location(module_name, where)
            assert module_spec is not None and module_spec.loader is not None  # a .py file has one
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module  # dataclasses and pickling look modules up
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ImportError as error:
        raise ConfigError(f"config task={spec!r}: cannot import {where} ({error})") from None
    task_class = getattr(module, class_name, None)
    if not (isinstance(task_class, type) and issubclass(task_class, FinetuneTask)):
        raise ConfigError(f"config task={spec!r}: {where} has no FinetuneTask subclass called "
                          f"{class_name!r}")
    return task_class
