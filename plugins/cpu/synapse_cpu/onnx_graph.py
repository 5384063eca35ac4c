"""The same encoder as an ONNX graph, built from the safetensors weights.

No torch and no download: the graph is written node by node with the
``onnx`` package from the weights :mod:`synapse_cpu.architectures` arranges,
and cached on disk under the weights' sha256 and what the graph ends in
(pooling, normalisation or head), so a worker builds it once per checkpoint.
Inputs are ``input_ids`` (int64), ``token_type_ids`` (int64, for an
architecture with token types) and ``attention_mask`` (float32), all (rows,
width); the output ``output`` is (rows, hidden) pooled vectors, or (rows,) a
cross-encoder's logits, exactly as the numpy forward pass computes them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .bert import MAX_POOL_FILL, EncoderWeights

#: bump when the graph changes: cached files of another version are not reused
GRAPH_VERSION = 2
OPSET = 17  # LayerNormalization


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "synapse" / "onnx"


def graph_name(weights: EncoderWeights, sha256: str) -> str:
    """The cached file's name: the same weights pooled another way are another graph."""
    end: str = "head" if weights.head is not None else weights.pooling
    if weights.head is None and weights.normalize:
        end += "-norm"
    return f"{sha256}-{end}-v{GRAPH_VERSION}.onnx"


def cached_graph(weights: EncoderWeights, sha256: str, cache_dir: Path) -> Path:
    """The graph file for weights of ``sha256``, built and cached if it is not there yet."""
    path = cache_dir / graph_name(weights, sha256)
    if path.is_file():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    data = build_graph(weights).SerializeToString()
    # Written aside, then renamed: a concurrent worker never reads half a file.
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def build_graph(weights: EncoderWeights) -> Any:
    """The ``onnx.ModelProto`` of the encoder with its pooling (and
    normalisation) or its classification head."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = weights.config
    head = c.hidden // c.heads
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = iter(range(1 << 30))

    def const(value: np.ndarray[Any, Any], name: str | None = None) -> str:
        name = name or f"c{next(counter)}"
        # (np.ascontiguousarray would make a scalar one-dimensional)
        inits.append(numpy_helper.from_array(np.require(value, requirements="C"), name))
        return name

    def op(kind: str, *inputs: str, **attrs: Any) -> str:
        out = f"t{next(counter)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def i64(*values: int) -> str:
        return const(np.array(values, dtype=np.int64))

    def f32(value: float) -> str:
        return const(np.array(value, dtype=np.float32))

    def layer_norm(x: str, g: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> str:
        return op("LayerNormalization", x, const(g), const(b), axis=-1, epsilon=c.eps)

    def linear(x: str, w: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> str:
        return op("Add", op("MatMul", x, const(w)), const(b))

    # Embeddings: word + position[:width] (+ token type), then a layer norm.
    width = op("Gather", op("Shape", "input_ids"), i64(1), axis=0)
    positions = op("Slice", const(weights.position), i64(0), width, i64(0))
    x = op("Add", op("Gather", const(weights.word), "input_ids", axis=0), positions)
    if weights.token_type is not None:
        x = op("Add", x, op("Gather", const(weights.token_type), "token_type_ids", axis=0))
    x = layer_norm(x, weights.ln_g, weights.ln_b)
    # Padding keys get the float32 minimum added to their scores: softmax gives them 0.
    bias = op(
        "Mul",
        op("Sub", f32(1.0), "attention_mask"),
        f32(float(np.finfo(np.float32).min)),
    )
    bias = op("Unsqueeze", bias, i64(1, 2))  # (rows, 1, 1, width)
    if weights.relative is not None:
        # MPNet: weight[buckets[:width, :width]] as (1, heads, width, width), for every layer.
        stops = op("Concat", width, width, axis=0)
        window = op("Slice", const(weights.relative.buckets), i64(0, 0), stops, i64(0, 1))
        relative = op("Gather", const(weights.relative.weight), window, axis=0)
        relative = op("Unsqueeze", op("Transpose", relative, perm=[2, 0, 1]), i64(0))
        bias = op("Add", relative, bias)
    split_heads = i64(0, 0, c.heads, head)
    merge_heads = i64(0, 0, c.hidden)
    scale = f32(1.0 / float(np.sqrt(head)))
    sqrt_half, one, half = f32(float(np.sqrt(0.5))), f32(1.0), f32(0.5)
    for layer in weights.layers:
        qkv = linear(x, layer.qkv_w, layer.qkv_b)
        parts = [f"t{next(counter)}" for _ in range(3)]
        nodes.append(
            helper.make_node("Split", [qkv, i64(c.hidden, c.hidden, c.hidden)], parts, axis=-1)
        )
        q, k, v = (op("Reshape", part, split_heads) for part in parts)
        q = op("Transpose", q, perm=[0, 2, 1, 3])
        k = op("Transpose", k, perm=[0, 2, 3, 1])
        v = op("Transpose", v, perm=[0, 2, 1, 3])
        scores = op("Add", op("Mul", op("MatMul", q, k), scale), bias)
        probs = op("Softmax", scores, axis=-1)
        context = op("Transpose", op("MatMul", probs, v), perm=[0, 2, 1, 3])
        context = op("Reshape", context, merge_heads)
        attended = linear(context, layer.out_w, layer.out_b)
        x = layer_norm(op("Add", x, attended), layer.ln1_g, layer.ln1_b)
        up = linear(x, layer.up_w, layer.up_b)
        cdf = op("Mul", op("Add", op("Erf", op("Mul", up, sqrt_half)), one), half)
        down = linear(op("Mul", up, cdf), layer.down_w, layer.down_b)
        x = layer_norm(op("Add", x, down), layer.ln2_g, layer.ln2_b)
    mask3 = op("Unsqueeze", "attention_mask", i64(2))
    zero = const(np.array(0, dtype=np.int64))  # a scalar index: the axis goes
    first = op("Gather", x, zero, axis=1)  # (rows, hidden): the first token
    if weights.head is not None:
        h = weights.head
        dense = op("Tanh", linear(first, h.dense_w, h.dense_b))
        logits = linear(dense, h.out_w, h.out_b)
        nodes.append(helper.make_node("Squeeze", [logits, i64(1)], ["output"]))
        shape: list[Any] = ["rows"]
    else:
        pooled = _pooled(weights, op, i64, f32, x, first, mask3)
        if weights.normalize:
            norm = op("Max", op("ReduceL2", pooled, axes=[1], keepdims=1), f32(1e-12))
            nodes.append(helper.make_node("Div", [pooled, norm], ["output"]))
        else:
            nodes.append(helper.make_node("Identity", [pooled], ["output"]))
        shape = ["rows", c.hidden]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["rows", "width"])]
    if weights.token_type is not None:
        inputs.append(
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["rows", "width"])
        )
    inputs.append(
        helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["rows", "width"])
    )
    graph = helper.make_graph(
        nodes,
        "synapse-encoder",
        inputs,
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="synapse-cpu"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _pooled(
    weights: EncoderWeights,
    op: Callable[..., str],
    i64: Callable[..., str],
    f32: Callable[[float], str],
    x: str,
    first: str,
    mask3: str,
) -> str:
    """(rows, hidden): the pooling of ``x`` (rows, width, hidden) over ``mask3``."""
    if weights.pooling == "cls":
        return first
    if weights.pooling == "mean":
        summed = op("ReduceSum", op("Mul", x, mask3), i64(1), keepdims=0)
        return op("Div", summed, op("ReduceSum", mask3, i64(1), keepdims=0))
    if weights.pooling == "max":
        kept = op("Where", op("Greater", mask3, f32(0.0)), x, f32(float(MAX_POOL_FILL)))
        return op("ReduceMax", kept, axes=[1], keepdims=0)
    # The last token of each right-padded row: a one-hot weight at length - 1.
    last = op("Sub", op("ReduceSum", "attention_mask", i64(1), keepdims=1), f32(1.0))
    width = op("Cast", op("Gather", op("Shape", "attention_mask"), i64(1), axis=0), to=1)
    steps = op("Range", f32(0.0), width, f32(1.0))
    onehot = op("Cast", op("Equal", steps, last), to=1)
    return op("ReduceSum", op("Mul", x, op("Unsqueeze", onehot, i64(2))), i64(1), keepdims=0)
