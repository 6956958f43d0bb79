"""The torch.onnx graph of our HuggingFace export, made for ONNX Runtime's CPU kernels.

torch.onnx hands the shared layer's weights (SPEC 3.3: one layer, applied num_hidden_layers
times) to each of its uses through an `Identity` node, so a MatMul reads an Identity's output
instead of an initializer: ONNX Runtime's dynamic quantization (which quantizes a MatMul whose
weight is an initializer) then leaves the encoder in float32. And ONNX Runtime's transformer
optimizer, which fuses each use of the layer into Attention, SkipLayerNormalization and
FastGelu nodes, writes a new packed QKV weight for every fused Attention: the file grows from
one copy of the layer to num_hidden_layers copies. `for_onnxruntime` undoes both:

  1. `read_weights_directly`: every Identity of an initializer removed, its readers rewired to
     the initializer itself; every Gemm (the pooler, the classifier) as MatMul + Add, the form
     the quantizer quantizes.
  2. `_residual_branch_first`: the residual Add before each LayerNormalization takes the
     sublayer's output first. The optimizer's attention pattern looks for the projection at the
     first Add input it meets; in the first layer both inputs are Adds (the embedding projection,
     SPEC 3.1, is the residual there), so without this the first attention stays unfused.
  3. the optimizer (model_type bert, our head count and width): Attention, SkipLayerNormalization,
     FastGelu / BiasGelu, EmbedLayerNormalization.
  4. `share_equal_initializers`: initializers with equal bytes kept once, every node reading the
     one copy: the fused layers' packed QKV weights are all equal, so the file holds one.
"""
from __future__ import annotations

import collections
import hashlib
import logging
from typing import Any

import numpy as np

from albert_jax.model import ModelConfig

# The fused operators ONNX Runtime's CPU kernels run (com.microsoft domain), counted by tests.
FUSED_OPS = ("Attention", "SkipLayerNormalization", "FastGelu", "BiasGelu", "Gelu",
             "EmbedLayerNormalization")


def for_onnxruntime(model: Any, model_config: ModelConfig) -> Any:
    """`model` (an onnx.ModelProto from torch.onnx of HF's ALBERT) fused for ONNX Runtime with
    the shared layer's weights stored once (module docstring). Returns a new ModelProto."""
    from onnxruntime.transformers import optimizer  # pylint: disable=import-outside-toplevel
    from onnxruntime.transformers.fusion_options import (  # pylint: disable=import-outside-toplevel
        FusionOptions,
    )

    model = _residual_branch_first(read_weights_directly(model))
    # The optimizer logs every pattern it tried and missed at WARNING; its result is checked by
    # counting fused nodes (tests), not by its log.
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        optimized = optimizer.optimize_model(
            model, model_type="bert", num_heads=model_config.num_attention_heads,
            hidden_size=model_config.hidden_size, opt_level=0,
            optimization_options=FusionOptions("bert"))
        optimized.topological_sort()
    finally:
        logging.disable(previous)
    fused = optimized.model
    if not any(opset.domain == "com.microsoft" for opset in fused.opset_import):
        fused.opset_import.add(domain="com.microsoft", version=1)  # the fused operators' domain
    return share_equal_initializers(fused)


def read_weights_directly(model: Any) -> Any:
    """A copy of `model` in which no node reads a weight through an Identity (its readers read
    the initializer), and every Gemm is a MatMul (+ Add of its bias) on a transposed-as-needed
    initializer: the form ONNX Runtime's dynamic quantization quantizes."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    model = _copy(model)
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    source = {node.output[0]: node.input[0] for node in graph.node
              if node.op_type == "Identity" and node.input[0] in initializers}
    graph_outputs = {output.name for output in graph.output}
    nodes = []
    for node in graph.node:
        if node.op_type == "Identity" and node.output[0] in source \
                and node.output[0] not in graph_outputs:
            continue
        for position, name in enumerate(node.input):
            node.input[position] = source.get(name, name)
        if node.op_type == "Gemm" and _is_plain_gemm(node, initializers):
            nodes += _gemm_as_matmul(node, initializers, graph, onnx, numpy_helper)
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _is_plain_gemm(node: Any, initializers: dict[str, Any]) -> bool:
    """A Gemm y = x @ B(^T) + c with alpha = beta = 1, x not transposed, B an initializer."""
    attributes = {attribute.name: attribute for attribute in node.attribute}
    return (node.input[1] in initializers
            and ("transA" not in attributes or attributes["transA"].i == 0)
            and all(attributes[name].f == 1.0 for name in ("alpha", "beta") if name in attributes))


def _gemm_as_matmul(node: Any, initializers: dict[str, Any], graph: Any, onnx: Any,
                    numpy_helper: Any) -> list[Any]:
    """MatMul(x, B) (+ Add c) for a plain Gemm; a transposed B stored transposed once."""
    attributes = {attribute.name: attribute.i for attribute in node.attribute
                  if attribute.name in ("transA", "transB")}
    weight = node.input[1]
    if attributes.get("transB", 0):
        transposed = f"{weight}.T"
        if transposed not in initializers:
            array = numpy_helper.to_array(initializers[weight]).T
            tensor = numpy_helper.from_array(np.ascontiguousarray(array), transposed)
            graph.initializer.append(tensor)
            initializers[transposed] = tensor
        weight = transposed
    if len(node.input) < 3 or not node.input[2]:
        return [onnx.helper.make_node("MatMul", [node.input[0], weight], [node.output[0]],
                                      name=node.name)]
    product = f"{node.output[0]}.matmul"
    return [onnx.helper.make_node("MatMul", [node.input[0], weight], [product],
                                  name=f"{node.name}.matmul"),
            onnx.helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                  name=f"{node.name}.bias")]


def _residual_branch_first(model: Any) -> Any:
    """`model` with each Add that feeds a LayerNormalization reading its single-use input (the
    sublayer's projection) first and the residual stream (read by the next sublayer's MatMuls
    too) second; Add is commutative, so the values do not change."""
    graph = model.graph
    readers = collections.Counter(name for node in graph.node for name in node.input)
    producer = {output: node for node in graph.node for output in node.output}
    for node in graph.node:
        add = producer.get(node.input[0]) if node.op_type == "LayerNormalization" else None
        if add is not None and add.op_type == "Add" and \
                readers[add.input[0]] > readers[add.input[1]]:
            add.input[0], add.input[1] = add.input[1], add.input[0]
    return model


def share_equal_initializers(model: Any) -> Any:
    """`model` with initializers of equal type, shape and bytes stored once, every reader of a
    copy reading the one kept (the first)."""
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    graph = model.graph
    kept: dict[tuple[int, tuple[int, ...], str], str] = {}
    renamed, tensors = {}, []
    for tensor in graph.initializer:
        digest = hashlib.sha256(numpy_helper.to_array(tensor).tobytes()).hexdigest()
        key = (tensor.data_type, tuple(tensor.dims), digest)
        if key in kept:
            renamed[tensor.name] = kept[key]
        else:
            kept[key] = tensor.name
            tensors.append(tensor)
    del graph.initializer[:]
    graph.initializer.extend(tensors)
    for node in graph.node:
        for position, name in enumerate(node.input):
            node.input[position] = renamed.get(name, name)
    return model


def op_counts(model: Any) -> dict[str, int]:
    """{operator type: number of nodes} of `model`'s graph."""
    return dict(collections.Counter(node.op_type for node in model.graph.node))


def weight_bytes(model: Any) -> int:
    """The bytes of `model`'s initializers (what its file mostly holds)."""
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    return sum(numpy_helper.to_array(tensor).nbytes for tensor in model.graph.initializer)


def _copy(model: Any) -> Any:
    import onnx  # pylint: disable=import-outside-toplevel

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy
