"""Helpers shared by the configs/ files: the config argument, model resolution, validation.

Config files are big_vision style: `get_config(arg)` with one string such as `size=base,runlocal`.
"""
from __future__ import annotations

import json
from typing import Any

import ml_collections
from ml_collections import config_dict

from albert_jax.errors import ConfigError
from albert_jax.model import presets


def parse_arg(arg: str | None, **defaults: Any) -> ml_collections.ConfigDict:
    """Parses `key=value,flag` into a ConfigDict of `defaults`; values take the default's type.

    An unknown key raises ConfigError naming it and the known keys.
    """
    parsed = dict(defaults)
    for item in filter(None, (arg or "").split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ConfigError(
                f"unknown config argument {key!r} in {arg!r}; known: {sorted(defaults)}")
        default = defaults[key]
        if isinstance(default, bool):
            parsed[key] = value.lower() not in ("0", "false", "no") if value else True
        elif value == "":
            raise ConfigError(f"config argument {key!r} needs a value: {key}=...")
        else:
            try:
                parsed[key] = type(default)(value)
            except ValueError as error:
                raise ConfigError(f"config argument {key}={value!r}: {error}") from None
    return ml_collections.ConfigDict(parsed)


def model_overrides_placeholder() -> ml_collections.ConfigDict:
    """One None-valued, typed entry per model field, so `--config.model_overrides.X=v` works."""
    fields = presets.get_config("tiny").to_dict()
    return ml_collections.ConfigDict(
        {key: config_dict.placeholder(type(value)) for key, value in fields.items()})


def model_config(config: ml_collections.ConfigDict,
                 base: presets.ModelConfig | None = None) -> presets.ModelConfig:
    """The validated model config of a run: the architecture (`base`, e.g. a fine-tuning
    checkpoint's, else the preset `config.model`) with the run's `compute_dtype`, pretraining's
    `data.vocab_size`, fine-tuning's backbone dropout (`dropout`: SPEC 8.2 "ALBERT DR", hidden
    and attention) and, over all of them, `model_overrides`."""
    fields: dict[str, Any] = {}
    if "dropout" in config:
        fields.update(hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout)
    if "compute_dtype" in config:
        fields["dtype"] = config.compute_dtype
    if "data" in config and "vocab_size" in config.data:
        fields["vocab_size"] = config.data.vocab_size
    fields.update({key: value for key, value in config.model_overrides.items() if value is not None})
    model = (presets.get_config(config.model, **fields) if base is None
             else presets.from_dict({**base.to_dict(), **fields}))
    if "seq_len" in config and config.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"config seq_len={config.seq_len} exceeds max_position_embeddings="
            f"{model.max_position_embeddings} of the model; lower seq_len or set "
            "model_overrides.max_position_embeddings")
    return model


def to_json(config: ml_collections.ConfigDict) -> str:
    """The resolved config as JSON (saved into the workdir)."""
    return json.dumps(config.to_dict(), indent=2, sort_keys=True)


def add_watching(config: ml_collections.ConfigDict) -> None:
    """The keys of where a run reports and what it traces (docs/watching.md), in pretraining and
    fine-tuning configs alike. metrics.jsonl and the console are always written."""
    # Comma-separated: tensorboard, mlflow, wandb, or none (train/reporting/trackers.py).
    config.report_to = "tensorboard"
    config.mlflow = ml_collections.ConfigDict()
    config.mlflow.tracking_uri = ""  # MLFLOW_TRACKING_URI wins; empty: MLflow's default
    config.mlflow.experiment = ""  # empty: the config's task (pretrain, mnli, ...)
    config.wandb = ml_collections.ConfigDict()
    config.wandb.project = "albert-jax"
    config.wandb.entity = ""  # empty: the W&B default entity
    config.wandb.mode = ""  # online | offline | disabled; empty: WANDB_MODE or online
    config.wandb.tags = ()
    # A jax.profiler trace of steps start_step .. start_step + num_steps - 1 (num_steps 0: off)
    # into <workdir>/tensorboard/plugins/profile/ (train/reporting/profiler.py).
    config.profile = ml_collections.ConfigDict()
    config.profile.start_step = 10
    config.profile.num_steps = 0
    config.profile.all_processes = False  # False: process 0 only


# XLA's compiled programs kept across runs (JAX's persistent compilation cache): a second
# finetune, predict or export of the same shapes loads them instead of compiling. Empty: off.
DEFAULT_COMPILATION_CACHE = "~/.cache/albert_jax/jax_cache"


# The lengths a fine-tuning batch (and a fill-mask or embeddings batch of a pretraining run) may
# run at below seq_len (train/buckets.py). Steps of a third to a half: a batch of 32 pairs of
# 10..100 tokens has its longest row at 70..100, which (64, 128, 256) ran at 128, 1.5x the work
# of padding to the longest row; with 96, albert-base's first step took 0.77 of the time and a
# 5-step run 0.82 (steps of 16: 0.71 and 0.72, with twice the lengths to compile; RESULTS.md).
DEFAULT_LENGTH_BUCKETS = (32, 64, 96, 128, 192, 256, 384)


def add_compilation_cache(config: ml_collections.ConfigDict) -> None:
    """The `compilation_cache` key of pretraining and fine-tuning configs (cli.py reads it)."""
    config.compilation_cache = DEFAULT_COMPILATION_CACHE


def finetune_config(args: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The keys every fine-tuning config has (configs/glue.py, configs/race.py), SPEC 8.1
    defaults: AdamW (SPEC 6.4) with the reference's warmup + linear decay (SPEC 6.1)."""
    config = ml_collections.ConfigDict()
    config.task = ""
    config.model = args.model or f"albert-{args.size}-v2"  # only for a from-scratch run
    config.model_overrides = model_overrides_placeholder()
    config.init_from = ""  # workdir, Orbax, HuggingFace or TF checkpoint: architecture + weights
    # SentencePiece .model or WordPiece vocab.txt; empty: the one that comes with init_from
    config.tokenizer = ""
    config.compute_dtype = "float32"
    add_compilation_cache(config)

    config.data = ml_collections.ConfigDict()
    config.data.path = ""  # the task's folder in the original format
    config.data.tfds_name = ""  # or a TFDS name, e.g. glue/mnli, race/high
    config.data.tfds_data_dir = ""
    # The tokenizer's text settings. None: those its init_from (or --config.tokenizer's record)
    # was used with, else the default in brackets; a value set here wins, with one warning line
    # if it differs (finetune/core/pretrained.py `text_settings`). config.json records the values
    # the run used.
    config.data.comma_rule = config_dict.placeholder(str)  # ["reference"] SPEC 2.3; "hf": HF's
    config.data.do_lower_case = config_dict.placeholder(bool)  # [True] the released models'
    config.data.keep_accents = config_dict.placeholder(bool)  # [False] True: marks kept (SPEC 2.2)
    config.data.num_workers = 0
    config.data.prefetch = 2

    config.seed = 12345
    config.seeds = 1  # >1: seeds seed .. seed+seeds-1, each in <workdir>/seed_<s>, and medians
    config.seq_len = 512  # SPEC 8.2 max_seq_length
    # Each batch runs at the shortest of these (or seq_len) that holds its longest example:
    # the same results as padding to seq_len (train/buckets.py); () pads every batch to seq_len.
    config.length_buckets = DEFAULT_LENGTH_BUCKETS
    config.batch_size = 32
    config.eval_batch_size = 64
    config.num_microbatches = 1
    config.total_steps = 1000
    config.dropout = 0.0  # SPEC 8.2 "ALBERT DR": hidden and attention dropout of the backbone
    config.classifier_dropout = 0.1  # SPEC 8.2: on the pooled output

    config.optim = ml_collections.ConfigDict()
    config.optim.name = "adamw"  # SPEC 6.4
    config.optim.lr = 2e-5
    config.optim.warmup_steps = 100
    config.optim.schedule = "reference"  # SPEC 6.1: linear warmup, linear decay to 0
    config.optim.power = 1.0
    config.optim.weight_decay = 0.01
    config.optim.beta_1 = 0.9
    config.optim.beta_2 = 0.999
    config.optim.epsilon = 1e-6
    config.optim.clip_norm = 1.0

    config.mesh = ml_collections.ConfigDict()
    config.mesh.data = -1
    config.mesh.fsdp = 1
    config.mesh.tensor = 1
    config.mesh.num_slices = 1  # TPU slices joined over the data-center network (DCN)
    config.mesh.dcn_data = -1  # slices the data axis spans (-1: those dcn_fsdp leaves)
    config.mesh.dcn_fsdp = 1  # slices fsdp spans: its all-gathers would cross DCN every layer

    config.log_every_steps = 50
    config.eval_every_steps = 100  # SPEC 8.1: every saved checkpoint is evaluated on dev
    config.checkpoint_every_steps = 100
    config.keep_checkpoints = 2
    add_watching(config)
    config.sweep = sweep_settings()
    return config


def sweep_settings() -> ml_collections.ConfigDict:
    """The `sweep` block of every fine-tuning config: what `albert-jax sweep` searches
    (docs/sweeps.md; finetune/sweep/). A plain `finetune` ignores it."""
    sweep = ml_collections.ConfigDict()
    # A dict (as Python or JSON text) of config key -> a list of values (a grid) or a range
    # "loguniform:LOW:HIGH", "uniform:LOW:HIGH", "int:LOW:HIGH", e.g.
    # "{'optim.lr': [1e-5, 2e-5, 3e-5], 'batch_size': [16, 32]}".
    sweep.space = ""
    sweep.seeds = 1  # every configuration runs with seeds seed .. seed+seeds-1
    sweep.sampler = ""  # grid | tpe | random; "": grid when every dimension is a list, else tpe
    sweep.trials = 0  # tpe, random: the configurations to try (grid: the whole grid)
    sweep.pruner = "none"  # none | median | hyperband: fed the dev metric at every evaluation
    sweep.metric = ""  # a dev metric as `evaluate` reports it; "": the task's selection metric
    sweep.objective = "median"  # median | mean over the seeds of a configuration
    # "": an Optuna journal file in the sweep's workdir (one machine); or a database URL
    # (postgresql://user:password@host/db) that workers on many machines share.
    sweep.storage = ""
    # A database's heartbeat: each worker beats this often, and a trial whose worker missed
    # three beats (a machine lost, a killed process) is failed and run again by another worker.
    sweep.heartbeat_seconds = 60
    return sweep


def shrink_finetune_config(config: ml_collections.ConfigDict) -> None:
    """`runlocal`: a fine-tuning config sized for a laptop CPU (the tiny model, short runs)."""
    config.seq_len = 64
    config.batch_size = 16
    config.eval_batch_size = 32
    config.total_steps = 200
    config.optim.lr = 1e-4
    config.optim.warmup_steps = 20
    config.eval_every_steps = config.checkpoint_every_steps = 50
    config.log_every_steps = 10
