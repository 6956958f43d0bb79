"""int8 ONNX: ONNX Runtime's dynamic quantization of an export (`--quantize=int8`).

The scheme is the one ONNX Runtime recommends for transformer models on CPU, x86-64 and ARM64
alike: dynamic quantization, weights int8 (symmetric, one scale per tensor) stored in the file,
activations quantized to uint8 at run time from each tensor's own range (no calibration set).
In the graph: DynamicQuantizeLinear + MatMulInteger (which ONNX Runtime fuses into
DynamicQuantizeMatMul), QAttention for a fused Attention and QEmbedLayerNormalization for the
embedding tables. U8S8 is what ORT's int8 GEMMs run natively: VNNI / AVX2 on x86-64, the
dot-product instructions on ARM64; static QDQ (S8S8) needs a calibration set and is what ORT
recommends for convolutional models and other execution providers.

Every weight is quantized once: the quantizer keeps one quantized copy per initializer name,
and the fused graph (onnx_graph.py) has one initializer per shared weight, so the shared layer
used num_hidden_layers times is one int8 copy.
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from albert_jax.convert import onnx_graph

SCHEME = ("onnxruntime dynamic U8S8: int8 weights (symmetric, per tensor), uint8 activations "
          "quantized at run time")
# Float operators that carry weights: none of them is left in an int8 graph.
FLOAT_WEIGHT_OPS = ("MatMul", "Gemm", "Attention", "EmbedLayerNormalization")
QUANTIZED_OPS = ("MatMulInteger", "QAttention", "QEmbedLayerNormalization", "DequantizeLinear")


def quantize_int8(model: Any) -> tuple[Any, dict[str, Any]]:
    """`model` (an onnx.ModelProto of our export, fused or plain) with every weight-carrying
    operator quantized to int8 (module docstring). Returns (the quantized ModelProto, what was
    quantized: {"scheme", "operators": {quantized type: count}, "float_operators_left":
    {type: count}})."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnxruntime.quantization import (  # pylint: disable=import-outside-toplevel
        QuantType,
        quantize_dynamic,
    )

    model = onnx_graph.share_equal_initializers(onnx_graph.read_weights_directly(model))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "int8.onnx")
        # Fused nodes (com.microsoft) have no ONNX shape inference: their outputs' type is
        # float32, which DefaultTensorType says. The quantizer's advice to pre-process (shape
        # inference and constant folding, for static quantization) is a WARNING each call.
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(model, path, weight_type=QuantType.QInt8,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            logging.disable(previous)
        quantized = onnx.load(path)
    counts = onnx_graph.op_counts(quantized)
    return quantized, {
        "scheme": SCHEME,
        "operators": {name: counts[name] for name in QUANTIZED_OPS if name in counts},
        "float_operators_left": float_weight_ops(quantized),
    }


def float_weight_ops(model: Any) -> dict[str, int]:
    """{type: count} of `model`'s float operators that read a weight: MatMul and Gemm with an
    initializer input, every Attention and EmbedLayerNormalization (a MatMul of two activations,
    attention's QK^T in a plain graph, has no weight to quantize)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in FLOAT_WEIGHT_OPS and (
                node.op_type not in ("MatMul", "Gemm")
                or any(name in initializers for name in node.input)):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
