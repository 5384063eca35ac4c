"""Sparse and token vectors served through a host and a real ``cpu`` worker:
the SPLADE folder's and bge-m3-style folder's sparse vectors, the ColBERT
vectors, and dense + sparse + multi from one forward pass, equal to the
references (reference.json, README.md beside it says how they were made).

Sparse values are compared as |Δ| ≤ 1e-5 of the row's largest weight (a
float32 reference's own noise is about 1e-6 absolute, so a relative bound
on a weight of 5e-5 would ask for more than float32 holds); indices exactly."""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models.testing import DATA

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]

REFERENCE: dict[str, Any] = json.loads(
    (DATA / "tiny-models-2" / "reference.json").read_text(encoding="utf-8")
)["models"]
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim


RUNTIMES = ["numpy", "onnxruntime"]


def entry(name: str, runtime: str = "numpy") -> dict[str, Any]:
    folder = DATA / "tiny-models-2" / name
    return model_entry(name, transport="cpu", ceiling=512, model_dir=str(folder), runtime=runtime)


def assert_sparse_equal(got: list[synapse.SparseVector], expected: list[dict[str, Any]]) -> None:
    for vector, want in zip(got, expected, strict=True):
        assert vector.indices == want["indices"]
        scale = max((abs(v) for v in want["values"]), default=1.0)
        assert np.allclose(vector.values, want["values"], rtol=0, atol=1e-5 * scale)


def assert_tokens_close(got: list[list[list[float]]], expected: list[Any]) -> None:
    for vectors, want in zip(got, expected, strict=True):
        a, b = np.array(vectors), np.array(want)
        assert a.shape == b.shape
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cos.min() >= 0.99999


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_splade_sparse_vectors_equal_the_sparse_encoders(runtime: str) -> None:
    ref = REFERENCE["splade"]
    with_runtime = config(entry("splade", runtime))
    async with synapse.open_host(with_runtime, plugins=[synapse_cpu.plugin]) as h:
        assert h.catalog.entry("splade", "embed").traits.outputs == {
            synapse.Kind.SPARSE,
            synapse.Kind.MULTI,
        }
        got = await h.embed_sparse(
            "splade", ref["texts"], truncate=True, deadline=synapse.Deadline.after(DEADLINE_S)
        )
        with pytest.raises(synapse.Refused) as refused:
            await h.embed_outputs("splade", ["x"], [synapse.Kind.DENSE])
        assert refused.value.code == "unsupported-output"
        # A plain embed asks for dense vectors: refused the same, before any
        # request (the schema fuzz found it answered as a worker fault).
        with pytest.raises(synapse.Refused) as plain:
            await h.embed("splade", ["x"])
        assert plain.value.code == "unsupported-output"
        assert "computes: multi, sparse" in str(plain.value)
    assert_sparse_equal(got, ref["sparse_vectors"])


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_m3_dense_sparse_and_colbert_come_from_one_request_as_the_references(
    runtime: str,
) -> None:
    ref = REFERENCE["m3-multi"]
    kinds = [synapse.Kind.DENSE, synapse.Kind.SPARSE, synapse.Kind.MULTI]
    with_runtime = config(entry("m3-multi", runtime))
    async with synapse.open_host(with_runtime, plugins=[synapse_cpu.plugin]) as h:
        result = await h.embed_outputs(
            "m3-multi", ref["texts"], kinds, truncate=True, deadline=synapse.Deadline.after(60)
        )
        alone = await h.embed("m3-multi", ref["texts"], truncate=True)
    assert result.dense is not None and result.sparse is not None and result.multi is not None
    assert np.allclose(result.dense, alone.vectors, atol=1e-6)
    dense = np.array(result.dense)
    want = np.array(ref["vectors"])
    assert ((dense * want).sum(1) / np.linalg.norm(want, axis=1)).min() >= 0.99999
    assert_sparse_equal(result.sparse, ref["sparse_weights"])
    assert_tokens_close(result.multi, ref["colbert_vectors"])


def expected_maxsim(query: list[list[float]], document: list[list[float]]) -> float:
    """FlagEmbedding's ``colbert_score`` in float64: each query token's largest
    dot product over the document's tokens (the vectors are normalised),
    summed and divided by the query's token count."""
    q, d = np.array(query, dtype=np.float64), np.array(document, dtype=np.float64)
    return float((q @ d.T).max(axis=1).sum() / len(q))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_colbert_rerank_model_scores_by_maxsim_as_the_reference(runtime: str) -> None:
    """The expected scores come from the reference's ColBERT vectors of the
    texts (the documents are short: none is cut, alone or with the query)."""
    ref = REFERENCE["m3-multi"]
    texts, vectors = ref["texts"], ref["colbert_vectors"]
    short = [i for i in range(1, len(texts)) if ref["tokens"][i] < 20][:5]
    rerank = {**entry("m3-multi", runtime), "name": "m3-rerank", "task": "rerank"}
    async with synapse.open_host(config(rerank), plugins=[synapse_cpu.plugin]) as h:
        assert h.catalog.entry("m3-rerank", "rerank").traits.scorer == "maxsim"
        result = await h.rerank("m3-rerank", texts[0], [texts[i] for i in short])
        with pytest.raises(synapse.Refused) as refused:
            await h.rerank("m3-rerank", texts[0], ["a", texts[-1]])
    want = [expected_maxsim(vectors[0], vectors[i]) for i in short]
    assert np.allclose(result.scores, want, rtol=0, atol=1e-5)
    assert result.scores == result.raw_scores  # returned as is, no sigmoid
    assert len(set(np.round(want, 4))) > 1  # the documents score differently
    assert refused.value.code == "over-ceiling" and refused.value.index == 1
