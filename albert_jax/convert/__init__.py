"""Checkpoint conversion: reference TF1 checkpoints and HuggingFace weights in, HuggingFace out.

  config, params = load_tf_checkpoint("albert_base/model.ckpt-best",
                                      "albert_base/albert_config.json")
  config, params = load_huggingface("path/to/save_pretrained_dir")
  save_huggingface(config, params, "out_dir")   # transformers.AlbertForPreTraining.from_pretrained

`params` is the `params` collection of `AlbertForPreTraining(config)` (plain arrays): apply with
`model.apply({"params": params}, ...)`. The `albert-jax convert` command wraps these (formats.py).
"""
from albert_jax.convert.huggingface import load_huggingface, save_huggingface
from albert_jax.convert.tf_bundle import save_tf_checkpoint
from albert_jax.convert.tf_checkpoint import load_tf_checkpoint

__all__ = ["load_huggingface", "save_huggingface", "load_tf_checkpoint", "save_tf_checkpoint"]
