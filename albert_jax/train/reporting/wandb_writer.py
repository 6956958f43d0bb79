"""report_to=wandb: one Weights & Biases run per workdir, continued by a resumed run.

The run id is chosen here and kept in <workdir>/wandb_run_id before the run starts, and
`wandb.init(id=..., resume="allow")` continues it. Online, W&B tells a resumed run its next
step and the steps before it (logged by the killed run) are not sent again. WANDB_MODE=offline (or
config.wandb.mode=offline) writes the run under <workdir>/wandb/ with no network; `wandb sync`
uploads it later. An explicit WANDB_DIR (W&B's own variable) wins: W&B's files go there instead.
A gs:// workdir keeps W&B's files in WANDB_DIR (default: the current folder).
"""
from __future__ import annotations

import math
import os
import uuid
from typing import Any, Mapping

import ml_collections
import wandb
from etils import epath

from albert_jax import files
from albert_jax.train import workdir as workdir_names
from albert_jax.train.reporting import metrics as metrics_lib


class WandbWriter(metrics_lib.MetricWriter):

    def __init__(self, config: ml_collections.ConfigDict, workdir: epath.Path) -> None:
        id_file = workdir / workdir_names.WANDB_RUN_FILE
        if id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = uuid.uuid4().hex[:12]  # W&B ids: letters and digits
            files.write_atomically(id_file, run_id)
        # W&B writes under <dir>/wandb/: the workdir's, unless the user set WANDB_DIR (then
        # dir=None lets W&B read it) or the workdir is in a bucket.
        in_workdir = files.is_local(workdir) and not os.environ.get("WANDB_DIR")
        if in_workdir:
            (workdir / workdir_names.WANDB_SUBDIR).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=config.wandb.project or None, entity=config.wandb.entity or None,
            mode=config.wandb.mode or None, tags=list(config.wandb.tags) or None,
            name=workdir.name, id=run_id, resume="allow",
            dir=str(workdir) if in_workdir else None)
        # Resumed online: the step after the last one W&B has (0 for a new or offline run).
        self._next_step = int(self._run.step or 0)

    def write_scalars(self, step: int, scalars: Mapping[str, float],
                      split: str | None = None) -> None:
        values = {f"{split}/{key}" if split else key: value for key, value in scalars.items()
                  if math.isfinite(value)}
        if values and step >= self._next_step:
            self._run.log(values, step=int(step))

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        self._run.config.update(dict(hparams), allow_val_change=True)

    def write_summary(self, step: int, summary: Mapping[str, float]) -> None:
        self._run.summary.update(dict(summary))

    def close(self) -> None:
        self._run.finish()
