"""RACE fine-tuning (SPEC 8.4): 4-way multiple choice over `train|dev|test/{middle,high}/*.txt`.

  albert-jax finetune --config=configs/race.py --config.data.path=RACE \
      --config.init_from=albert_base/ --workdir=runs/race
  albert-jax evaluate --workdir=runs/race --split=test      # RACE.tsv

The argument: `size=...`/`model=...` (from-scratch runs only), `runlocal`. The README's v2
settings (lr 1e-5, no dropout) are the default; a v1 model (`model=albert-base-v1` or an
`init_from` of v1) is fine-tuned with the paper's Table 14 settings: `--config.optim.lr=2e-5
--config.dropout=0.1`.
"""
from __future__ import annotations

import ml_collections

from albert_jax.config import finetune_config, parse_arg, shrink_finetune_config


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, size="base", model="", runlocal=False)
    config = finetune_config(args)
    config.task = "race"
    # SPEC 8.4 (README, v2): lr 1e-5, batch 32, 12000 steps, warmup 1000, seq 512, dropout 0.
    config.optim.lr = 1e-5
    config.batch_size = 32
    config.total_steps = 12000
    config.optim.warmup_steps = 1000
    config.seq_len = 512
    config.max_qa_length = 128  # the question+option part keeps its last 128 tokens
    config.eval_batch_size = 16
    config.eval_every_steps = config.checkpoint_every_steps = 1000
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
        config.max_qa_length = 24
    config.lock()
    return config
