"""HuggingFace `transformers` ALBERT weights in (safetensors or pytorch_model.bin) and out.

Names follow SPEC 4.5 in PyTorch form (`albert.encoder.albert_layer_groups.{g}.albert_layers.{i}
.attention.query.weight`); PyTorch `nn.Linear` weights are [out, in], ours [in, out], so every
dense kernel is transposed. Transposes and float32 copies are exact: HF -> ours -> HF and
ours -> HF -> ours reproduce every array bit for bit.

Where HF and the reference differ (SPEC 11) the conversion is exact or refuses:
- HF always applies `embedding_hidden_mapping_in`, also when E == H (SPEC 11.2); the reference
  has no such layer then (SPEC 3.2.4). Importing an HF model with E == H sets the model config's
  `always_project_embeddings`, which keeps the layer (exact); exporting a model without the
  layer writes the identity (exact).
- HF picks the group of layer l as int(l / (L / G)), the reference int(l / L * G) (SPEC 3.3);
  for a few (L, G) the float rounding differs, and such configs are refused both ways.
- HF's "gelu" is the exact erf GELU, "gelu_new" the tanh one (SPEC 3.2.8): loading keeps what
  HF computes (`gelu_exact` / `gelu_tanh`), exporting writes the name HF computes ours with.
Directories are local or gs:// (etils.epath); os.path's joins are lexical and join a gs:// path.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
import safetensors.numpy
from etils import epath
from flax import traverse_util

from albert_jax.convert.tf_checkpoint import match_variables, param_shapes
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig, from_dict
from albert_jax.model.presets import group_of_layer

_FROM_HF_ACTIVATION = {"gelu": "gelu_exact", "gelu_new": "gelu_tanh",
                       "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_TO_HF_ACTIVATION = {"gelu_exact": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
# transformers AlbertConfig defaults (SPEC 3.1 [S14]) for keys a config.json leaves out.
_HF_DEFAULTS: dict[str, Any] = dict(
    vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12,
    num_hidden_groups=1, num_attention_heads=64, intermediate_size=16384, inner_group_num=1,
    hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12)
# Non-persistent buffers that older transformers versions saved with the weights.
_BUFFERS = ("albert.embeddings.position_ids", "albert.embeddings.token_type_ids")
_MAPPING = "albert.encoder.embedding_hidden_mapping_in"
# Which HF class holds exactly the heads present (SPEC 11.6).
_ARCHITECTURES = {frozenset(): "AlbertModel", frozenset({"predictions"}): "AlbertForMaskedLM",
                  frozenset({"predictions", "seq_relationship"}): "AlbertForPreTraining"}
# Fine-tuned heads: HF class -> (our top-level part, HF name -> (our path, transpose?)). Ours keep
# the reference's layouts (SPEC 4.3): the classifier kernel is [H, labels] (HF Linear: [labels,
# H], transposed); cls/squad/output_weights is already [2, H] like HF's qa_outputs.weight.
_FINETUNED_HEADS: dict[str, tuple[str, dict[str, tuple[tuple[str, ...], bool]]]] = {
    "AlbertForSequenceClassification": ("classifier", {
        "classifier.weight": (("classifier", "dense", "kernel"), True),
        "classifier.bias": (("classifier", "dense", "bias"), False)}),
    "AlbertForMultipleChoice": ("classifier", {
        "classifier.weight": (("classifier", "dense", "kernel"), True),
        "classifier.bias": (("classifier", "dense", "bias"), False)}),
    "AlbertForTokenClassification": ("classifier", {
        "classifier.weight": (("classifier", "dense", "kernel"), True),
        "classifier.bias": (("classifier", "dense", "bias"), False)}),
    "AlbertForQuestionAnswering": ("squad", {
        "qa_outputs.weight": (("squad", "output_weights"), False),
        "qa_outputs.bias": (("squad", "output_bias"), False)}),
}


@dataclasses.dataclass(frozen=True)
class FinetunedHead:
    """A fine-tuned head as transformers sees it.

    Attributes:
      architecture: AlbertForSequenceClassification (GLUE), AlbertForMultipleChoice (RACE),
        AlbertForQuestionAnswering (SQuAD v1.1) or AlbertForTokenClassification (tagging).
      labels: class names in our class order (config.json `id2label`); empty for a regression
        head (STS-B: num_labels 1, problem_type "regression") and for the other classes.
    """

    architecture: str
    labels: tuple[str, ...] = ()

    def config_fields(self, num_outputs: int) -> dict[str, Any]:
        """The config.json fields of this head; `num_outputs` is the classifier's width."""
        if self.architecture not in ("AlbertForSequenceClassification",
                                     "AlbertForTokenClassification"):
            return {}
        if not self.labels:
            return dict(num_labels=1, problem_type="regression", id2label={"0": "LABEL_0"},
                        label2id={"LABEL_0": 0})
        if len(self.labels) != num_outputs:
            raise ValueError(f"{len(self.labels)} label names {self.labels} for a classifier "
                             f"with {num_outputs} outputs")
        fields = dict(num_labels=num_outputs,
                      id2label={str(index): label for index, label in enumerate(self.labels)},
                      label2id={label: index for index, label in enumerate(self.labels)})
        if self.architecture == "AlbertForSequenceClassification":
            fields["problem_type"] = "single_label_classification"
        return fields


def _check_grouping(config: ModelConfig, source: str) -> None:
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    differ = [layer for layer in range(layers)
              if int(layer / (layers / groups)) != group_of_layer(layer, layers, groups)]
    if differ:
        raise ConfigError(
            f"{source}: num_hidden_layers={layers}, num_hidden_groups={groups}: HF assigns layers "
            f"{differ} to a different parameter group than the reference (float rounding in "
            "int(l / (L / G)) vs int(l / L * G), SPEC 3.3), so the two models would compute "
            "different functions; choose a num_hidden_groups that divides num_hidden_layers")


def model_config_from_hf(fields: dict[str, Any], source: str = "config.json"
                         ) -> ModelConfig:
    """Our model config from a transformers AlbertConfig dict, computing what HF computes."""
    if fields.get("model_type", "albert") != "albert":
        raise ConfigError(f"{source}: model_type={fields['model_type']!r}, expected 'albert'")
    if fields.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{source}: position_embedding_type="
                          f"{fields['position_embedding_type']!r}; only 'absolute' is ALBERT")
    values = {key: fields.get(key, default) for key, default in _HF_DEFAULTS.items()}
    if values["hidden_act"] not in _FROM_HF_ACTIVATION:
        raise ConfigError(f"{source}: hidden_act={values['hidden_act']!r} is not supported; use "
                          f"one of {sorted(_FROM_HF_ACTIVATION)}")
    values["hidden_act"] = _FROM_HF_ACTIVATION[values["hidden_act"]]
    config = from_dict(dict(values, sharing="all",
                            always_project_embeddings=values["embedding_size"] == values["hidden_size"]))
    _check_grouping(config, source)
    return config


def _hf_name_map(config: ModelConfig) -> dict[str, tuple[tuple[str, ...], bool]]:
    """HF (PyTorch) parameter name -> (our param path, transpose?) (SPEC 4.5)."""
    names: dict[str, tuple[tuple[str, ...], bool]] = {}

    def dense(hf_scope: str, path: str) -> None:
        names[f"{hf_scope}.weight"] = ((*path.split("/"), "kernel"), True)
        names[f"{hf_scope}.bias"] = ((*path.split("/"), "bias"), False)

    def layer_norm(hf_scope: str, path: str) -> None:
        names[f"{hf_scope}.weight"] = ((*path.split("/"), "scale"), False)
        names[f"{hf_scope}.bias"] = ((*path.split("/"), "bias"), False)

    for table in ("word", "token_type", "position"):
        names[f"albert.embeddings.{table}_embeddings.weight"] = (
            ("albert", "embeddings", f"{table}_embeddings", "embedding"), False)
    layer_norm("albert.embeddings.LayerNorm", "albert/embeddings/LayerNorm")
    if config.embedding_size != config.hidden_size or config.always_project_embeddings:
        dense(_MAPPING, "albert/encoder/embedding_hidden_mapping_in")
    for group in range(config.num_hidden_groups):
        for inner in range(config.inner_group_num):
            hf_scope = f"albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}"
            scope = f"albert/encoder/group_{group}/inner_group_{inner}"
            for hf_name, name in (("query", "query"), ("key", "key"), ("value", "value"),
                                  ("dense", "output")):
                dense(f"{hf_scope}.attention.{hf_name}", f"{scope}/attention/{name}")
            layer_norm(f"{hf_scope}.attention.LayerNorm", f"{scope}/attention/LayerNorm")
            dense(f"{hf_scope}.ffn", f"{scope}/ffn/intermediate")
            dense(f"{hf_scope}.ffn_output", f"{scope}/ffn/output")
            layer_norm(f"{hf_scope}.full_layer_layer_norm", f"{scope}/ffn/LayerNorm")
    dense("albert.pooler", "albert/pooler")
    dense("predictions.dense", "predictions/dense")
    layer_norm("predictions.LayerNorm", "predictions/LayerNorm")
    names["predictions.bias"] = (("predictions", "output_bias"), False)
    dense("sop_classifier.classifier", "seq_relationship/dense")
    return names


def _read_weights(path: str) -> dict[str, np.ndarray]:
    """All tensors of a save_pretrained directory: model.safetensors, pytorch_model.bin, or
    their sharded forms (`*.index.json` listing the shard files)."""
    for weights, index in (("model.safetensors", "model.safetensors.index.json"),
                           ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if epath.Path(path, index).exists():
            files = sorted(set(json.loads(epath.Path(path, index).read_bytes())
                               ["weight_map"].values()))
        elif epath.Path(path, weights).exists():
            files = [weights]
        else:
            continue
        tensors: dict[str, np.ndarray] = {}
        for name in files:
            tensors.update(_read_file(os.path.join(path, name)))
        return tensors
    found = sorted(entry.name for entry in epath.Path(path).iterdir())
    raise FileNotFoundError(f"{path} has no model.safetensors or pytorch_model.bin (found "
                            f"{found}); pass a save_pretrained directory")


def _is_local(path: str) -> bool:
    return "://" not in path


def _read_file(path: str) -> dict[str, np.ndarray]:
    if path.endswith(".safetensors"):
        if _is_local(path):  # memory-mapped: no second copy of the weights in memory
            return safetensors.numpy.load_file(path)
        return safetensors.numpy.load(epath.Path(path).read_bytes())
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(f"reading {path} needs PyTorch: pip install 'albert-jax[interop]' (or "
                          "convert it to model.safetensors, which needs no PyTorch)") from error
    with epath.Path(path).open("rb") as file:
        state = torch.load(file, map_location="cpu", weights_only=True)
    # bfloat16 has no NumPy form in torch; float32 holds every bfloat16/float16 value exactly.
    return {name: (tensor.float() if tensor.is_floating_point() else tensor).numpy()
            for name, tensor in state.items()}


def _pop_tied_decoder(tensors: dict[str, np.ndarray], config: ModelConfig
                          ) -> list[str]:
    """Removes the tied decoder copies HF keeps beyond ours (SPEC 4.2), checking that dropping
    them loses nothing."""
    problems = []
    word_embeddings = tensors.get("albert.embeddings.word_embeddings.weight")
    decoder = tensors.pop("predictions.decoder.weight", None)
    if decoder is not None and word_embeddings is not None \
            and not np.array_equal(decoder, word_embeddings):
        problems.append("predictions.decoder.weight differs from the word embeddings (untied, e.g. "
                        "tie_word_embeddings=false); the ALBERT decoder is tied (SPEC 4.2)")
    decoder_bias = tensors.pop("predictions.decoder.bias", None)
    if decoder_bias is not None and "predictions.bias" not in tensors:
        tensors["predictions.bias"] = decoder_bias
    elif decoder_bias is not None and not np.array_equal(decoder_bias, tensors["predictions.bias"]):
        problems.append("predictions.decoder.bias differs from predictions.bias")
    return problems


def load_huggingface(path: str) -> tuple[ModelConfig, dict[str, Any]]:
    """(model config, params) from a transformers `save_pretrained` ALBERT directory.

    Reads config.json and the weights of AlbertForPreTraining, AlbertForMaskedLM or AlbertModel.
    Returns params as plain nested dicts of float32 NumPy arrays with exactly the parts the file
    holds: `albert` always (the backbone, what fine-tuning's init_from needs), `predictions` when
    the MLM head is there, `seq_relationship` when the SOP head is there. So an AlbertForPreTraining
    file gives the full `AlbertForPreTraining(config).init(...)["params"]` tree, and an AlbertModel
    file the backbone only: heads are never invented. The tied decoder (SPEC 4.2) must equal the
    word embeddings. Raises ValueError listing missing, unknown and wrongly shaped weights.
    """
    config_path = os.path.join(path, "config.json")
    if not epath.Path(config_path).exists():
        raise FileNotFoundError(f"{config_path} not found; pass a save_pretrained directory")
    hf_config = json.loads(epath.Path(config_path).read_bytes())
    config = model_config_from_hf(hf_config, config_path)
    tensors = _read_weights(path)
    if not any(name.startswith("albert.") for name in tensors):  # AlbertModel.save_pretrained
        tensors = {f"albert.{name}": tensor for name, tensor in tensors.items()}
    for buffer in _BUFFERS:
        tensors.pop(buffer, None)
    head_params = _pop_finetuned_head(tensors, hf_config.get("architectures") or [], config_path)
    problems = _pop_tied_decoder(tensors, config)
    name_map = _hf_name_map(config)
    wanted, match_problems = match_variables(
        {name: tensor.shape for name, tensor in tensors.items()}, name_map, param_shapes(config))
    problems += match_problems
    if "albert.pooler.weight" not in tensors:
        problems.append("the file has no pooler (transformers' AlbertForMaskedLM, "
                        "AlbertForQuestionAnswering and AlbertModel(add_pooling_layer=False) "
                        "leave it out); the ALBERT backbone "
                        "needs one (SPEC 3.2.7): convert an AlbertForPreTraining or AlbertModel "
                        "file")
    if problems:
        raise ValueError(f"HuggingFace weights in {path} do not match its config.json: "
                         + "; ".join(problems))
    flat = {}
    for name in sorted(wanted):
        target, transpose = name_map[name]
        array = np.asarray(tensors[name], np.float32)
        flat[target] = np.ascontiguousarray(array.T) if transpose else array
    flat.update(head_params)
    return config, traverse_util.unflatten_dict(flat)


def _pop_finetuned_head(tensors: dict[str, np.ndarray], architectures: list[str],
                        source: str) -> dict[tuple[str, ...], np.ndarray]:
    """Removes the tensors of a fine-tuned HF head (AlbertForSequenceClassification, ...) from
    `tensors` and returns them under our param paths (`classifier/dense/...`, `squad/...`)."""
    for architecture in architectures:
        if architecture in _FINETUNED_HEADS:
            _, names = _FINETUNED_HEADS[architecture]
            missing = sorted(set(names) - set(tensors))
            if missing:
                raise ValueError(f"{source} says {architecture} but the weights lack {missing}")
            head = {}
            for name, (target, transpose) in names.items():
                array = np.asarray(tensors.pop(name), np.float32)
                head[target] = np.ascontiguousarray(array.T) if transpose else array
            return head
    return {}


def hf_config_dict(config: ModelConfig, architecture: str) -> dict[str, Any]:
    """The transformers AlbertConfig dict (config.json) that computes what `config` computes."""
    fields = {key: getattr(config, key) for key in _HF_DEFAULTS}
    fields["hidden_act"] = _TO_HF_ACTIVATION[config.hidden_act]
    return dict(fields, architectures=[architecture], model_type="albert",
                position_embedding_type="absolute", classifier_dropout_prob=0.1,
                pad_token_id=0, bos_token_id=2, eos_token_id=3, torch_dtype="float32")


def save_huggingface(config: ModelConfig, params: dict[str, Any], path: str,
                     head: FinetunedHead | None = None) -> None:
    """Writes config.json + model.safetensors that `transformers` loads with nothing missing.

    params: the `params` collection of AlbertForPreTraining (or its `albert` backbone alone, or
    backbone + `predictions`); the HF class follows the heads present (AlbertForPreTraining,
    AlbertForMaskedLM, AlbertModel). With `head`, params are a fine-tuned model's (`albert` +
    `classifier` or `squad`) and the file opens as `head.architecture`, its config.json
    carrying the labels. The file holds what HF's own save_pretrained writes: the
    tied decoder (`predictions.decoder.weight/bias`) is left out, and from_pretrained ties it.
    An AlbertForMaskedLM file keeps our pooler too (that HF class has none and skips it with a
    notice; AlbertForPreTraining or AlbertForSequenceClassification use it).
    path must not exist or be empty; files are written under temporary names and renamed.
    """
    if config.sharing != "all":
        raise ConfigError(f"model config sharing={config.sharing!r}: HF ALBERT shares attention "
                          "and FFN together (sharing='all') only")
    _check_grouping(config, "model config")
    output = epath.Path(path)
    if output.exists() and any(output.iterdir()):
        raise FileExistsError(f"output directory {path} is not empty; choose a new directory")
    heads = frozenset(params) - {"albert"}
    flat = traverse_util.flatten_dict(params)
    name_map = {name: entry for name, entry in _hf_name_map(config).items()
                if entry[0][0] in heads | {"albert"}}
    shapes = param_shapes(config)
    extra_config: dict[str, Any] = {}
    if head is not None:
        part, head_names = _FINETUNED_HEADS[head.architecture]
        if "albert" not in params or heads != {part}:
            raise ValueError(f"params have top-level parts {sorted(params)}; a "
                             f"{head.architecture} needs exactly 'albert' and '{part}'")
        name_map.update(head_names)
        if head.architecture == "AlbertForQuestionAnswering":
            shapes[("squad", "output_weights")] = (2, config.hidden_size)
            shapes[("squad", "output_bias")] = (2,)
        else:
            # The classifier's width is the task's (labels, 1 for regression or an option score).
            width = np.shape(flat.get(("classifier", "dense", "bias"), ()))
            shapes[("classifier", "dense", "bias")] = width
            shapes[("classifier", "dense", "kernel")] = (config.hidden_size, *width)
            if head.architecture == "AlbertForMultipleChoice" and width != (1,):
                raise ValueError(f"a multiple-choice classifier scores one option: width 1, "
                                 f"not {width}")
            extra_config = head.config_fields(width[0] if width else 0)
        architecture = head.architecture
    elif "albert" not in params or heads not in _ARCHITECTURES:
        raise ValueError(f"params have top-level parts {sorted(params)}; expected 'albert' plus "
                         "optionally 'predictions' and 'seq_relationship' (an AlbertForPreTraining "
                         "params tree, e.g. variables['params']), or a fine-tuned head named with "
                         "`head=`")
    else:
        architecture = _ARCHITECTURES[heads]
    ours = {target: name for name, (target, _) in name_map.items()}
    problems = [f"unknown parameters {sorted('/'.join(p) for p in set(flat) - set(ours))}"] \
        if set(flat) - set(ours) else []
    problems += [f"missing parameters {sorted('/'.join(p) for p in set(ours) - set(flat))}"] \
        if set(ours) - set(flat) else []
    problems += [f"{'/'.join(p)} has shape {np.shape(flat[p])}, the config needs {shapes[p]}"
                 for p in sorted(set(flat) & set(ours)) if np.shape(flat[p]) != shapes[p]]
    if problems:
        raise ValueError("params do not match the model config: " + "; ".join(problems))
    tensors = {}
    for name, (target, transpose) in name_map.items():
        array = np.asarray(flat[target], np.float32)
        tensors[name] = np.ascontiguousarray(array.T if transpose else array)
    if config.embedding_size == config.hidden_size and not config.always_project_embeddings:
        # HF applies the mapping always (SPEC 11.2); ours has none, so it is the identity.
        tensors[f"{_MAPPING}.weight"] = np.eye(config.hidden_size, dtype=np.float32)
        tensors[f"{_MAPPING}.bias"] = np.zeros(config.hidden_size, np.float32)
    if architecture in ("AlbertForQuestionAnswering", "AlbertForTokenClassification"):
        # transformers builds these without a pooler (add_pooling_layer=False); ours computes
        # one that the span and tagging heads never read, so leaving it out changes no output.
        for name in ("albert.pooler.weight", "albert.pooler.bias"):
            del tensors[name]
    if not heads:  # AlbertModel.save_pretrained writes names without the `albert.` prefix
        tensors = {name[len("albert."):]: tensor for name, tensor in tensors.items()}
    output.mkdir(parents=True, exist_ok=True)
    weights, config_file = output / "model.safetensors.tmp", output / "config.json.tmp"
    if _is_local(path):  # written from the arrays: no second copy of the weights in memory
        safetensors.numpy.save_file(tensors, os.fspath(weights), metadata={"format": "pt"})
    else:
        weights.write_bytes(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    config_file.write_bytes(json.dumps(dict(hf_config_dict(config, architecture), **extra_config),
                                       indent=2, sort_keys=True).encode())
    weights.replace(output / "model.safetensors")
    config_file.replace(output / "config.json")
