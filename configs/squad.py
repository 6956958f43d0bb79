"""SQuAD v1.1 / v2.0 fine-tuning (SPEC 8.3): the official JSON files or TFDS, the paper's
hyper-parameters.

  albert-jax finetune --config=configs/squad.py:version=1.1 \
      --config.data.train_file=train-v1.1.json --config.data.dev_file=dev-v1.1.json \
      --config.init_from=albert_base/ --workdir=runs/squad_v1
  albert-jax finetune --config=configs/squad.py:version=2.0 \
      --config.data.tfds_name=squad/v2.0 --config.init_from=albert_base/ --workdir=runs/squad_v2
  albert-jax evaluate --workdir=runs/squad_v2 --split=dev    # predictions.json, null_odds.json ...

The argument: `version=1.1|2.0` (required), `size=base|large|xlarge|xxlarge` or `model=<preset>`
(only for a from-scratch run: with `init_from` the architecture comes from the checkpoint),
`runlocal` (tiny sizes for a laptop CPU). Dev metrics are the official evaluator's percentages
(finetune/squad/task.py).
"""
from __future__ import annotations

import ml_collections

from albert_jax.config import finetune_config, parse_arg, shrink_finetune_config
from albert_jax.errors import ConfigError

# SPEC 8.3, paper Table 14: lr, batch, steps, warmup, max_seq_length.
HYPER_PARAMETERS = {
    "1.1": (5e-5, 48, 3649, 365, 384),
    "2.0": (3e-5, 48, 8144, 814, 512),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, version="", size="base", model="", runlocal=False)
    if args.version not in HYPER_PARAMETERS:
        raise ConfigError(f"configs/squad.py needs version=1.1 or version=2.0 (got "
                          f"{args.version!r})")
    config = finetune_config(args)
    config.task = "squad"
    config.version = f"v{args.version}"  # squad.VERSIONS
    (config.optim.lr, config.batch_size, config.total_steps, config.optim.warmup_steps,
     config.seq_len) = HYPER_PARAMETERS[args.version]
    config.length_buckets = ()  # every batch at seq_len (SquadTask.sequence_fields says why)
    # SPEC 8.3 flags.
    config.doc_stride = 128
    config.max_query_length = 64
    config.max_answer_length = 30
    config.n_best_size = 20
    # A training window without the whole answer: "cls" labels it start = end = 0 as the
    # reference (SPEC 8.3); "drop" leaves it out (v1.1 only; finetune/squad/data.py says why).
    config.train_windows_without_answer = "cls"
    config.classifier_dropout = 0.1  # v2.0: the answer-class dropout (dropout_prob); v1.1: none
    # SQuAD reads two files, not a task folder.
    del config.data.path
    config.data.train_file = ""  # train-v1.1.json / train-v2.0.json
    config.data.dev_file = ""  # dev-v1.1.json / dev-v2.0.json
    # A dev evaluation is a whole pass over ~11k windows plus post-processing: every 500 steps
    # (SPEC 8.1 evaluates every saved checkpoint) is 8 (v1.1) or 17 (v2.0) per run.
    config.eval_every_steps = config.checkpoint_every_steps = 500
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
        config.max_query_length = 16
        config.doc_stride = 16
    config.lock()
    return config
