"""A run as a LiteRT (TensorFlow Lite) model for phones: `albert-jax export --format=litert`.

Our Flax model, the weights inside, goes through jax2tf (a TF function calling the model's
StableHLO) and the TFLite converter with `Optimize.DEFAULT`: int8 weights, float activations
(dynamic-range quantization, the converter's default for a model with no calibration data);
ai-edge-litert's interpreter runs the file.

The shape is fixed: [1, LENGTH] (batch 1, length min(LENGTH, max_position_embeddings)), pad
every input to it. The TFLite converter (TensorFlow 2.21) refuses a symbolic batch or length:
jax2tf converts the model with symbolic dimensions, but the converter's StableHLO legalization
stops at the first gather with a dynamic operand ("'mhlo.gather' op Dynamic shaped operand is
not supported", the [CLS] gather of albert_jax/model/layers.py gather_positions). Multiple
choice, whose number of choices the served model does not know, has no LiteRT export.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

LENGTH = 128  # the fixed sequence length of a LiteRT export (at most max_position_embeddings)


def sequence_length(max_position_embeddings: int) -> int:
    """The fixed length of the LiteRT export of a model with `max_position_embeddings`."""
    return min(LENGTH, max_position_embeddings)


def litert_bytes(served: Any) -> bytes:
    """`served` (serving.ServedModel) as a .tflite file with int8 weights, inputs int32
    [1, sequence_length] in serving.INPUTS order, outputs float32 in its head's order."""
    tf, jax2tf = _litert_imports()
    params = jax.tree.map(jnp.asarray, served.params)  # slicing by a traced length needs jnp
    model = dataclasses.replace(served, params=params)
    function = tf.function(jax2tf.convert(model.apply, with_gradient=False), autograph=False)
    spec = tf.TensorSpec((1, sequence_length(served.model_config.max_position_embeddings)),
                         tf.int32)
    concrete = function.get_concrete_function(spec, spec, spec)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], function)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights
    return bytes(converter.convert())


def _litert_imports() -> tuple[Any, Any]:
    """tensorflow and jax2tf, which the LiteRT export needs (the `litert` extra)."""
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        from jax.experimental import jax2tf  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(f"--format=litert needs {error.name}: pip install "
                          "'albert-jax[litert]'") from None
    return tf, jax2tf
