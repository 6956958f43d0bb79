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


def model_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The validated model config of a run: the preset, its overrides, and compute_dtype."""
    overrides = {key: value for key, value in config.model_overrides.items() if value is not None}
    if "compute_dtype" in config:
        overrides.setdefault("dtype", config.compute_dtype)
    if "data" in config and "vocab_size" in config.data:
        overrides.setdefault("vocab_size", config.data.vocab_size)
    model = presets.get_config(config.model, **overrides)
    if "seq_len" in config and config.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"config seq_len={config.seq_len} exceeds max_position_embeddings="
            f"{model.max_position_embeddings} of model {config.model!r}; lower seq_len or set "
            "model_overrides.max_position_embeddings")
    return model


def to_json(config: ml_collections.ConfigDict) -> str:
    """The resolved config as JSON (saved into the workdir)."""
    return json.dumps(config.to_dict(), indent=2, sort_keys=True)
