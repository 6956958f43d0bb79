"""Weights from one format to another: what `albert-jax convert` runs (albert_jax/cli.py).

  albert-jax convert --from=tf --path=albert_base/model.ckpt-best \
      --config_path=albert_base/albert_config.json --to=orbax --output=runs/albert_base
  albert-jax convert --from=huggingface --path=hf_dir --to=orbax --output=runs/from_hf
  albert-jax convert --from=orbax --path=runs/pretrain --to=huggingface --output=hf_out

Paths are local or in a bucket (gs://). An Orbax output is a weights-only checkpoint that
fine-tuning's `init_from` and `albert_jax.train.checkpoint.load` read; a HuggingFace output loads
with `transformers.AlbertForPreTraining.from_pretrained`.
"""
from __future__ import annotations

import jax
import numpy as np
from etils import epath

from albert_jax.convert.huggingface import load_huggingface, save_huggingface
from albert_jax.convert.tf_checkpoint import load_tf_checkpoint
from albert_jax.model import ModelConfig
from albert_jax.train import checkpoint

SOURCES = ("tf", "huggingface", "orbax")
TARGETS = ("orbax", "huggingface")


def convert(source: str, target: str, path: str, output: str,
            config_path: str | None) -> ModelConfig:
    """Reads the `source`-format weights at `path` and writes them in `target` format to the
    new directory `output`; returns their model config. `config_path` (albert_config.json) is
    needed for, and only for, `source="tf"`: a TF checkpoint does not record its model config.
    (The tokenizer that comes with the weights: tokenizer_files.py `carry_tokenizer`.)"""
    if source not in SOURCES:
        raise ValueError(f"unknown source format {source!r}; choose one of {SOURCES}")
    if target not in TARGETS:
        raise ValueError(f"unknown target format {target!r}; choose one of {TARGETS}")
    if (source == "tf") != (config_path is not None):
        raise ValueError("--config_path=albert_config.json is required with --from=tf (a TF "
                         "checkpoint does not record its model config) and only there (the other "
                         "formats carry their config)")
    destination = epath.Path(output)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise FileExistsError(f"output {output} exists and is not an empty directory; choose a "
                              "new directory (nothing was written)")
    if source == "tf":
        assert config_path is not None  # checked above
        model_config, params = load_tf_checkpoint(path, config_path)
    elif source == "huggingface":
        model_config, params = load_huggingface(path)
    else:
        model_config, params = checkpoint.load(path)
    if target == "huggingface":
        save_huggingface(model_config, jax.tree.map(np.asarray, params), output)
    else:
        checkpoint.save_weights(output, model_config, params)
    leaves = jax.tree.leaves(params)
    print(f"converted {sum(np.size(leaf) for leaf in leaves):,} parameters in {len(leaves)} "
          f"arrays ({', '.join(sorted(params))}) from {source} {path} to {target} {output}")
    return model_config
