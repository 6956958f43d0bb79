"""Fine-tuning: every task a registered class (finetune/registry.py), one file per family.

Importing the package registers the built-in tasks: every module `finetune/<name>_task.py` is
imported here (the GLUE tasks, RACE, SQuAD and the kinds of your own data: classification,
regression, multiple_choice), so a new task is one such file with its `register` line and no
edit elsewhere.
"""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_task"):
        importlib.import_module(f"{__name__}.{_module.name}")
