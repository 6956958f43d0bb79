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

# SPEC 8.2 (run_glue.sh = paper Table 14): lr, batch, steps, warmup, ALBERT dropout, eval every.
HYPER_PARAMETERS = {
    "cola": (1e-5, 16, 5336, 320, 0.0, 100),
    "stsb": (2e-5, 16, 3598, 214, 0.0, 100),
    "sst2": (1e-5, 32, 20935, 1256, 0.0, 100),
    "mnli": (3e-5, 128, 10000, 1000, 0.0, 100),
    "qnli": (1e-5, 32, 33112, 1986, 0.0, 200),
    "qqp": (5e-5, 128, 14000, 1000, 0.1, 100),
    "rte": (3e-5, 32, 800, 200, 0.1, 100),
    "mrpc": (2e-5, 32, 800, 200, 0.0, 100),
    "wnli": (2e-5, 16, 2000, 250, 0.1, 100),  # paper only: no run_glue.sh line; every 100
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, task="", size="base", model="", runlocal=False)
    if args.task not in HYPER_PARAMETERS:
        raise ConfigError(f"configs/glue.py needs task=<name>, one of {sorted(HYPER_PARAMETERS)} "
                          f"(got {args.task!r})")
    config = finetune_config(args)
    config.task = args.task
    (config.optim.lr, config.batch_size, config.total_steps, config.optim.warmup_steps,
     config.dropout, config.eval_every_steps) = HYPER_PARAMETERS[args.task]
    config.checkpoint_every_steps = config.eval_every_steps
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
    config.lock()
    return config
