"""Fine-tuning: every task a registered class (core/registry.py), one folder per family.

  core/    what every task shares: the task base (`FinetuneTask`), the registry, the start from
           a pretrained model, the example types, table readers, features, scores, windows;
  kinds/   what several families share: classification (and regression), multiple choice,
           token classification (model, loss, predictions, metrics of each kind);
  glue/, race/, squad/  the benchmarks: readers of their formats, their tasks, SQuAD's
           post-processing and official evaluator;
  custom/  the user's own files (configs/custom.py): classification, regression, multiple
           choice, tagging;
  run.py (finetune, evaluate, predict, export), fill_mask.py (predict on a pretraining
  workdir), demo.py (make demo).
A family imports only core/ and kinds/, never another family; kinds/ import only core/
(tests/test_imports.py).

Importing the package registers the built-in tasks: the module `task.py` and every `*_task.py`
of each family folder is imported here, so a new task is one such file with its `register` line
and no edit elsewhere. What a task file of your own subclasses is importable from here
(docs/adding-a-task.md):

  from albert_jax.finetune import CustomClassificationTask, real_rows, registry
"""
import importlib
import pkgutil

from albert_jax.finetune.core import registry
from albert_jax.finetune.core.task import FinetuneTask, real_rows
from albert_jax.finetune.custom.tagging_task import CustomTokenClassificationTask
from albert_jax.finetune.custom.task import (
    CustomClassificationTask,
    CustomMultipleChoiceTask,
    CustomRegressionTask,
)
from albert_jax.finetune.kinds.classification import ClassificationTask, RegressionTask
from albert_jax.finetune.kinds.multiple_choice import MultipleChoiceTask
from albert_jax.finetune.kinds.token_classification import TokenClassificationTask

__all__ = ["registry", "FinetuneTask", "real_rows", "ClassificationTask", "RegressionTask",
           "MultipleChoiceTask", "TokenClassificationTask", "CustomClassificationTask",
           "CustomRegressionTask", "CustomMultipleChoiceTask", "CustomTokenClassificationTask"]

_SHARED = ("core", "kinds")  # folders of what the families share; every other folder is a family
for _folder in pkgutil.iter_modules(__path__):
    if _folder.ispkg and _folder.name not in _SHARED:
        _family = importlib.import_module(f"{__name__}.{_folder.name}")
        for _module in pkgutil.iter_modules(_family.__path__):
            if _module.name == "task" or _module.name.endswith("_task"):
                importlib.import_module(f"{_family.__name__}.{_module.name}")
