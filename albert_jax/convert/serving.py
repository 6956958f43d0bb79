"""A finished run as a serving artifact: what `albert-jax export` writes (albert_jax/cli.py).

  albert-jax export --workdir=W --format=onnx      --output=DIR   # DIR/model.onnx
  albert-jax export --workdir=W --format=onnx --quantize=int8 --output=DIR
  albert-jax export --workdir=W --format=stablehlo --output=DIR   # DIR/model.jax_export
  albert-jax export --workdir=W --format=litert    --output=DIR   # DIR/model.tflite

Both take the three model inputs by our names, in this order: input_ids, input_mask,
segment_ids, int32, with a dynamic batch and sequence length ([batch, choices, sequence] for
multiple choice); both give the head's float32 outputs (`OUTPUTS`). DIR also holds
signature.json (inputs, outputs, their shapes, the head, its label names, the tokenizer's text
settings) and the run's tokenizer as transformers files.

ONNX goes through our HuggingFace export (huggingface.py, exact to our logits) and PyTorch's
TorchScript ONNX exporter with dynamic axes; jax2onnx (0.17) could not convert our Flax model
with a symbolic sequence length (flax's nn.scan builds its carry from concrete shapes, and the
embedding lookup's fill-mode gather did not convert), while HF's ALBERT under torch.onnx is
exact (1e-8) at every batch and length. So the ONNX export covers what HF expresses: the
heads of `OUTPUTS`, sharing="all". The ONNX graph is then fused for ONNX Runtime's CPU kernels
with the shared layer's weights stored once (onnx_graph.py; `optimize="none"`: torch.onnx's
graph as traced), and with `quantize="int8"` quantized by ONNX Runtime's dynamic quantization
(onnx_quantize.py), what was quantized and what it costs (`score`) in signature.json.
StableHLO is `jax.export` of our own model with the weights inside, serialized: a process with
JAX alone (`jax.export.deserialize(bytes).call(input_ids, input_mask, segment_ids)`) runs it,
lowered for CPU, CUDA and TPU, batch and length symbolic (length <= max_position_embeddings).
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from etils import epath

from albert_jax import files
from albert_jax.convert import litert, onnx_graph, onnx_quantize
from albert_jax.convert.huggingface import FinetunedHead, save_huggingface
from albert_jax.data.tokenizers import TextSettings
from albert_jax.errors import ConfigError
from albert_jax.model import AlbertForPreTraining, ModelConfig

FORMATS = {"onnx": "model.onnx", "stablehlo": "model.jax_export", "litert": "model.tflite"}
OPTIMIZE = ("onnxruntime", "none")  # ONNX: fused for ONNX Runtime, or the graph as traced
QUANTIZE = ("none", "int8")  # ONNX: float32 weights, or ONNX Runtime's dynamic int8
# What a quantized export's cost is measured by: (the float32 model bytes, the int8 model
# bytes) -> the record signature.json's "quantized" adds (metric, fp32, int8, agreement).
Scorer = Callable[[bytes, bytes], dict[str, Any]]
SIGNATURE_FILE = "signature.json"
INPUTS = ("input_ids", "input_mask", "segment_ids")
MASKED_LM = "AlbertForMaskedLM"  # a pretraining run: the MLM logits at every position
# The heads a run exports as (the transformers class names; SPEC 11.6) -> their outputs, each
# with its dimensions (`labels`: the classifier's width; `vocab`: the vocabulary).
OUTPUTS: dict[str, dict[str, tuple[str, ...]]] = {
    "AlbertForSequenceClassification": {"logits": ("batch", "labels")},
    "AlbertForMultipleChoice": {"logits": ("batch", "choices")},
    "AlbertForQuestionAnswering": {"start_logits": ("batch", "sequence"),
                                   "end_logits": ("batch", "sequence")},
    "AlbertForTokenClassification": {"logits": ("batch", "sequence", "labels")},
    MASKED_LM: {"logits": ("batch", "sequence", "vocab")},
}
PLATFORMS = ("cpu", "cuda", "tpu")  # the StableHLO artifact runs on any of them
# What signature.json repeats of the tokenizer's tokenizer_config.json: how a server that
# tokenizes without transformers must treat the text (casing, accents, whitespace).
_TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_SETTINGS = ("tokenizer_class", "do_lower_case", "keep_accents", "remove_space",
                      "strip_accents", "tokenize_chinese_chars", "split_special_tokens")


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A run's model as it is served.

    model: the Flax task model (a fine-tuning task's, or AlbertForPreTraining of a pretraining
    run); params: its `params` collection; head: the transformers class it exports as and its
    label names (a pretraining run: `FinetunedHead(MASKED_LM)`); tokenizer_files: the run's
    tokenizer as transformers files ({name: bytes}); text_settings: the settings the run
    tokenizes with (its tokenizer's), which signature.json carries whole: the digit-comma rule
    and the word boundaries are ours alone, tokenizer_config.json cannot say them."""

    model_config: ModelConfig
    model: nn.Module
    params: Any
    head: FinetunedHead
    tokenizer_files: dict[str, bytes]
    text_settings: TextSettings

    @property
    def input_dims(self) -> tuple[str, ...]:
        if self.head.architecture == "AlbertForMultipleChoice":
            return ("batch", "choices", "sequence")
        return ("batch", "sequence")

    def apply(self, input_ids: jax.Array, input_mask: jax.Array,
              segment_ids: jax.Array) -> tuple[jax.Array, ...]:
        """Our outputs, in the order of `OUTPUTS[head]`: [batch, ...] float32 each."""
        variables = {"params": self.params}
        if isinstance(self.model, AlbertForPreTraining):  # every position is a masked one
            positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1], dtype=jnp.int32),
                                         input_ids.shape)
            mlm_logits, _ = self.model.apply(variables, input_ids, segment_ids, input_mask,
                                             positions)
            return (mlm_logits,)
        outputs = self.model.apply(variables, input_ids, segment_ids, input_mask)
        return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def export(served: ServedModel, export_format: str, output: str, *,
           optimize: str = "onnxruntime", quantize: str = "none",
           score: Scorer | None = None) -> list[str]:
    """Writes `served` in `export_format` (a key of `FORMATS`) into the new directory
    `output` (local or gs://): the model file, signature.json and the tokenizer files. ONNX:
    `optimize` one of `OPTIMIZE`, `quantize` one of `QUANTIZE`; `score`, for an int8 export,
    measures what quantizing cost. Checks everything before writing: a bad format or option, a
    head the format cannot express or an output that is not empty writes nothing. Returns the
    files written."""
    if export_format not in FORMATS:
        raise ConfigError(f"--format={export_format!r}: choose one of {', '.join(FORMATS)}")
    if optimize not in OPTIMIZE:
        raise ConfigError(f"--optimize={optimize!r}: choose one of {', '.join(OPTIMIZE)}")
    if quantize not in QUANTIZE:
        raise ConfigError(f"--quantize={quantize!r}: choose one of {', '.join(QUANTIZE)}")
    if export_format != "onnx" and (quantize != "none" or optimize != "onnxruntime"):
        raise ConfigError(f"--quantize and --optimize are options of --format=onnx, not of "
                          f"--format={export_format}; leave them out")
    if served.head.architecture not in OUTPUTS:
        raise ConfigError(f"a {served.head.architecture} head has no serving export; "
                          f"exports: {', '.join(OUTPUTS)}")
    if export_format == "litert" and served.head.architecture == "AlbertForMultipleChoice":
        raise ConfigError("a multiple-choice head has no --format=litert export (a LiteRT model "
                          "has fixed shapes; its number of choices is not known here): use "
                          "--format=onnx or stablehlo")
    destination = epath.Path(output)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise FileExistsError(f"--output={output} exists and is not an empty directory; choose "
                              "a new directory (nothing was written)")
    signature = _signature(served, export_format)
    if export_format == "onnx":
        model, quantized = _onnx_bytes(served, optimize, quantize, score)
        signature.update(optimize=optimize, **({"quantized": quantized} if quantized else {}))
    elif export_format == "litert":
        model = litert.litert_bytes(served)
        signature["input_shape"] = [1, litert.sequence_length(
            served.model_config.max_position_embeddings)]
    else:
        model = _stablehlo_bytes(served)
    contents = {FORMATS[export_format]: model,
                SIGNATURE_FILE: json.dumps(signature, indent=2).encode(),
                **served.tokenizer_files}
    written = []
    for name, content in contents.items():
        files.write_atomically(destination / name, content)
        written.append(os.fspath(destination / name))
    return written


def _signature(served: ServedModel, export_format: str) -> dict[str, Any]:
    """signature.json: what a server needs besides the model file."""
    head = served.head.architecture
    width = {"labels": len(served.head.labels) or 1, "vocab": served.model_config.vocab_size}
    return {
        "inputs": list(INPUTS),
        "outputs": list(OUTPUTS[head]),
        "input_shape": list(served.input_dims),
        "input_dtype": "int32",
        "output_shapes": {name: [width.get(dim, dim) for dim in dims]
                          for name, dims in OUTPUTS[head].items()},
        "head": head,
        "labels": list(served.head.labels),
        "max_sequence_length": served.model_config.max_position_embeddings,
        "format": export_format,
        "file": FORMATS[export_format],
        "tokenizer_files": sorted(served.tokenizer_files),
        "tokenizer": _tokenizer_settings(served.tokenizer_files),
        "text_settings": served.text_settings.as_dict(),
    }


def _tokenizer_settings(tokenizer_files: dict[str, bytes]) -> dict[str, Any]:
    """The `TOKENIZER_SETTINGS` of the tokenizer's tokenizer_config.json."""
    config = json.loads(tokenizer_files[_TOKENIZER_CONFIG]) if _TOKENIZER_CONFIG in \
        tokenizer_files else {}
    return {key: config[key] for key in TOKENIZER_SETTINGS if key in config}


# --- StableHLO ----------------------------------------------------------------------------------

def _stablehlo_bytes(served: ServedModel) -> bytes:
    """jax.export of `served.apply` with the weights as constants, batch and length symbolic."""
    params = jax.tree.map(jnp.asarray, served.params)
    dims = ", ".join(served.input_dims)
    shape = jax.export.symbolic_shape(
        dims, constraints=[f"sequence <= {served.model_config.max_position_embeddings}"])
    spec = jax.ShapeDtypeStruct(shape, jnp.int32)
    function = jax.jit(lambda *inputs: dataclasses.replace(served, params=params).apply(*inputs))
    exported = jax.export.export(function, platforms=PLATFORMS)(spec, spec, spec)
    return bytes(exported.serialize())


# --- ONNX ---------------------------------------------------------------------------------------

def _onnx_bytes(served: ServedModel, optimize: str, quantize: str, score: Scorer | None
                ) -> tuple[bytes, dict[str, Any] | None]:
    """model.onnx of `served` (export's options) and, quantized, signature.json's "quantized"
    record."""
    traced = _traced_onnx_bytes(served)  # first: it says which package is missing
    import onnx  # pylint: disable=import-outside-toplevel

    model = onnx.load_from_string(traced)
    if optimize == "onnxruntime":
        model = onnx_graph.for_onnxruntime(model, served.model_config)
    if quantize == "none":
        return model.SerializeToString(), None
    int8, record = onnx_quantize.quantize_int8(model)
    int8_bytes = int8.SerializeToString()
    if score is not None:
        record.update(score(model.SerializeToString(), int8_bytes))
    return int8_bytes, record


def huggingface_model(served: ServedModel) -> Any:
    """`served` as its transformers class (a torch module in eval mode, eager attention), taking
    our inputs (int32, in `INPUTS` order) and giving the tuple of `OUTPUTS[head]`: what the ONNX
    export traces."""
    torch, transformers = _serving_imports()
    params = jax.tree.map(np.asarray, served.params)
    head = served.head
    if head.architecture == MASKED_LM:  # the MLM head alone: AlbertForMaskedLM
        params = {part: params[part] for part in ("albert", "predictions")}
        head = None
    with tempfile.TemporaryDirectory() as folder:
        save_huggingface(served.model_config, params, folder, head=head)
        hf_class = getattr(transformers, served.head.architecture)
        model = hf_class.from_pretrained(folder, attn_implementation="eager").eval()
    return _with_our_inputs(torch, model, tuple(OUTPUTS[served.head.architecture])).eval()


def _traced_onnx_bytes(served: ServedModel) -> bytes:
    """`huggingface_model(served)` traced by torch.onnx with a dynamic batch and length."""
    torch, _ = _serving_imports()
    wrapper = huggingface_model(served)
    example = tuple(torch.ones((2, 3, 8)[-len(served.input_dims):], dtype=torch.int32)
                    for _ in INPUTS)
    axes = {name: dict(enumerate(served.input_dims)) for name in INPUTS}
    for name, dims in OUTPUTS[served.head.architecture].items():
        axes[name] = {axis: dim for axis, dim in enumerate(dims)
                      if dim in ("batch", "choices", "sequence")}
    buffer = io.BytesIO()
    torch.onnx.export(wrapper, example, buffer, input_names=list(INPUTS),
                      output_names=list(OUTPUTS[served.head.architecture]), dynamic_axes=axes,
                      opset_version=17, dynamo=False)
    return buffer.getvalue()


def _with_our_inputs(torch: Any, model: Any, outputs: tuple[str, ...]) -> Any:
    """`model` (a transformers ALBERT) taking our inputs, int32, in our order and giving the
    `outputs` of its output object as a tuple."""

    class OurInputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, input_mask: Any, segment_ids: Any) -> tuple[Any, ...]:
            result = self.model(input_ids=input_ids.long(), attention_mask=input_mask.long(),
                                token_type_ids=segment_ids.long())
            return tuple(getattr(result, name) for name in outputs)

    return OurInputs()


def _serving_imports() -> tuple[Any, Any]:
    """torch and transformers, which the ONNX export needs (the `serving` extra)."""
    try:
        import onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        import onnxruntime  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        import torch  # pylint: disable=import-outside-toplevel
        import transformers  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(f"--format=onnx needs {error.name}: pip install 'albert-jax[serving]'"
                          ) from None
    return torch, transformers
