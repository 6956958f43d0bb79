"""The checkpoint a fine-tuning run starts from (`config.init_from`) and the tokenizer it carries.

`init_from` may be any of:
  - one of our workdirs: a pretraining run, or a fine-tuning run (its best dev checkpoint, so
    the paper's "RTE, STS-B and MRPC start from the MNLI checkpoint" (SPEC 8.2) is
    `init_from=<the MNLI workdir>`);
  - an Orbax checkpoint: a `checkpoints/` directory, one `<step>/` folder, or what
    `checkpoint.save_weights` / `albert-jax convert --to=orbax` wrote;
  - a HuggingFace directory (`config.json` of model_type albert + `model.safetensors` or
    `pytorch_model.bin`, with its `spiece.model` or `vocab.txt`);
  - an official TF checkpoint directory (`albert_config.json`, `model.ckpt-*.index` or a TF-Hub
    `variables/`, and `30k-clean.model`, or the Chinese models' `vocab_chinese.txt` (SPEC 2.5)),
    or the checkpoint prefix itself.
Each may be local or in a bucket (gs://, read through etils.epath). The architecture always comes
from it (the user never retypes it); only the backbone (`albert`) is taken, the task head starts
fresh (big_vision's `dont_load`, T5X's initial checkpoint). So do the text settings its tokenizer
was used with (casing, accents, the digit-comma rule: `text_settings`), unless the run sets a key
itself.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from absl import logging
from etils import epath

from albert_jax.convert import load_huggingface, load_tf_checkpoint, tokenizer_files
from albert_jax.data.tokenizers import TextSettings, config_keys
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig
from albert_jax.train import checkpoint
from albert_jax.train import workdir as workdir_names


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """model_config: the checkpoint's architecture; backbone: the `albert` params (numpy or
    jax arrays); tokenizer: the SentencePiece model or WordPiece vocabulary that came with it,
    or None; text: the `TextSettings` fields its tokenizer was used with, those that are known
    (`tokenizer_files.source_settings`: one of our workdirs' record, a HuggingFace folder's
    tokenizer_config.json; nothing for a TF checkpoint)."""

    model_config: ModelConfig
    backbone: dict[str, Any]
    tokenizer: str | None
    kind: str  # "workdir", "orbax", "huggingface", "tf"
    text: dict[str, Any] = dataclasses.field(default_factory=dict)


# What a text setting changes, for the warning of a run that sets it unlike its checkpoint.
_WHAT_DIFFERS = {
    "do_lower_case": "capitals are tokenized differently (SPEC 2.2)",
    "keep_accents": "accents and other combining marks are tokenized differently (SPEC 2.2)",
    "comma_rule": "numbers followed by a comma are tokenized differently (SPEC 2.3)",
}


def text_settings(data: Any, known: dict[str, Any], source: str) -> TextSettings:
    """The settings a fine-tuning run tokenizes with: each key `config.data` sets (not None),
    else the one `known` of its tokenizer (`Pretrained.text`, or a record beside
    config.tokenizer), else the default. One warning line for each key the run sets unlike
    `known`, naming `source` (where `known` came from, e.g. "the init_from workdir
    checkpoint")."""
    chosen = config_keys(data)
    for key in sorted(chosen.keys() & known.keys() & _WHAT_DIFFERS.keys()):
        if chosen[key] != known[key]:
            logging.warning(
                "config data.%s=%r differs from %s (%r), so %s; the run's value is used "
                "(leave the key out, or --config.data.%s=%s, to match it)", key, chosen[key],
                source, known[key], _WHAT_DIFFERS[key], key, known[key])
    settings = TextSettings(**{**known, **chosen})
    settings.check()
    return settings


def _tf_prefix(path: epath.Path) -> str | None:
    """The checkpoint prefix in a TF checkpoint directory (model.ckpt-best first)."""
    if path.name.endswith(".index") or epath.Path(f"{path}.index").exists():
        return os.fspath(path).removesuffix(".index")
    for pattern in ("model.ckpt-best.index", "model.ckpt*.index", "variables/variables.index",
                    "*.index"):
        found = sorted(os.fspath(match) for match in path.glob(pattern))
        if found:
            return found[-1].removesuffix(".index")
    return None


def load(path: str) -> Pretrained:
    """The model config, backbone params and tokenizer of `init_from=path` (module docstring)."""
    root = epath.Path(path)
    if not root.exists() and not epath.Path(f"{path}.index").exists():
        raise FileNotFoundError(f"config init_from={path}: no such file or directory")
    directory = root if root.is_dir() else root.parent

    if (directory / "albert_config.json").exists():
        prefix = _tf_prefix(root)
        if prefix is None:
            raise FileNotFoundError(f"init_from={path} has albert_config.json but no TF checkpoint "
                                    "(model.ckpt-*.index or variables/variables.index)")
        model_config, params = load_tf_checkpoint(prefix, os.fspath(directory / "albert_config.json"))
        tokenizer = tokenizer_files.tf_tokenizer(directory)
        return Pretrained(model_config, params["albert"], tokenizer, "tf",
                          tokenizer_files.source_settings("tf", path, tokenizer))

    hf_config = directory / workdir_names.CONFIG_FILE
    if hf_config.exists() and json.loads(hf_config.read_bytes()).get("model_type") == "albert":
        model_config, params = load_huggingface(os.fspath(directory))
        found = workdir_names.tokenizer_path(directory)
        tokenizer = os.fspath(found) if found else None
        return Pretrained(model_config, params["albert"], tokenizer, "huggingface",
                          tokenizer_files.source_settings("huggingface", path, tokenizer))

    kind = "workdir" if (root / workdir_names.CONFIG_FILE).exists() else "orbax"
    source = root
    if (root / workdir_names.BEST_FILE).exists():
        source = root / workdir_names.BEST_SUBDIR  # a fine-tuned workdir: its best dev checkpoint
    try:
        model_config, params = checkpoint.load(os.fspath(source))
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"config init_from={path} is not a checkpoint we can read ({error}); give a workdir, "
            "an Orbax checkpoint, a HuggingFace directory or an official TF checkpoint "
            "directory") from None
    if "albert" not in params:
        raise ConfigError(f"config init_from={path}: the checkpoint has no `albert` backbone "
                          f"(top-level params: {sorted(params)})")
    tokenizer = tokenizer_files.workdir_tokenizer(root)
    return Pretrained(model_config, params["albert"], tokenizer, kind,
                      tokenizer_files.source_settings("orbax", path, tokenizer))
