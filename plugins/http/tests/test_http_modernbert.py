"""ModernBERT through the HTTP routes: the CPU lane's embedder (gte-modernbert-base's
layout) and cross-encoder (gte-reranker-modernbert-base's) served by the app
in process, each route giving the tiny folders' reference."""

from __future__ import annotations

import json
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


def entry(name: str, cache: Path) -> dict[str, Any]:
    options: dict[str, Any] = {"runtime": "numpy"}
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        pass
    else:
        options = {"runtime": "onnxruntime", "cache_dir": str(cache)}
    return model_entry(
        name,
        task=REFERENCE[name]["kind"],
        transport="cpu",
        model_dir=str(TINY2 / name),
        **options,
    )


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_modernbert_embeds_and_reranks_through_every_route(tmp_path: Path) -> None:
    from synapse_http import create_app

    embed_ref, rerank_ref = REFERENCE["modernbert-cls"], REFERENCE["modernbert-rerank"]
    texts, vectors = embed_ref["texts"][:8], embed_ref["vectors"][:8]
    query = rerank_ref["pairs"][0][0]
    docs = [d for q, d in rerank_ref["pairs"] if q == query]
    scores, raw_scores = rerank_ref["scores"][: len(docs)], rerank_ref["raw_scores"][: len(docs)]
    models = (entry("modernbert-cls", tmp_path), entry("modernbert-rerank", tmp_path))
    config = host_config(*models, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)
    async with synapse.open_host(config, plugins=[synapse_cpu_plugin]) as h:
        transport = httpx.ASGITransport(app=create_app(h))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            tei = await http.post("/embed?model=modernbert-cls", json={"inputs": texts})
            openai = await http.post(
                "/v1/embeddings", json={"model": "modernbert-cls", "input": texts}
            )
            body = {"query": query, "texts": docs, "raw_scores": True}
            raw = await http.post("/rerank?model=modernbert-rerank", json=body)
            v2 = await http.post(
                "/v2/rerank", json={"model": "modernbert-rerank", "query": query, "documents": docs}
            )
    assert tei.status_code == openai.status_code == raw.status_code == v2.status_code == 200
    assert cosines(tei.json(), vectors).min() >= 0.99999
    assert cosines([item["embedding"] for item in openai.json()["data"]], vectors).min() >= 0.99999
    by_index = {item["index"]: item["score"] for item in raw.json()}
    assert np.abs(np.array([by_index[i] for i in range(len(docs))]) - raw_scores).max() <= 1e-5
    relevance = {r["index"]: r["relevance_score"] for r in v2.json()["results"]}
    assert np.abs(np.array([relevance[i] for i in range(len(docs))]) - scores).max() <= 1e-5
