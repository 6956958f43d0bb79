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
fresh (big_vision's `dont_load`, T5X's initial checkpoint).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from absl import logging
from etils import epath

from albert_jax.convert import load_huggingface, load_tf_checkpoint, tokenizer_files
from albert_jax.data.tokenizers import read_record
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig
from albert_jax.train import checkpoint
from albert_jax.train import workdir as workdir_names


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """model_config: the checkpoint's architecture; backbone: the `albert` params (numpy or
    jax arrays); tokenizer: the SentencePiece model or WordPiece vocabulary that came with it,
    or None; comma_rule:
    the SPEC 2.3 digit-comma rule its tokenizer was used with, where known ("hf" for a
    HuggingFace checkpoint, the recorded rule for one of our workdirs), else None."""

    model_config: ModelConfig
    backbone: dict[str, Any]
    tokenizer: str | None
    kind: str  # "workdir", "orbax", "huggingface", "tf"
    comma_rule: str | None = None


def warn_if_comma_rule_differs(pretrained: Pretrained, comma_rule: str) -> None:
    """One warning line when the run tokenizes numbers unlike the checkpoint did (SPEC 2.3)."""
    if pretrained.comma_rule is not None and pretrained.comma_rule != comma_rule:
        logging.warning(
            "config data.comma_rule=%r differs from the digit-comma rule of the init_from "
            "checkpoint (%s: %r), so numbers followed by a comma are tokenized differently "
            "(SPEC 2.3); --config.data.comma_rule=%s matches it", comma_rule, pretrained.kind,
            pretrained.comma_rule, pretrained.comma_rule)


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
        return Pretrained(model_config, params["albert"], tokenizer_files.tf_tokenizer(directory),
                          "tf")

    hf_config = directory / workdir_names.CONFIG_FILE
    if hf_config.exists() and json.loads(hf_config.read_bytes()).get("model_type") == "albert":
        model_config, params = load_huggingface(os.fspath(directory))
        # HuggingFace's AlbertTokenizer applies the Python 2 digit-comma rule (SPEC 2.3).
        tokenizer = workdir_names.tokenizer_path(directory)
        return Pretrained(model_config, params["albert"], tokenizer and os.fspath(tokenizer),
                          "huggingface", "hf")

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
    record = read_record(tokenizer) if tokenizer else None
    return Pretrained(model_config, params["albert"], tokenizer, kind,
                      record.get("comma_rule") if record else None)
