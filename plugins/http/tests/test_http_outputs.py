"""Sparse and token vectors through the HTTP routes, served in process by a
real CPU worker on the tiny folders (``tiny-models-2``): TEI's
``/embed_sparse`` and ``/embed_all``, and Synapse's ``/v1/encode`` (dense,
sparse and token vectors of one forward pass), each equal to the folders'
references; a model without the output asked for refused with a 422 naming
what it computes; no text cut without ``truncate``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin as synapse_cpu_plugin
from synapse_core.testing import host_config, model_entry
from synapse_models import testing

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]


TINY2: Path = testing.DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
MIN_COSINE = 0.99999


def entry(name: str) -> dict[str, Any]:
    return model_entry(
        name, transport="cpu", model_dir=str(TINY2 / name), runtime="numpy", ceiling=64
    )


@asynccontextmanager
async def served() -> AsyncIterator[httpx.AsyncClient]:
    from synapse_http import create_app

    rerank = {**entry("m3-multi"), "name": "m3-rerank", "task": "rerank"}
    config = host_config(
        entry("m3-multi"), entry("splade"), entry("nomic-mean"), rerank, exchange_timeout_s=60.0
    )
    async with synapse.open_host(config, plugins=[synapse_cpu_plugin]) as host:
        transport = httpx.ASGITransport(app=create_app(host))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            yield http


def assert_sparse_equal(got: list[tuple[list[int], list[float]]], expected: list[Any]) -> None:
    for (indices, values), want in zip(got, expected, strict=True):
        assert indices == want["indices"]
        scale = max((abs(v) for v in want["values"]), default=1.0)
        assert np.allclose(values, want["values"], rtol=0, atol=1e-5 * scale)


def min_cosine(got: list[Any], expected: list[Any]) -> float:
    worst = 1.0
    for a, b in zip(got, expected, strict=True):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        worst = min(worst, float(cos.min()))
    return worst


async def test_embed_sparse_embed_all_and_encode_give_the_references() -> None:
    splade, m3 = REFERENCE["splade"], REFERENCE["m3-multi"]
    async with served() as http:
        body = {"inputs": splade["texts"], "truncate": True}
        answer = await http.post("/embed_sparse?model=splade", json=body)
        assert answer.status_code == 200, answer.text
        pairs = [([p["index"] for p in row], [p["value"] for p in row]) for row in answer.json()]
        assert_sparse_equal(pairs, splade["sparse_vectors"])

        body = {"inputs": m3["texts"], "truncate": True}
        answer = await http.post("/embed_all?model=m3-multi", json=body)
        assert answer.status_code == 200, answer.text
        assert min_cosine(answer.json(), m3["colbert_vectors"]) >= MIN_COSINE
        cut = answer.headers["x-synapse-truncated"]

        body = {"inputs": m3["texts"], "truncate": True, "outputs": ["sparse", "multi", "dense"]}
        answer = await http.post("/v1/encode?model=m3-multi", json=body)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert got["model"] == "m3-multi" and got["truncated"] == [int(i) for i in cut.split(",")]
        assert min_cosine([got["dense"]], [m3["vectors"]]) >= MIN_COSINE
        assert_sparse_equal(
            [(v["indices"], v["values"]) for v in got["sparse"]], m3["sparse_weights"]
        )
        assert min_cosine(got["multi"], m3["colbert_vectors"]) >= MIN_COSINE

        only = await http.post(
            "/v1/encode?model=m3-multi", json={"inputs": "hi", "outputs": ["sparse"]}
        )
        assert set(only.json()) == {"model", "identity", "sparse"}


async def test_embed_all_of_a_folder_without_colbert_is_every_tokens_hidden_state() -> None:
    async with served() as http:
        answer = await http.post(
            "/embed_all?model=nomic-mean", json={"inputs": ["hello world", "a"]}
        )
        tokens = await http.post(
            "/tokenize?model=nomic-mean", json={"inputs": ["hello world", "a"]}
        )
    assert answer.status_code == 200, answer.text
    rows = answer.json()
    assert [len(r) for r in rows] == [len(t) for t in tokens.json()]  # special tokens included
    assert {len(v) for r in rows for v in r} == {int(REFERENCE["nomic-mean"]["dims"])}


async def test_a_model_without_the_output_is_refused_naming_what_it_offers() -> None:
    async with served() as http:
        sparse = await http.post("/embed_sparse?model=nomic-mean", json={"inputs": "x"})
        dense = await http.post(
            "/v1/encode?model=splade", json={"inputs": "x", "outputs": ["dense"]}
        )
    for answer, lacking, offered in (
        (sparse, "sparse", "dense, multi"),
        (dense, "dense", "multi, sparse"),
    ):
        assert answer.status_code == 422, answer.text
        error = answer.json()
        assert error["error_type"] == "unsupported-output"
        assert lacking in error["error"] and f"it computes: {offered}" in error["error"]


async def test_no_text_is_cut_without_truncate() -> None:
    long = REFERENCE["m3-multi"]["texts"][-1]
    async with served() as http:
        for path in ("/embed_sparse", "/embed_all"):
            answer = await http.post(f"{path}?model=m3-multi", json={"inputs": ["a", long]})
            assert answer.status_code == 422, answer.text
            assert answer.json()["error_type"] == "over-ceiling"
            assert answer.json()["index"] == 1


async def test_rerank_of_a_colbert_model_is_its_maxsim() -> None:
    """Expected: FlagEmbedding's ``colbert_score`` of the reference's ColBERT
    vectors in float64 (the mean over query tokens of the best dot product)."""
    ref = REFERENCE["m3-multi"]
    texts, vectors = ref["texts"], ref["colbert_vectors"]
    docs = [1, 2, 3]
    body = {"query": texts[0], "texts": [texts[i] for i in docs], "raw_scores": True}
    async with served() as http:
        answer = await http.post("/rerank?model=m3-rerank", json=body)
        info = await http.get("/info?model=m3-rerank")
    assert answer.status_code == 200, answer.text
    assert info.json()["model_type"]["reranker"]["scorer"] == "maxsim"
    q = np.array(vectors[0], dtype=np.float64)
    want = [float((q @ np.array(vectors[i]).T).max(axis=1).mean()) for i in docs]
    got = {r["index"]: r["score"] for r in answer.json()}
    assert np.allclose([got[i] for i in range(len(docs))], want, rtol=0, atol=1e-5)
