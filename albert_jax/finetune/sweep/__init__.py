"""`albert-jax sweep`: fine-tuning runs searched by Optuna (docs/sweeps.md).

  plan.py      the config's `sweep` block read and checked; a trial's values as config flags
  study.py     the Optuna study: storage (a journal file, or a database), sampler, pruner; the
               worker loop, stale trials found and run again
  trial.py     one trial: `albert-jax finetune` in a process of its own in W/trials/<number>/,
               its evaluations fed to the pruner, its result
  results.py   sweep.md, sweep.csv, best_trial.json
  pictures.py  the metric over the grid, the spread over seeds, the dev curves (PNG)
"""
from __future__ import annotations

from albert_jax.finetune.sweep.plan import override_flag, read_plan
from albert_jax.finetune.sweep.study import run_sweep

__all__ = ["override_flag", "read_plan", "run_sweep"]
