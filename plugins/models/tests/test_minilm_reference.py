"""The forward pass against sentence-transformers' own vectors, on each backend."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from synapse_models import model as runtime
from synapse_models import numerics, packing


def ids_of(model: runtime.Model, reference: dict[str, Any]) -> list[list[int]]:
    return [model.tokenizer.encode(item["text"]) for item in reference["items"]]


def test_token_counts_include_cls_and_sep(
    numpy_model: runtime.Model, reference: dict[str, Any]
) -> None:
    tokenizer = numpy_model.tokenizer
    for item in reference["items"]:
        ids = tokenizer.encode(item["text"])
        assert tokenizer.sequence_length(ids) == item["tokens"], item["text"]
    assert max(item["tokens"] for item in reference["items"]) == 256


def test_the_stored_truncation_is_off(numpy_model: runtime.Model) -> None:
    # tokenizer.json ships truncation at 128 tokens: it must not apply.
    assert len(numpy_model.tokenizer.encode("word " * 300)) == 300


def test_each_text_alone_matches_the_reference(
    model: runtime.Model,
    reference: dict[str, Any],
    reference_vectors: np.ndarray[Any, Any],
    matches_reference: Any,
) -> None:
    vectors = np.stack([model.embed([ids])[0] for ids in ids_of(model, reference)])
    assert vectors.dtype == np.float32 and vectors.shape == (20, 384)
    matches_reference(vectors, reference_vectors)


def test_all_texts_in_one_mixed_call_match_the_reference(
    model: runtime.Model,
    reference: dict[str, Any],
    reference_vectors: np.ndarray[Any, Any],
    matches_reference: Any,
) -> None:
    vectors = model.embed(ids_of(model, reference))
    matches_reference(vectors, reference_vectors)


def test_a_vector_does_not_depend_on_its_batch_mates(
    model: runtime.Model, reference: dict[str, Any]
) -> None:
    sequences = ids_of(model, reference)
    mixed = [sequences[i] for i in (18, 0, 5, 19, 10, 16, 11, 3, 12, 1, 13)]  # 11 lengths
    alone = np.stack([model.embed([ids])[0] for ids in mixed])
    together = model.embed(mixed)
    assert np.abs(alone - together).max() <= 1e-6
    # Padded far past its length in one forward slice, the short text is unchanged.
    packed = packing.pack([sequences[16], sequences[18]], model.framing)
    assert np.abs(model.forward(*packed)[0] - alone[5]).max() <= 1e-6


def test_rerank_is_the_cosine_of_separate_embeddings(model: runtime.Model) -> None:
    encode = model.tokenizer.encode
    query = encode("What is the capital of France?")
    paris = encode("Paris is the capital and most populous city of France.")
    docs = [paris, encode("I love pizza")]
    scores = model.rerank(query, docs)
    vectors = model.embed([query, *docs])
    assert np.allclose(scores, vectors[1:] @ vectors[0], atol=1e-6)
    assert scores[0] > 0.5 > scores[1]
    assert all(-1.0 <= s <= 1.0 for s in scores)


def test_identity_names_model_architecture_pooling_weights_and_runtime(
    model: runtime.Model,
) -> None:
    assert model.identity == f"cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:{model.runtime}"


def test_erf_is_accurate_to_float32() -> None:
    xs = np.linspace(-6, 6, 10_001, dtype=np.float32)
    expected = np.array([math.erf(float(x)) for x in xs])
    # the approximation's bound (1.5e-7) plus float32 rounding
    assert np.abs(numerics.erf(xs.copy()) - expected).max() < 6e-7


def test_onnxruntime_equals_numpy_within_float32_rounding(
    numpy_model: runtime.Model, onnxruntime_model: runtime.Model, reference: dict[str, Any]
) -> None:
    onnx_model = onnxruntime_model
    sequences = ids_of(numpy_model, reference)
    assert np.abs(onnx_model.embed(sequences) - numpy_model.embed(sequences)).max() <= 1e-6


def test_the_onnx_graph_is_cached_under_the_weights_hash(
    model_dir: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnx")
    from synapse_models import files
    from synapse_models import onnx_file as onnx_graph

    located = files.ModelFiles(model_dir, "m", None)
    weights = runtime.read_weights(located, files.check_present(located))
    first = onnx_graph.cached_graph(weights, "a" * 64, tmp_path)
    assert first.name == f"{'a' * 64}-mean-norm-v{onnx_graph.GRAPH_VERSION}.onnx"

    def no_rebuild(_: object, check: bool = True) -> None:
        raise AssertionError("the cached graph was built again")

    monkeypatch.setattr(onnx_graph, "build_graph", no_rebuild)
    assert onnx_graph.cached_graph(weights, "a" * 64, tmp_path) == first
    with pytest.raises(AssertionError, match="built again"):  # other weights: another file
        onnx_graph.cached_graph(weights, "b" * 64, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no partial files


def test_the_default_runtime_is_onnxruntime_and_numpy_the_fallback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert runtime.resolve(None) == "onnxruntime"
    assert runtime.resolve("numpy") == "numpy"
    monkeypatch.setattr(runtime, "onnxruntime_importable", lambda: "onnxruntime cannot be imported")
    with caplog.at_level("WARNING"):
        assert runtime.resolve(None) == "numpy"
    assert [r.getMessage() for r in caplog.records] == [
        "synapse-cpu: onnxruntime cannot be imported; running on numpy (slower)"
    ]


def test_int8_matches_the_reference_at_its_reported_tolerance(
    int8_model: runtime.Model,
    reference: dict[str, Any],
    reference_vectors: np.ndarray[Any, Any],
    close_to_reference: Any,
) -> None:
    tolerance = int8_model.min_cosine
    assert tolerance is not None
    sequences = ids_of(int8_model, reference)
    alone = np.stack([int8_model.embed([ids])[0] for ids in sequences])
    close_to_reference(alone, reference_vectors, tolerance)
    # Activations are quantized per forward slice: batch mates move a vector a
    # little, never past the tolerance.
    close_to_reference(int8_model.embed(sequences), reference_vectors, tolerance)


def test_int8_names_its_conversion_and_is_not_float32(
    int8_model: runtime.Model, onnxruntime_model: runtime.Model, reference: dict[str, Any]
) -> None:
    assert int8_model.identity == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:onnxruntime-int8"
    assert int8_model.identity != onnxruntime_model.identity
    sequences = ids_of(int8_model, reference)
    assert np.abs(int8_model.embed(sequences) - onnxruntime_model.embed(sequences)).max() > 1e-4


def test_the_int8_graph_and_its_loss_are_built_once(
    int8_model: runtime.Model, onnx_cache: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synapse_models import quantize

    loss = quantize.read_loss(onnx_cache, int8_model.int8_key)
    assert loss is not None and loss.min_cosine == int8_model.min_cosine
    assert loss.texts == len(quantize.TEXTS) and loss.min_cosine <= loss.mean_cosine <= 1.0

    def no_rebuild(*_: object) -> None:
        raise AssertionError("the int8 graph was built or measured again")

    monkeypatch.setattr(quantize, "quantize", no_rebuild)
    monkeypatch.setattr(quantize, "measure", no_rebuild)
    again = runtime.load(quantize="int8", cache_dir=str(onnx_cache))
    assert again.min_cosine == int8_model.min_cosine
