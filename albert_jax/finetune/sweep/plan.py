"""What a sweep searches: the `sweep` block of a fine-tuning config (config.py `sweep_settings`),
read and checked before anything starts, and each trial's values as `--config.KEY=VALUE` flags.

  plan = read_plan(config)        # ConfigError (one line) for a bad key, range or setting
  plan.grid()                     # the grid sampler's space: every dimension's list + "seed"
  trial_flags(plan, params)       # ["--config.optim.lr=2e-05", "--config.seed=12345", ...]
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from typing import Any

import ml_collections

from albert_jax.errors import ConfigError
from albert_jax.finetune.core import registry
from albert_jax.finetune.core.task import FinetuneTask
from albert_jax.train import loop

SAMPLERS = ("grid", "tpe", "random")
PRUNERS = ("none", "median", "hyperband")
OBJECTIVES = ("median", "mean")
RANGES = ("loguniform", "uniform", "int")
SEED = "seed"  # the grid's seed dimension (a grid trial is one configuration x one seed)
# Keys a trial's values may not set: the sweep sets the seeds, and the sweep block is its own.
_RESERVED = ("seed", "seeds", "sweep")


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One key of `sweep.space`: a list of `values` (kind "list") or a range [low, high] of kind
    loguniform, uniform or int."""
    key: str
    kind: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0

    def suggest(self, trial: Any) -> Any:
        """The value of this dimension in an Optuna trial (the sampler picks it)."""
        if self.kind == "list":
            return trial.suggest_categorical(self.key, list(self.values))
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high))
        return trial.suggest_float(self.key, self.low, self.high, log=self.kind == "loguniform")


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """The checked sweep: its dimensions, the seeds every configuration runs with, the
    sampler, `trials` (configurations: a grid's size, or sweep.trials), the pruner, the dev
    `metric` (on `split`) that `objective` (median | mean over seeds) is taken of, the storage
    URL ("" = a journal file in the workdir), a database's `heartbeat_seconds` and the study's
    name."""
    dimensions: tuple[Dimension, ...]
    seeds: tuple[int, ...]
    sampler: str
    trials: int
    pruner: str
    metric: str
    split: str
    objective: str
    storage: str
    heartbeat_seconds: int
    study_name: str
    eval_every_steps: int
    total_steps: int

    def grid(self) -> dict[str, list[Any]]:
        """The grid sampler's search space: every dimension's list, and the seeds."""
        return {**{dimension.key: list(dimension.values) for dimension in self.dimensions},
                SEED: list(self.seeds)}

    @property
    def trial_per_seed(self) -> bool:
        """A grid trial is one configuration with one seed; a tpe or random trial is one
        configuration with every seed (finetune's `config.seeds`, in seed_<s>/ folders)."""
        return self.sampler == "grid"


def parse_space(text: str) -> dict[str, Any]:
    """`sweep.space`: a dict written as Python or JSON text."""
    if not text.strip():
        raise ConfigError("albert-jax sweep needs config sweep.space, e.g. "
                          "--config.sweep.space=\"{'optim.lr': [1e-5, 2e-5, 3e-5]}\"")
    try:
        space = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            space = json.loads(text)
        except ValueError:
            raise ConfigError(f"config sweep.space={text!r} is not a dict of config key -> list "
                              "or range, e.g. \"{'optim.lr': [1e-5, 2e-5], 'batch_size': "
                              "[16, 32]}\"") from None
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"config sweep.space={text!r} is not a non-empty dict of config key "
                          "-> list or range")
    return space


def _dimension(key: str, value: Any) -> Dimension:
    if isinstance(value, (list, tuple)):
        if not value:
            raise ConfigError(f"config sweep.space[{key!r}] is an empty list: give its values")
        for item in value:
            if not (item is None or isinstance(item, (str, int, float, bool))):
                raise ConfigError(f"config sweep.space[{key!r}] holds {item!r}: a value of the "
                                  "space is a number, a string, a bool or None")
        return Dimension(key, "list", tuple(value))
    parts = value.split(":") if isinstance(value, str) else []
    if len(parts) != 3 or parts[0] not in RANGES:
        raise ConfigError(f"config sweep.space[{key!r}]={value!r}: give a list of values or a "
                          "range \"loguniform:LOW:HIGH\", \"uniform:LOW:HIGH\" or "
                          "\"int:LOW:HIGH\"")
    kind = parts[0]
    try:
        low, high = (int(parts[1]), int(parts[2])) if kind == "int" else (
            float(parts[1]), float(parts[2]))
    except ValueError:
        raise ConfigError(f"config sweep.space[{key!r}]={value!r}: LOW and HIGH must be "
                          f"{'integers' if kind == 'int' else 'numbers'}") from None
    if not low < high or (kind == "loguniform" and low <= 0):
        raise ConfigError(f"config sweep.space[{key!r}]={value!r}: needs LOW < HIGH"
                          + (" and LOW > 0" if kind == "loguniform" else ""))
    return Dimension(key, kind, low=low, high=high)


def set_value(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
    """config[key] = value for a dotted key, with the config's own type checks; ConfigError for
    a key the config lacks or a value of the wrong type."""
    *parents, name = key.split(".")
    section = config
    try:
        for parent in parents:
            section = section[parent]
        if not isinstance(section, ml_collections.ConfigDict) or name not in section:
            raise KeyError(key)
        section[name] = value
    except (KeyError, AttributeError):
        raise ConfigError(f"config sweep.space names {key!r}, which is not a key of the config "
                          "(see the config file for its keys)") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"config sweep.space[{key!r}]: the value {value!r} does not fit the "
                          f"config key ({error})") from None


def _check_values(config: ml_collections.ConfigDict, dimensions: tuple[Dimension, ...]) -> None:
    """Every value of the space set on a copy of the config: the key exists, the type fits."""
    trial = config.copy_and_resolve_references()
    for dimension in dimensions:
        if dimension.key.split(".")[0] in _RESERVED:
            raise ConfigError(f"config sweep.space names {dimension.key!r}: the sweep sets the "
                              "seeds (config sweep.seeds) and reads its own block; search "
                              "other keys")
        samples = dimension.values or (dimension.low, dimension.high)
        for value in samples:
            set_value(trial, dimension.key, value)


# Keys that leave a study as it is: how its runs are run, not what they compute (the mesh,
# logging and reporting, checkpoint cadence, eval batch, data loading, length buckets), and
# where the study is stored. A rerun on another machine may change them and join the study.
_NOT_THE_STUDY = ("mesh", "log_every_steps", "checkpoint_every_steps", "keep_checkpoints",
                  "eval_batch_size", "num_microbatches", "data.prefetch", "data.local_dir",
                  "length_buckets", "model_overrides.attention_impl",
                  "compilation_cache", "report_to", "mlflow", "wandb", "profile",
                  "sweep.storage", "sweep.heartbeat_seconds")


def study_name(config: ml_collections.ConfigDict) -> str:
    """The study's name: the task and a hash of what the trials compute and how they are
    searched, so that the same command run again, or on another machine, joins the same
    study."""
    flat = loop.flatten(config.to_dict())
    kept = {key: value for key, value in flat.items()
            if not any(key == skip or key.startswith(skip + ".") for skip in _NOT_THE_STUDY)}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    task = str(config.task).replace("/", "_").replace(":", "_")
    return f"albert-jax-{task}-{digest[:12]}"


def read_plan(config: ml_collections.ConfigDict) -> SweepPlan:
    """The sweep of a fine-tuning config, every setting checked (ConfigError naming the key)."""
    if "sweep" not in config or "task" not in config:
        raise ConfigError("albert-jax sweep needs a fine-tuning config (configs/glue.py, "
                          "race.py, squad.py, custom.py or your own) with a sweep block")
    settings = config.sweep
    dimensions = tuple(_dimension(str(key), value)
                       for key, value in parse_space(settings.space).items())
    _check_values(config, dimensions)
    if config.seeds != 1:
        raise ConfigError(f"config seeds={config.seeds}: a sweep runs its seeds itself; set "
                          "config sweep.seeds instead (and leave seeds at 1)")
    if settings.seeds < 1:
        raise ConfigError(f"config sweep.seeds={settings.seeds}: give 1 or more")
    all_lists = all(dimension.kind == "list" for dimension in dimensions)
    sampler = settings.sampler or ("grid" if all_lists else "tpe")
    if sampler not in SAMPLERS:
        raise ConfigError(f"config sweep.sampler={sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if sampler == "grid" and not all_lists:
        ranges = [dimension.key for dimension in dimensions if dimension.kind != "list"]
        raise ConfigError(f"config sweep.sampler=grid needs a list for every key of sweep.space; "
                          f"{', '.join(ranges)} is a range (use sweep.sampler=tpe or random)")
    if sampler == "grid":
        trials = 1
        for dimension in dimensions:
            trials *= len(dimension.values)
    else:
        trials = settings.trials
        if trials < 1:
            raise ConfigError(f"config sweep.sampler={sampler} needs sweep.trials: the "
                              "configurations to try, e.g. --config.sweep.trials=20")
    if settings.pruner not in PRUNERS:
        raise ConfigError(f"config sweep.pruner={settings.pruner!r}: choose one of "
                          f"{', '.join(PRUNERS)}")
    if settings.heartbeat_seconds < 1:
        raise ConfigError(f"config sweep.heartbeat_seconds={settings.heartbeat_seconds}: give 1 "
                          "or more (seconds between a database worker's heartbeats)")
    if settings.objective not in OBJECTIVES:
        raise ConfigError(f"config sweep.objective={settings.objective!r}: choose one of "
                          f"{', '.join(OBJECTIVES)}")
    task_class: type[FinetuneTask] = registry.get(config.task)
    task_class.validate_config(config)  # e.g. the data: one line now, not one per trial
    metric = settings.metric or task_class.selection_metric(config)
    names = task_class.metric_names(config)
    if metric not in names:
        raise ConfigError(f"config sweep.metric={metric!r} is not a dev metric of task "
                          f"{config.task!r}; it reports {', '.join(names)}")
    selection = getattr(task_class, "selection", None)
    return SweepPlan(
        dimensions=dimensions, seeds=tuple(range(config.seed, config.seed + settings.seeds)),
        sampler=sampler, trials=trials, pruner=settings.pruner, metric=metric,
        split=selection.split if selection is not None else "dev",
        objective=settings.objective, storage=settings.storage,
        heartbeat_seconds=settings.heartbeat_seconds, study_name=study_name(config),
        eval_every_steps=config.eval_every_steps, total_steps=config.total_steps)


def override_flag(key: str, value: Any) -> str:
    """`--config.KEY=VALUE` that sets `value` again when `albert-jax` parses it (strings as
    they are; numbers, bools, tuples as Python writes them)."""
    return f"--config.{key}={value if isinstance(value, str) else repr(value)}"


def trial_flags(plan: SweepPlan, params: dict[str, Any]) -> list[str]:
    """The flags that make the sweep's config a trial's: its values and its seeds."""
    flags = [override_flag(dimension.key, params[dimension.key])
             for dimension in plan.dimensions]
    if plan.trial_per_seed:
        return flags + [override_flag("seed", params[SEED])]
    return flags + [override_flag("seed", plan.seeds[0]),
                    override_flag("seeds", len(plan.seeds))]
