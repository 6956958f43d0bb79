"""`albert-jax finetune` and `albert-jax evaluate`: GLUE, RACE and SQuAD from a checkpoint to the
dev score and the leaderboard files.

  finetune: config -> the checkpoint of `init_from` (architecture, backbone, tokenizer) -> the
            task -> the training loop (best dev checkpoint kept in <workdir>/best/, best.json).
            `config.seeds=N` runs seeds seed .. seed+N-1 in <workdir>/seed_<s>/ and writes
            <workdir>/seeds.json with each seed's best dev metrics and their medians (the
            paper's protocol: medians over 5 runs, SPEC 8.1).
  evaluate: the best dev checkpoint of a workdir (of the best seed) -> predictions of every
            dev or test set -> <workdir>/predictions/<split>/ (GLUE server / RACE files; SQuAD's
            predictions.json & co., dev only) and, for dev, metrics.json.
  export_huggingface (`albert-jax convert --from=orbax --path=<workdir> --to=huggingface`): the
            same best checkpoint as the transformers class of its task, labels included.
"""
from __future__ import annotations

import json
import os
import statistics
from typing import Any

import jax
import ml_collections
import numpy as np
from etils import epath

from albert_jax.convert.huggingface import FinetunedHead, save_huggingface
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.finetune import glue, pretrained as pretrained_lib, squad
from albert_jax.finetune.squad_task import SquadTask
from albert_jax.finetune.task import FinetuneTask, GlueTask, RaceTask, finetune_model_config
from albert_jax.model import presets
from albert_jax.pretraining import TOKENIZER_FILE
from albert_jax.train import buckets, checkpoint, loop, sharding, validation
from albert_jax.train import step as step_lib

TASKS = (*glue.TASKS, "race", "squad")
SEEDS_FILE = "seeds.json"


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError, naming the key, for a fine-tuning config that cannot work."""
    if config.task not in TASKS:
        raise ConfigError(f"config task={config.task!r} is not a task; choose one of {TASKS}")
    if config.task == "squad":
        _validate_squad(config)
    else:
        if not config.data.path and not config.data.tfds_name:
            raise ConfigError(f"config data.path is empty: give the {config.task} data folder "
                              "(--config.data.path=DIR) or a TFDS name "
                              "(--config.data.tfds_name=...)")
        if config.data.path and not epath.Path(config.data.path).is_dir():
            raise FileNotFoundError(f"config data.path={config.data.path} is not a directory")
    validation.check_numbers(config)  # before init_from is read


def _validate_squad(config: ml_collections.ConfigDict) -> None:
    """SQuAD reads data.train_file and data.dev_file (official JSON) or data.tfds_name."""
    if config.version not in squad.VERSIONS:
        raise ConfigError(f"config version={config.version!r} must be one of {squad.VERSIONS} "
                          "(configs/squad.py:version=1.1 or version=2.0)")
    data = config.data
    if data.tfds_name and (data.train_file or data.dev_file):
        raise ConfigError(f"config data.tfds_name={data.tfds_name!r} and data.train_file/"
                          "data.dev_file are both set; give the files or the TFDS name")
    if not data.tfds_name:
        for key in ("train_file", "dev_file"):
            split = key.split("_")[0]
            if not data[key]:
                raise ConfigError(
                    f"config data.{key} is empty: give the SQuAD {split} file "
                    f"(--config.data.{key}={split}-{config.version}.json) or a TFDS name "
                    f"(--config.data.tfds_name=squad/{config.version})")
            if not epath.Path(data[key]).is_file():
                raise FileNotFoundError(f"config data.{key}={data[key]} does not exist")
    squad.check_windows_without_answer(config.train_windows_without_answer, config.version,
                                       "config train_windows_without_answer")
    for key in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
        if config[key] < 1:
            raise ConfigError(f"config {key}={config[key]} must be a positive integer")
    if config.seq_len < config.max_query_length + 4:
        raise ConfigError(f"config seq_len={config.seq_len} leaves no room for the context after "
                          f"max_query_length={config.max_query_length} question tokens and "
                          "[CLS] [SEP] [SEP]; raise seq_len or lower max_query_length")


def build_task(config: ml_collections.ConfigDict) -> FinetuneTask:
    """The task of `config`: its tokenizer and architecture from `init_from` (or the preset
    `config.model` for a from-scratch run), its data, its head."""
    validate(config)
    pretrained = pretrained_lib.load(config.init_from) if config.init_from else None
    tokenizer_path = config.tokenizer or (pretrained.tokenizer if pretrained else None)
    if not tokenizer_path:
        where = (f"init_from={config.init_from} carries no tokenizer (no spiece.model, "
                 "30k-clean.model or config naming one)" if pretrained
                 else "a from-scratch run (empty init_from) has no tokenizer")
        raise ConfigError(f"config {where}; give one with --config.tokenizer=PATH/TO/spiece.model")
    tokenizer = Tokenizer.load(tokenizer_path)
    base = (pretrained.model_config if pretrained
            else presets.get_config(config.model, vocab_size=tokenizer.vocab_size))
    model_config = finetune_model_config(config, base)
    if tokenizer.vocab_size != model_config.vocab_size:
        raise ConfigError(
            f"tokenizer {tokenizer_path} has {tokenizer.vocab_size} pieces but the model "
            f"embedding has vocab_size={model_config.vocab_size}; use the tokenizer the "
            "checkpoint was trained with (--config.tokenizer)")
    return task_class(config)(config, model_config, tokenizer, pretrained)


def task_class(config: ml_collections.ConfigDict) -> type[FinetuneTask]:
    """The Task class of a fine-tuning config's `task` (GLUE task names, race, squad)."""
    return {"race": RaceTask, "squad": SquadTask}.get(config.task, GlueTask)


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Fine-tunes (every seed); returns the best dev record, or for several seeds the
    seeds.json record."""
    if config.seeds == 1:
        loop.train_and_evaluate(config, workdir, build_task(config))
        best = loop.read_best(workdir)
        print(f"Best dev {best['metric']} {best['value']:.4f} at step {best['step']} "
              f"(kept in {epath.Path(workdir) / loop.BEST_SUBDIR}).", flush=True)
        return best
    runs = []
    for seed in range(config.seed, config.seed + config.seeds):
        seed_config = config.copy_and_resolve_references()
        seed_config.seed = seed
        seed_workdir = os.path.join(workdir, f"seed_{seed}")
        print(f"--- seed {seed} ({seed - config.seed + 1} of {config.seeds}) in {seed_workdir}",
              flush=True)
        loop.train_and_evaluate(seed_config, seed_workdir, build_task(seed_config))
        runs.append(dict(seed=seed, workdir=seed_workdir, **loop.read_best(seed_workdir)))
    dev_metrics = {key for run in runs for key in run["metrics"]["dev"]}
    record = {"runs": runs, "selection": runs[0]["metric"],
              "median": {key: statistics.median(run["metrics"]["dev"][key] for run in runs)
                         for key in sorted(dev_metrics)}}
    if jax.process_index() == 0:
        path = epath.Path(workdir) / SEEDS_FILE
        path.write_text(json.dumps(record, indent=2))
        for run in runs:
            print(f"seed {run['seed']}: " + ", ".join(
                f"{key} {value:.4f}" for key, value in run["metrics"]["dev"].items()), flush=True)
        print(f"median over {len(runs)} seeds: " + ", ".join(
            f"{key} {value:.4f}" for key, value in record["median"].items()), flush=True)
    return record


def _run_workdir(workdir: epath.Path) -> epath.Path:
    """The run to evaluate: the workdir, or with several seeds the seed with the best dev score."""
    seeds = workdir / SEEDS_FILE
    if not seeds.exists():
        return workdir
    runs = json.loads(seeds.read_text())["runs"]
    return epath.Path(max(runs, key=lambda run: run["value"])["workdir"])


def evaluate(workdir: str, split: str) -> list[str]:
    """`albert-jax evaluate`: predictions of the best dev checkpoint on every `split` set
    ("dev" or "test") into <workdir>/predictions/<split>/; returns the files written."""
    if split not in ("dev", "test"):
        raise ConfigError(f"--split={split!r}: use dev or test")
    root = epath.Path(workdir)
    if not (root / "config.json").exists():
        raise FileNotFoundError(f"{root / 'config.json'} does not exist: --workdir must be a "
                                "fine-tuning workdir (`albert-jax finetune --workdir=...`)")
    run = _run_workdir(root)
    config = ml_collections.ConfigDict(json.loads((run / "config.json").read_text()))
    best = loop.read_best(run)
    mesh = sharding.make_mesh(config.mesh)
    model_config, params = checkpoint.load(os.fspath(run / loop.BEST_SUBDIR), best["step"],
                                           mesh=mesh)
    tokenizer = Tokenizer.load(os.fspath(run / TOKENIZER_FILE))
    task = task_class(config)(config, model_config, tokenizer, None)
    eval_step = jax.jit(step_lib.make_eval_step(task), out_shardings=sharding.replicated(mesh))
    batch_sharding = sharding.batch_sharding(mesh)
    eval_splits = task.prediction_splits(split)
    directory = root / "predictions" / split
    if jax.process_index() == 0:
        directory.mkdir(parents=True, exist_ok=True)
    written, split_metrics = [], {}
    for eval_split in eval_splits:
        sums, predictions = loop.predict(task, eval_step, params, batch_sharding, eval_split,
                                         buckets.lengths_of(config))
        if split == "dev" and sums is not None:
            split_metrics[eval_split] = task.eval_metrics(eval_split, sums, predictions)
        if jax.process_index() == 0:
            written += task.write_predictions(eval_split, predictions, os.fspath(directory))
    if split == "dev" and jax.process_index() == 0:
        written += task.write_dev_metrics(split_metrics, best["step"], os.fspath(directory))
    for path in written:
        print(f"wrote {path}", flush=True)
    return written


def is_finetuning_workdir(path: str) -> bool:
    """Whether `path` is a workdir of `albert-jax finetune` (its config.json names a task)."""
    config_path = epath.Path(path) / "config.json"
    return config_path.exists() and json.loads(config_path.read_text()).get("task") in TASKS


def huggingface_head(config: ml_collections.ConfigDict) -> FinetunedHead:
    """The transformers class of a fine-tuning run's model (SPEC 11.6): GLUE ->
    AlbertForSequenceClassification with the task's labels (STS-B: regression), RACE ->
    AlbertForMultipleChoice, SQuAD v1.1 -> AlbertForQuestionAnswering."""
    if config.task == "race":
        return FinetunedHead("AlbertForMultipleChoice")
    if config.task == "squad":
        if config.version != "v1.1":
            raise ConfigError(
                f"SQuAD {config.version}'s head (SPEC 8.3: the XLNet-style start/end beam and the "
                "answerability class) has no transformers class; export the backbone alone with "
                "`albert-jax convert --from=orbax --path=<workdir>/best --to=huggingface`")
        return FinetunedHead("AlbertForQuestionAnswering")
    return FinetunedHead("AlbertForSequenceClassification", glue.labels(config.task) or ())


def export_huggingface(workdir: str, output: str) -> None:
    """Writes the best dev checkpoint of fine-tuning `workdir` (of its best seed) to `output` as
    a transformers model of its task's class (config.json with the labels, model.safetensors)
    with the run's `spiece.model` beside it, so `from_pretrained(output)` gives model and
    tokenizer."""
    run = _run_workdir(epath.Path(workdir))
    config = ml_collections.ConfigDict(json.loads((run / "config.json").read_text()))
    head = huggingface_head(config)
    best = loop.read_best(run)
    model_config, params = checkpoint.load(os.fspath(run / loop.BEST_SUBDIR), best["step"])
    save_huggingface(model_config, jax.tree.map(np.asarray, params), output, head=head)
    tokenizer = epath.Path(run) / TOKENIZER_FILE
    if tokenizer.exists():
        (epath.Path(output) / TOKENIZER_FILE).write_bytes(tokenizer.read_bytes())
    print(f"wrote the best dev checkpoint of {run} (step {best['step']}, {best['metric']} "
          f"{best['value']:.4f}) as transformers.{head.architecture} to {output}", flush=True)
