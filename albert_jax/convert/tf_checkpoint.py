"""Original google-research ALBERT TF1 checkpoints and TF-Hub exports as our parameter tree.

The reference variable names (SPEC 4.1, 4.2) are mapped onto `AlbertForPreTraining` params, the
TF-Hub `module/` prefix is stripped and optimizer slots are skipped (SPEC 4.4), and the reference
albert_config.json becomes our model config (SPEC 3.1). The bytes on disk are tf_bundle.py's job.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from etils import epath
from flax import traverse_util

from albert_jax.convert.tf_bundle import read_tf_checkpoint, tf_checkpoint_shapes
from albert_jax.errors import ConfigError
from albert_jax.model import AlbertForPreTraining, ModelConfig, from_dict

# SPEC 3.1: the reference AlbertConfig defaults, used for keys a config json leaves out.
_TF_CONFIG_DEFAULTS: dict[str, Any] = dict(
    embedding_size=128, hidden_size=4096, num_hidden_layers=12, num_hidden_groups=1,
    num_attention_heads=64, intermediate_size=16384, inner_group_num=1, hidden_act="gelu",
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512,
    type_vocab_size=2, initializer_range=0.02)
# SPEC 3.1: keys the reference json carries but the model never reads.
_TF_CONFIG_UNUSED = ("down_scale_factor", "net_structure_type", "gap_size", "num_memory_blocks")
# SPEC 3.2.8, 7.1 note b: the reference "gelu" (and "gelu_new") is the tanh form.
_TF_ACTIVATIONS = {"gelu": "gelu_tanh", "gelu_new": "gelu_tanh", "relu": "relu"}
# SPEC 4.4: optimizer slots and counters, never model weights.
_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v")


def model_config_from_albert_json(fields: Mapping[str, Any], source: str = "config"
                                  ) -> ModelConfig:
    """Our model config from the fields of a reference albert_config.json (SPEC 3.1)."""
    if "vocab_size" not in fields:
        raise ConfigError(f"{source}: vocab_size is required (the reference has no default)")
    known = set(_TF_CONFIG_DEFAULTS) | {"vocab_size"}
    ignored = sorted(set(fields) - known - set(_TF_CONFIG_UNUSED))
    if ignored:
        logging.warning("%s: ignoring keys %s, which the reference AlbertConfig does not use",
                        source, ignored)
    values = {**_TF_CONFIG_DEFAULTS, **{key: fields[key] for key in known if key in fields}}
    if values["hidden_act"] not in _TF_ACTIVATIONS:
        raise ConfigError(f"{source}: hidden_act={values['hidden_act']!r} is not supported; the "
                          f"reference activations we implement are {sorted(_TF_ACTIVATIONS)}")
    values["hidden_act"] = _TF_ACTIVATIONS[values["hidden_act"]]
    return from_dict(dict(values, layer_norm_eps=1e-12, sharing="all"))  # SPEC 3.2.3


def param_shapes(config: ModelConfig) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Flattened path -> shape of `AlbertForPreTraining(config)` params (no arrays allocated)."""
    model = AlbertForPreTraining(config)

    def init() -> Any:
        ids = jnp.zeros((1, 1), jnp.int32)
        return nn.unbox(model.init(jax.random.PRNGKey(0), ids, ids, ids, ids)["params"])

    abstract = jax.eval_shape(init)
    return {path: tuple(leaf.shape) for path, leaf in traverse_util.flatten_dict(abstract).items()}


def _tf_name_map(config: ModelConfig) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Reference variable name -> (our param path, transpose?) for SPEC 4.1 and 4.2."""
    names: dict[str, tuple[tuple[str, ...], bool]] = {}

    def add(tf_name: str, path: str, transpose: bool = False) -> None:
        names[tf_name] = (tuple(path.split("/")), transpose)

    def dense(tf_scope: str, path: str) -> None:
        add(f"{tf_scope}/kernel", f"{path}/kernel")  # [in, out] both sides (SPEC 4)
        add(f"{tf_scope}/bias", f"{path}/bias")

    def layer_norm(tf_scope: str, path: str) -> None:
        add(f"{tf_scope}/gamma", f"{path}/scale")
        add(f"{tf_scope}/beta", f"{path}/bias")

    for table in ("word", "token_type", "position"):
        add(f"bert/embeddings/{table}_embeddings",
            f"albert/embeddings/{table}_embeddings/embedding")
    layer_norm("bert/embeddings/LayerNorm", "albert/embeddings/LayerNorm")
    if config.embedding_size != config.hidden_size:  # SPEC 3.2.4: absent when E == H
        dense("bert/encoder/embedding_hidden_mapping_in",
              "albert/encoder/embedding_hidden_mapping_in")
    for group in range(config.num_hidden_groups):
        for inner in range(config.inner_group_num):
            tf_scope = f"bert/encoder/transformer/group_{group}/inner_group_{inner}"
            scope = f"albert/encoder/group_{group}/inner_group_{inner}"
            for projection in ("query", "key", "value"):
                dense(f"{tf_scope}/attention_1/self/{projection}",
                      f"{scope}/attention/{projection}")
            dense(f"{tf_scope}/attention_1/output/dense", f"{scope}/attention/output")
            layer_norm(f"{tf_scope}/LayerNorm", f"{scope}/attention/LayerNorm")
            dense(f"{tf_scope}/ffn_1/intermediate/dense", f"{scope}/ffn/intermediate")
            # SPEC 4.1: the FFN output dense is nested inside `intermediate`.
            dense(f"{tf_scope}/ffn_1/intermediate/output/dense", f"{scope}/ffn/output")
            layer_norm(f"{tf_scope}/LayerNorm_1", f"{scope}/ffn/LayerNorm")
    dense("bert/pooler/dense", "albert/pooler")
    dense("cls/predictions/transform/dense", "predictions/dense")
    layer_norm("cls/predictions/transform/LayerNorm", "predictions/LayerNorm")
    add("cls/predictions/output_bias", "predictions/output_bias")
    # SPEC 4.2: output_weights is [2, H], [out, in] (matmul with transpose_b).
    add("cls/seq_relationship/output_weights", "seq_relationship/dense/kernel", transpose=True)
    add("cls/seq_relationship/output_bias", "seq_relationship/dense/bias")
    return names


def _finetuned_head_shapes(config: ModelConfig, stored_shapes: Mapping[str, tuple[int, ...]]
                           ) -> dict[str, tuple[tuple[str, ...], bool, tuple[int, ...]]]:
    """Reference name -> (our path, transpose?, the shape it must have) of the fine-tuned head a
    checkpoint holds (SPEC 4.3), if any: the GLUE/RACE classifier `output_weights` [labels, H]
    (labels from the file), SQuAD v1's `cls/squad/*` or SQuAD v2's `start_logits/`,
    `end_logits/`, `answer_class/` scopes, under `classifier/dense` and `squad` as our task
    models name them."""
    H = config.hidden_size
    if "output_weights" in stored_shapes:
        labels = stored_shapes["output_weights"][0]
        return {"output_weights": (("classifier", "dense", "kernel"), True, (labels, H)),
                "output_bias": (("classifier", "dense", "bias"), False, (labels,))}
    if "cls/squad/output_weights" in stored_shapes:
        return {"cls/squad/output_weights": (("squad", "output_weights"), False, (2, H)),
                "cls/squad/output_bias": (("squad", "output_bias"), False, (2,))}
    if not any(name.startswith("start_logits/") for name in stored_shapes):
        return {}
    head = {"start_logits/dense/kernel": (H, 1), "start_logits/dense/bias": (1,),
            "end_logits/dense_0/kernel": (2 * H, H), "end_logits/dense_0/bias": (H,),
            "end_logits/LayerNorm/gamma": (H,), "end_logits/LayerNorm/beta": (H,),
            "end_logits/dense_1/kernel": (H, 1), "end_logits/dense_1/bias": (1,),
            "answer_class/dense_0/kernel": (2 * H, H), "answer_class/dense_0/bias": (H,),
            "answer_class/dense_1/kernel": (H, 1)}
    ours = {"gamma": "scale", "beta": "bias"}
    return {name: (("squad", *name.split("/")[:-1], ours.get(name.split("/")[-1],
                                                               name.split("/")[-1])), False, shape)
            for name, shape in head.items()}


def match_variables(stored_shapes: Mapping[str, tuple[int, ...]],
                    name_map: Mapping[str, tuple[tuple[str, ...], bool]],
                    shapes: Mapping[tuple[str, ...], tuple[int, ...]]
                    ) -> tuple[set[str], list[str]]:
    """Which stored variables to load, and every problem found, as readable sentences.

    stored_shapes: name -> shape in the file; name_map: name -> (our path, transpose?);
    shapes: our path -> shape. The backbone (`albert/...`) is required; each head (the first
    path component) is loaded all or nothing: one variable of it present makes all required.
    """
    present = {name_map[name][0][0] for name in stored_shapes if name in name_map}
    wanted = {name for name, (path, _) in name_map.items() if path[0] in present | {"albert"}}
    problems = []
    missing = sorted(wanted - set(stored_shapes))
    unknown = sorted(set(stored_shapes) - set(name_map))
    if missing:
        problems.append(f"missing variables {missing}")
    if unknown:
        problems.append(f"unknown variables {unknown}")
    for name in sorted(wanted & set(stored_shapes)):
        path, transpose = name_map[name]
        needed = shapes[path][::-1] if transpose else shapes[path]
        if tuple(stored_shapes[name]) != needed:
            problems.append(f"{name} has shape {tuple(stored_shapes[name])}, the config needs "
                            f"{needed}")
    return wanted, problems


def _resolve_prefix(path: str) -> str:
    """The checkpoint prefix for a prefix, a `.index` file, a directory holding a `checkpoint`
    state file (TF1 training output), or a TF-Hub/SavedModel directory (`variables/variables`);
    local or gs:// (os.path's joins are lexical: they join a gs:// path as well)."""
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if epath.Path(path).is_dir():
        state = epath.Path(path) / "checkpoint"
        if epath.Path(os.path.join(path, "variables", "variables.index")).exists():
            return os.path.join(path, "variables", "variables")
        if state.exists():
            for line in state.read_bytes().decode("utf-8").splitlines():
                if line.startswith("model_checkpoint_path:"):
                    name = json.loads(line.split(":", 1)[1].strip())
                    absolute = os.path.isabs(name) or "://" in name
                    return name if absolute else os.path.join(path, name)
        raise FileNotFoundError(f"{path} is a directory without a `checkpoint` file or "
                                "variables/variables.index; pass the checkpoint prefix, e.g. "
                                f"{os.path.join(path, 'model.ckpt-best')}")
    if not epath.Path(path + ".index").exists():
        raise FileNotFoundError(f"no TF checkpoint index {path}.index; pass the prefix of the "
                                "`.index`/`.data-*` files, e.g. albert_base/model.ckpt-best")
    return path


def load_tf_checkpoint(checkpoint_path: str, config_path: str
                       ) -> tuple[ModelConfig, dict[str, Any]]:
    """(model config, params) from a reference TF1 checkpoint and its albert_config.json.

    checkpoint_path: the checkpoint prefix (`.../model.ckpt-best`), its `.index` file, or a
      directory (TF1 output with a `checkpoint` file, or a TF-Hub export with `variables/`).
      TF-Hub names carry a `module/` prefix, which is stripped (SPEC 4.4).
    Returns params as plain nested dicts of float32 NumPy arrays: `{"albert": ...}` plus
    `predictions` and `seq_relationship` when the checkpoint holds the pretraining heads (each
    head all or nothing), i.e. `AlbertForPreTraining(config).init(...)["params"]` or its
    backbone part; a fine-tuned checkpoint's head (SPEC 4.3) comes as `classifier` (GLUE, RACE)
    or `squad` (v1 or v2), named as our task models name it. Optimizer slots and global_step are skipped (SPEC 4.4). Raises ValueError
    listing every missing, unknown and wrongly shaped variable.
    """
    config = model_config_from_albert_json(json.loads(epath.Path(config_path).read_bytes()),
                                           config_path)
    prefix = _resolve_prefix(checkpoint_path)
    stored_shapes = tf_checkpoint_shapes(prefix)
    stored = {}  # reference name -> checkpoint name
    for name in stored_shapes:
        bare = name[len("module/"):] if name.startswith("module/") else name
        if bare != "global_step" and not bare.startswith("AdamWeightDecayOptimizer") \
                and not bare.endswith(_SKIPPED_SUFFIXES):
            stored[bare] = name
    name_map = _tf_name_map(config)
    bare_shapes = {bare: tuple(stored_shapes[name]) for bare, name in stored.items()}
    head = _finetuned_head_shapes(config, bare_shapes)
    problems = [f"fine-tuned head: missing variable {name}" for name in sorted(head)
                if name not in bare_shapes]
    problems += [f"fine-tuned head: {name} has shape {bare_shapes[name]}, the config needs {shape}"
                 for name, (_, _, shape) in sorted(head.items())
                 if name in bare_shapes and bare_shapes[name] != shape]
    wanted, match_problems = match_variables(
        {bare: shape for bare, shape in bare_shapes.items() if bare not in head},
        name_map, param_shapes(config))
    problems += match_problems
    name_map.update({name: (path, transpose) for name, (path, transpose, _) in head.items()})
    wanted |= set(head) & set(bare_shapes)
    if "_CHECKPOINTABLE_OBJECT_GRAPH" in stored:
        problems.append("this is a TF2 object-based checkpoint; only TF1 name-based checkpoints "
                        "(SPEC 4) are supported")
    if problems:
        raise ValueError(f"TF checkpoint {prefix} does not match {config_path}: "
                         + "; ".join(problems))
    arrays = read_tf_checkpoint(prefix, [stored[name] for name in wanted])
    flat = {}
    for name in sorted(wanted):
        path, transpose = name_map[name]
        # copy=False keeps float32 tensors as read and pop frees any other dtype once converted,
        # so peak memory stays about one copy of the weights (xxlarge: ~0.9 GB).
        array = arrays.pop(stored[name]).astype(np.float32, copy=False)
        flat[path] = np.ascontiguousarray(array.T) if transpose else array
    return config, traverse_util.unflatten_dict(flat)
