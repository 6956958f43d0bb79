"""GLUE fine-tuning (SPEC 8.2): one task per run, the reference's hyper-parameters.

  albert-jax finetune --config=configs/glue.py:task=mnli --config.data.path=glue_data/MNLI \
      --config.init_from=albert_base/ --workdir=runs/mnli
  albert-jax evaluate --workdir=runs/mnli --split=test     # MNLI-m.tsv, MNLI-mm.tsv, AX.tsv

The argument: `task=cola|sst2|mrpc|stsb|qqp|mnli|qnli|rte|wnli` (required), `size=base|large|
xlarge|xxlarge` or `model=<preset>` (only for a from-scratch run: with `init_from` the
architecture comes from the checkpoint), `runlocal` (tiny sizes for a laptop CPU).
The paper fine-tunes RTE, STS-B and MRPC from the MNLI checkpoint: point `init_from` at the
MNLI workdir.
"""
from __future__ import annotations

import ml_collections

from albert_jax.config import finetune_config, parse_arg, shrink_finetune_config
from albert_jax.errors import ConfigError
from albert_jax.finetune.glue import data as glue


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, task="", size="base", model="", runlocal=False)
    if args.task not in glue.TASKS:
        raise ConfigError(f"configs/glue.py needs task=<name>, one of {sorted(glue.TASKS)} "
                          f"(got {args.task!r})")
    config = finetune_config(args)
    config.task = args.task
    # SPEC 8.2 (run_glue.sh = paper Table 14): the task's row of glue.SPECS.
    settings = glue.spec(args.task).hyper_parameters
    assert settings is not None  # only AX has none, and it is not one of TASKS
    config.optim.lr, config.batch_size = settings.lr, settings.batch_size
    config.total_steps, config.optim.warmup_steps = settings.total_steps, settings.warmup_steps
    config.dropout, config.eval_every_steps = settings.dropout, settings.eval_every_steps
    config.checkpoint_every_steps = config.eval_every_steps
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
    config.lock()
    return config
