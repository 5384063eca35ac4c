"""The token heads on each runtime: SPLADE's and bge-m3's sparse vectors,
bge-m3's ColBERT vectors and the dense vector from one pass, equal to the
references (``data/tiny-models-2/reference.json``: sentence-transformers'
``SparseEncoder`` and FlagEmbedding's BGE-M3 math, README.md beside it),
numpy's heads in numpy and onnxruntime's in its graph (extra outputs of the
one session), and an onnxruntime model holding no numpy copy of the weights.

Sparse values are compared as |Δ| ≤ 1e-5 of the row's largest weight, as
the CPU lane's test does; indices exactly; ColBERT cosine ≥ 0.99999."""

from __future__ import annotations

import gc
import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_models import model as runtime
from synapse_models.outputs import OutputName
from synapse_models.testing import DATA

TINY = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
MIN_COSINE = 0.99999
SPARSE_DELTA = 1e-5


@pytest.fixture(params=runtime.RUNTIMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    if request.param == "onnxruntime":
        pytest.importorskip("onnxruntime")
    return str(request.param)


def computed(
    name: str, runtime_name: str, cache: Path, kinds: list[OutputName]
) -> tuple[runtime.Model, list[list[Any]]]:
    model = runtime.load(str(TINY / name), runtime=runtime_name, cache_dir=str(cache))  # type: ignore[arg-type]
    most = model.layout.max_tokens - model.framing.single
    sequences = [model.tokenizer.encode(t)[:most] for t in REFERENCE[name]["texts"]]
    return model, model.outputs(sequences, kinds)


def assert_sparse_equal(got: list[Any], expected: list[dict[str, Any]]) -> None:
    for (indices, values), want in zip(got, expected, strict=True):
        assert indices == want["indices"]
        scale = max((abs(v) for v in want["values"]), default=1.0)
        assert np.allclose(values, want["values"], rtol=0, atol=SPARSE_DELTA * scale)


def min_cosine(got: list[Any], expected: list[Any]) -> float:
    worst = 1.0
    for a, b in zip(got, expected, strict=True):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        worst = min(worst, float(cos.min()))
    return worst


def test_splade_sparse_vectors_equal_the_reference(runtime_name: str, tmp_path: Path) -> None:
    _, (sparse,) = computed("splade", runtime_name, tmp_path, ["sparse"])
    assert_sparse_equal(sparse, REFERENCE["splade"]["sparse_vectors"])


def test_m3_dense_sparse_and_colbert_equal_the_reference(runtime_name: str, tmp_path: Path) -> None:
    ref = REFERENCE["m3-multi"]
    _, (dense, sparse, multi) = computed(
        "m3-multi", runtime_name, tmp_path, ["dense", "sparse", "multi"]
    )
    assert min_cosine([dense], [ref["vectors"]]) >= MIN_COSINE
    assert_sparse_equal(sparse, ref["sparse_weights"])
    assert min_cosine(multi, ref["colbert_vectors"]) >= MIN_COSINE


def test_last_hidden_states_agree_across_runtimes(tmp_path: Path) -> None:
    """A folder without a ColBERT head: ``multi`` is every real token's last
    hidden state (no reference has them: the runtimes are checked against
    each other, and the row lengths against the token counts)."""
    pytest.importorskip("onnxruntime")
    model, (numpy_rows,) = computed("splade", "numpy", tmp_path, ["multi"])
    _, (onnx_rows,) = computed("splade", "onnxruntime", tmp_path, ["multi"])
    most = model.layout.max_tokens - model.framing.single
    lengths = [
        min(len(model.tokenizer.encode(t)), most) + model.framing.single
        for t in REFERENCE["splade"]["texts"]
    ]
    assert [len(r) for r in numpy_rows] == lengths
    assert min_cosine(onnx_rows, numpy_rows) >= MIN_COSINE


def large_arrays(root: object) -> list[np.ndarray[Any, Any]]:
    """The numpy arrays of over 1,000 values reachable from ``root`` through
    objects' references (modules, classes and functions' globals not followed)."""
    seen: set[int] = set()
    stack: list[object] = [root]
    found: list[np.ndarray[Any, Any]] = []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            if obj.size > 1000:
                found.append(obj)
            continue
        stack.extend(gc.get_referents(obj))
    return found


def test_an_onnxruntime_model_holds_no_numpy_weights(tmp_path: Path) -> None:
    """Its token heads are in the graph: the session holds the weights, the
    model no numpy copy (the numpy model holds them, which shows the walk
    finds them)."""
    pytest.importorskip("onnxruntime")
    for name in ("m3-multi", "splade"):
        onnx_model, _ = computed(name, "onnxruntime", tmp_path, ["sparse", "multi"])
        assert large_arrays(onnx_model) == []
        numpy_model, _ = computed(name, "numpy", tmp_path, ["sparse", "multi"])
        assert large_arrays(numpy_model)


def test_the_graph_has_the_token_heads_as_outputs(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import onnx

    model, _ = computed("m3-multi", "onnxruntime", tmp_path, ["dense"])
    assert model.graph is not None
    names = [o.name for o in onnx.load(str(model.graph)).graph.output]
    assert names == ["output", "hidden", "sparse", "colbert"]
