"""GLUE fine-tuning (SPEC 8.2): one task per run, the reference's hyper-parameters.

  albert-jax finetune --config=configs/glue.py:task=mnli --config.data.path=glue_data/MNLI \
      --config.init_from=albert_base/ --workdir=runs/mnli
  albert-jax evaluate --workdir=runs/mnli --split=test     # MNLI-m.tsv, MNLI-mm.tsv, AX.tsv

The argument: `task=cola|sst2|mrpc|stsb|qqp|mnli|qnli|rte|wnli` (required), `size=base|large|
xlarge|xxlarge` or `model=<preset>` (only for a from-scratch run: with `init_from` the
architecture comes from the checkpoint), `runlocal` (tiny sizes for a laptop CPU),
`sweep=grid` (the task's recipe for `albert-jax sweep`: the reference's learning rate and batch
size among those of BERT, RoBERTa and XLNet, five seeds each, their median; docs/sweeps.md):

  albert-jax sweep --config=configs/glue.py:task=rte,sweep=grid --config.data.path=glue_data/RTE \
      --config.init_from=albert_base/ --workdir=runs/rte-sweep
The paper fine-tunes RTE, STS-B and MRPC from the MNLI checkpoint: point `init_from` at the
MNLI workdir.
"""
from __future__ import annotations

import ml_collections

from albert_jax.config import finetune_config, parse_arg, shrink_finetune_config
from albert_jax.errors import ConfigError
from albert_jax.finetune.glue import data as glue

# `sweep=grid`: google-research/albert's README says its v1 GLUE numbers came from "a little bit
# hyperparameter search among the parameters sets given by BERT, Roberta, and XLnet", and those
# papers' grids are these. Steps, warmup and dropout stay the task's (run_glue.sh fixes steps,
# not epochs, so a smaller batch sees fewer examples, as in the reference).
# BERT (Devlin et al. 2019): section 4.1, GLUE: "the best fine-tuning learning rate (among 5e-5,
# 4e-5, 3e-5, and 2e-5)"; appendix A.3: batch size 16, 32.
BERT_LEARNING_RATES, BERT_BATCH_SIZES = (5e-5, 4e-5, 3e-5, 2e-5), (16, 32)
# RoBERTa (Liu et al. 2019): section 5.1 and appendix table 10, GLUE: learning rates {1e-5, 2e-5,
# 3e-5}, batch sizes {16, 32}, and the median of five random initialisations.
ROBERTA_LEARNING_RATES, ROBERTA_BATCH_SIZES = (1e-5, 2e-5, 3e-5), (16, 32)
# XLNet (Yang et al. 2019): appendix table 8 fine-tunes MNLI at 2e-5 with batch 128, and the
# xlnet README's STS-B example at 5e-5 with batch 32 (4 GPUs x 8). Its 128 enters the grid
# through the reference's own batch of 128 (MNLI, QQP): on RTE's 800 steps it would be 40 epochs.
XLNET_LEARNING_RATES = (2e-5, 5e-5)
SWEEP_SEEDS = 5  # RoBERTa's five; the median is the sweep's default objective


def sweep_grid(lr: float, batch_size: int) -> dict[str, list]:
    """The `sweep=grid` space of a task whose reference settings are `lr` and `batch_size`:
    config key -> its values, the task's own among them."""
    learning_rates = {lr, *BERT_LEARNING_RATES, *ROBERTA_LEARNING_RATES, *XLNET_LEARNING_RATES}
    batch_sizes = {batch_size, *BERT_BATCH_SIZES, *ROBERTA_BATCH_SIZES}
    return {"optim.lr": sorted(learning_rates), "batch_size": sorted(batch_sizes)}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, task="", size="base", model="", runlocal=False, sweep="")
    if args.task not in glue.TASKS:
        raise ConfigError(f"configs/glue.py needs task=<name>, one of {sorted(glue.TASKS)} "
                          f"(got {args.task!r})")
    if args.sweep not in ("", "grid"):
        raise ConfigError(f"configs/glue.py: sweep={args.sweep!r} is not a recipe; the one "
                          "there is: sweep=grid")
    config = finetune_config(args)
    config.task = args.task
    # SPEC 8.2 (run_glue.sh = paper Table 14): the task's row of glue.SPECS.
    settings = glue.spec(args.task).hyper_parameters
    assert settings is not None  # only AX has none, and it is not one of TASKS
    config.optim.lr, config.batch_size = settings.lr, settings.batch_size
    config.total_steps, config.optim.warmup_steps = settings.total_steps, settings.warmup_steps
    config.dropout, config.eval_every_steps = settings.dropout, settings.eval_every_steps
    config.checkpoint_every_steps = config.eval_every_steps
    if args.sweep == "grid":
        config.sweep.space = repr(sweep_grid(config.optim.lr, config.batch_size))
        config.sweep.sampler, config.sweep.seeds = "grid", SWEEP_SEEDS
        config.sweep.objective = "median"
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
    config.lock()
    return config
