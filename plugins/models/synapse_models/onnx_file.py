"""A model as an ONNX file: its family's body and the folder's ending, cached.

What follows the body (pooling, Dense modules, Normalize, or a
classification head) is written here, shared by every family, computing what
:mod:`synapse_models.heads` computes in numpy. The file is cached on disk
under the weights' sha256, a digest of the folder's files that shape it and
what the graph ends in, so a worker builds it
once per checkpoint.

Inputs are ``input_ids`` (int64), ``token_type_ids`` (int64, for a family
with token types) and ``attention_mask`` (float32), all (rows, width); the
output ``output`` is (rows, dims) vectors, (rows,) one-label logits or
(rows, labels) logits. An embedder's graph has more outputs, which one run
computes with ``output`` (:mod:`synapse_models.outputs` reads them):
``hidden``, the last hidden state (rows, width, hidden), and the folder's
token heads: ``sparse`` (SPLADE's largest ``relu(logit)`` per vocabulary
entry over the real tokens (rows, vocab), or bge-m3's ``relu`` token weights
(rows, width)) and ``colbert`` (bge-m3's normalised vectors of every token
but the first (rows, width - 1, dims)).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .arranged import Weights
from .errors import ModelFilesError
from .graph import Graph
from .heads import MAX_POOL_FILL, Classifier, Embedding, Ending
from .token_heads import M3Heads, SpladeHead

#: bump when the graphs change: cached files of another version are not reused
GRAPH_VERSION = 3
OPSET = 17  # LayerNormalization
#: weights past this many bytes go to a data file beside the graph (protobuf's
#: limit is 2 GB for the whole message)
EXTERNAL_BYTES = 1 << 30
log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "synapse" / "onnx"


def usable_cache_dir(root: Path, *folders: str) -> Path:
    """``root`` when a file can be written in each of ``folders`` under it
    (made if missing), else a temporary folder (:func:`fallback_cache_dir`),
    logged once per process naming ``root`` and why. Raises
    :class:`ModelFilesError` naming both when neither can be written."""
    try:
        _probe(root, folders)
        return root
    except OSError as exc:
        reason = exc.strerror or str(exc)
    try:
        fallback = fallback_cache_dir()
        _probe(fallback, folders)
    except OSError as exc:
        raise ModelFilesError(
            str(root),
            f"the graph cache cannot be written ({reason}), nor a folder in the temporary "
            f"folder {tempfile.gettempdir()} ({exc.strerror or exc}): set options.cache_dir "
            "(or XDG_CACHE_HOME) to a writable folder",
        ) from None
    fallback_notice(str(root), reason, str(fallback))
    return fallback


def _probe(root: Path, folders: tuple[str, ...]) -> None:
    """Makes each folder under ``root`` and writes (and removes) a file in it."""
    for name in folders or ("",):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, suffix=".probe")
        os.close(fd)
        os.unlink(probe)


def fallback_cache_dir() -> Path:
    """Where graphs go when the cache folder cannot be written: this user's
    ``synapse-onnx-<uid>`` in the temporary folder (``TMPDIR``), made
    private, so this user's workers share what they build; a folder of that
    name that another user owns or others may write is not trusted, and a
    fresh one is made instead."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"synapse-onnx-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        stat = folder.lstat()
        mine = folder.is_dir() and not folder.is_symlink() and stat.st_uid == uid
        if mine and not stat.st_mode & 0o022:
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="synapse-onnx-"))


@functools.cache
def fallback_notice(root: str, reason: str, fallback: str) -> None:
    """Once per process and folder: the cache could not be written, graphs go elsewhere."""
    log.warning(
        "synapse-models: the graph cache %s cannot be written (%s); graphs are built in "
        "%s instead (set options.cache_dir or XDG_CACHE_HOME to keep them)",
        root,
        reason,
        fallback,
    )


def graph_name(weights: Weights, key: str) -> str:
    """The cached file's name: ``key`` (:func:`synapse_models.files.graph_key`:
    the weights and the folder's files that shape the graph), and what the
    graph ends in (the same weights ending another way are another graph)."""
    return f"{key}-{weights.end}{weights.token_end}-v{GRAPH_VERSION}.onnx"


def cached_graph(weights: Weights, key: str, cache_dir: Path) -> Path:
    """The graph file of ``key``, built and cached if it is not there yet.

    A graph whose weights pass :data:`EXTERNAL_BYTES` keeps them in a data
    file beside it (``<name>.onnx.data``), as protobuf cannot hold a message
    past 2 GB (a 0.6B model is 2.4 GB in float32); smaller ones are one file.
    """
    path = cache_dir / graph_name(weights, key)
    if path.is_file():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = build_graph(weights, check=False)
    if initializer_bytes(model) > EXTERNAL_BYTES:
        save_external(model, path)
        return path
    import onnx

    onnx.checker.check_model(model)
    data = model.SerializeToString()
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


def initializer_bytes(model: Any) -> int:
    """The bytes of ``model``'s initializers (its weights)."""
    return sum(len(t.raw_data) for t in model.graph.initializer)


def save_external(model: Any, path: Path) -> None:
    """``model`` saved as ``path`` with its weights in ``<path name>.data``
    beside it, both written aside and renamed, the data file first: a
    concurrent worker never finds the ``.onnx`` before the data it names.
    Checked from the file (the checker cannot take a message past 2 GB)."""
    import onnx

    data = f"{path.name}.data"
    aside = Path(tempfile.mkdtemp(dir=path.parent, prefix=".graph-"))
    try:
        onnx.save_model(
            model,
            str(aside / path.name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data,
            size_threshold=1024,
        )
        del model
        onnx.checker.check_model(str(aside / path.name))
        os.replace(aside / data, path.with_name(data))
        os.replace(aside / path.name, path)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def build_graph(weights: Weights, check: bool = True) -> Any:
    """The ``onnx.ModelProto`` of the family's body and the folder's ending;
    ``check``: run onnx's checker on it (only a message under 2 GB can be)."""
    import onnx
    from onnx import TensorProto, helper

    g = Graph()
    hidden = weights.family.graph(g, weights.body)
    shape = _finish(g, weights.ending, hidden, weights.dims)
    rows_width = ["rows", "width"]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, rows_width)]
    if weights.family.token_types(weights.body):
        inputs.append(
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, rows_width)
        )
    inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, rows_width))
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)]
    if isinstance(weights.ending, Embedding):
        for name, dims in _token_outputs(g, weights, hidden):
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
    graph = helper.make_graph(g.nodes, "synapse-encoder", inputs, outputs, g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="synapse-models"
    )
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def _token_outputs(g: Graph, weights: Weights, x: str) -> list[tuple[str, list[Any]]]:
    """Writes ``hidden`` and the token heads' outputs from the token vectors
    ``x``, computing what :mod:`synapse_models.token_heads` does in numpy;
    their names and shapes."""
    g.nodes.append(g.helper.make_node("Identity", [x], ["hidden"]))
    found: list[tuple[str, list[Any]]] = [("hidden", ["rows", "width", "hidden"])]
    heads = weights.tokens
    if isinstance(heads, SpladeHead):
        h = g.activate(g.linear(x, heads.dense_w, heads.dense_b), heads.activation)
        h = g.layer_norm(h, heads.norm_g, heads.norm_b, heads.norm_eps)
        logits = g.linear(h, heads.decoder_w, heads.decoder_b)  # (rows, width, vocab)
        mask3 = g.op("Unsqueeze", "attention_mask", g.i64(2))
        kept = g.op("Mul", g.op("Relu", logits), mask3)
        g.nodes.append(g.helper.make_node("ReduceMax", [kept], ["sparse"], axes=[1], keepdims=0))
        found.append(("sparse", ["rows", int(heads.decoder_w.shape[1])]))
    if isinstance(heads, M3Heads) and heads.sparse_w is not None:
        weights_ = g.op("Relu", g.linear(x, heads.sparse_w, heads.sparse_b))
        g.nodes.append(g.helper.make_node("Squeeze", [weights_, g.i64(2)], ["sparse"]))
        found.append(("sparse", ["rows", "width"]))
    if isinstance(heads, M3Heads) and heads.colbert_w is not None:
        rest = g.op("Slice", x, g.i64(1), g.i64(np.iinfo(np.int64).max), g.i64(1))
        vectors = g.linear(rest, heads.colbert_w, heads.colbert_b)
        norm = g.op("Max", g.op("ReduceL2", vectors, axes=[-1], keepdims=1), g.f32(1e-12))
        g.nodes.append(g.helper.make_node("Div", [vectors, norm], ["colbert"]))
        found.append(("colbert", ["rows", "tokens", int(heads.colbert_w.shape[1])]))
    return found


def _finish(g: Graph, ending: Ending, x: str, dims: int) -> list[Any]:
    """Writes ``output`` from the token vectors ``x``; its shape."""
    mask3 = g.op("Unsqueeze", "attention_mask", g.i64(2))
    zero = g.const(np.array(0, dtype=np.int64))  # a scalar index: the axis goes
    first = g.op("Gather", x, zero, axis=1)  # (rows, hidden): the first token
    if isinstance(ending, Classifier):
        h = ending
        pooled = first if h.pooling == "cls" else _pooled(g, h.pooling, x, first, mask3)
        dense = pooled
        if h.dense_w is not None:
            dense = g.activate(g.linear(pooled, h.dense_w, h.dense_b), h.activation)
        if h.norm_g is not None:
            dense = g.layer_norm(dense, h.norm_g, h.norm_b, h.norm_eps)
        logits = g.linear(dense, h.out_w, h.out_b)
        if h.out_w.shape[1] == 1:
            g.nodes.append(g.helper.make_node("Squeeze", [logits, g.i64(1)], ["output"]))
            return ["rows"]
        g.nodes.append(g.helper.make_node("Identity", [logits], ["output"]))
        return ["rows", int(h.out_w.shape[1])]
    assert isinstance(ending, Embedding)
    pooled = _pooled(g, ending.pooling, x, first, mask3)
    for module in ending.dense:
        pooled = g.activate(g.linear(pooled, module.weight, module.bias), module.activation)
    if ending.normalize:
        norm = g.op("Max", g.op("ReduceL2", pooled, axes=[1], keepdims=1), g.f32(1e-12))
        g.nodes.append(g.helper.make_node("Div", [pooled, norm], ["output"]))
    else:
        g.nodes.append(g.helper.make_node("Identity", [pooled], ["output"]))
    return ["rows", dims]


def _pooled(g: Graph, pooling: str, x: str, first: str, mask3: str) -> str:
    """(rows, hidden): the pooling of ``x`` (rows, width, hidden) over ``mask3``."""
    if pooling == "cls":
        return first
    if pooling == "mean":
        summed = g.op("ReduceSum", g.op("Mul", x, mask3), g.i64(1), keepdims=0)
        return g.op("Div", summed, g.op("ReduceSum", mask3, g.i64(1), keepdims=0))
    if pooling == "max":
        kept = g.op("Where", g.op("Greater", mask3, g.f32(0.0)), x, g.f32(float(MAX_POOL_FILL)))
        return g.op("ReduceMax", kept, axes=[1], keepdims=0)
    # The last token of each right-padded row: a one-hot weight at length - 1.
    last = g.op("Sub", g.op("ReduceSum", "attention_mask", g.i64(1), keepdims=1), g.f32(1.0))
    width = g.op("Cast", g.op("Gather", g.op("Shape", "attention_mask"), g.i64(1), axis=0), to=1)
    steps = g.op("Range", g.f32(0.0), width, g.f32(1.0))
    onehot = g.op("Cast", g.op("Equal", steps, last), to=1)
    return g.op(
        "ReduceSum", g.op("Mul", x, g.op("Unsqueeze", onehot, g.i64(2))), g.i64(1), keepdims=0
    )


#: bump when the float16 conversion changes: cached files of another version are not reused
FP16_VERSION = 1
#: the operators a float16 graph keeps in float32, with casts around them:
#: the reductions whose sums float16's 11-bit mantissa (and its 65,504
#: ceiling) would lose: LayerNormalization's mean and variance, Softmax's
#: exponentials, the pooling's sums and division by the row's length, the
#: normalising ReduceL2 with its Max and Div, and max and last-token pooling's
#: comparisons. The products (MatMul), their bias, GELU (Erf), residual adds,
#: reshapes and transposes run in float16: where the time and the memory go.
FP32_OPS = (
    "LayerNormalization",
    "Softmax",
    "ReduceSum",
    "ReduceMean",
    "ReduceL2",
    "ReduceMax",
    "Max",
    "Div",
    "Range",
    "Equal",
    "Greater",
    "Where",
)


def fp16_name(graph: Path) -> str:
    """The float16 file's name beside its float32 graph."""
    return f"{graph.stem}-fp16-v{FP16_VERSION}.onnx"


def cached_fp16(graph: Path) -> Path:
    """The float16 version of the float32 graph at ``graph``, converted once
    and cached beside it: weights and activations float16, inputs and the
    output float32 (callers feed and read the same arrays as for float32),
    the operators of :data:`FP32_OPS` in float32."""
    path = graph.with_name(fp16_name(graph))
    if path.is_file():
        return path
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    converted = convert_float_to_float16(
        onnx.load(str(graph)), keep_io_types=True, op_block_list=list(FP32_OPS)
    )
    fd, tmp = tempfile.mkstemp(dir=graph.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(converted.SerializeToString())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
