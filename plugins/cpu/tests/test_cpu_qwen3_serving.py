"""The tiny Qwen3 folders served through a host and real worker processes:
Qwen3-Embedding with its ``query`` instruction prompt, and Qwen3-Reranker
(an LLM reranker) scoring pairs in its prompt, which counts toward the
ceiling."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models import model as runtime
from synapse_models.testing import DATA

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def entry(name: str, task: str, cache: Path) -> dict[str, Any]:
    options: dict[str, Any] = {"runtime": "numpy"}
    if runtime.onnxruntime_importable() == "":
        options = {"runtime": "onnxruntime", "cache_dir": str(cache)}
    return model_entry(
        name, task=task, transport="cpu", ceiling=512, model_dir=str(TINY2 / name), **options
    )


def host(cfg: synapse.HostConfig) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cpu.plugin])


def deadline() -> synapse.Deadline:
    return synapse.Deadline.after(DEADLINE_S)


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@asyncio_only
async def test_qwen3_embedding_serves_its_reference_and_query_prompt(onnx_cache: Path) -> None:
    ref = REFERENCE["qwen3-last"]
    async with host(config(entry("qwen3-last", "embed", onnx_cache))) as h:
        assert h.catalog.entries["qwen3-last"].spec.prompts == ref["prompts"]
        result = await h.embed("qwen3-last", ref["texts"], deadline=deadline(), truncate=True)
        assert cosines(result.vectors, ref["vectors"]).min() >= 0.99999
        texts = ref["texts"][: len(ref["prompted"]["query"])]
        prompted = await h.embed("qwen3-last", texts, prompt_name="query", deadline=deadline())
        assert cosines(prompted.vectors, ref["prompted"]["query"]).min() >= 0.99999


@asyncio_only
async def test_qwen3_reranker_scores_pairs_in_its_prompt(onnx_cache: Path) -> None:
    ref = REFERENCE["qwen3-rerank"]
    async with host(config(entry("qwen3-rerank", "rerank", onnx_cache))) as h:
        assert h.catalog.entries["qwen3-rerank"].traits.scorer == "cross-encoder"
        for (q, d), score, raw in zip(ref["pairs"], ref["scores"], ref["raw_scores"], strict=True):
            ranked = await h.rerank("qwen3-rerank", q, [d], deadline=deadline())
            assert abs(ranked.scores[0] - score) <= 1e-5
            assert abs(ranked.raw_scores[0] - raw) <= 1e-5
        # The prompt counts toward the ceiling (256): a document that fits
        # alone but not in the prompt is refused, or cut on request.
        query, short = ref["pairs"][0]
        tokenizer = h.catalog.entries["qwen3-rerank"].tokenizer
        q = len(tokenizer.encode(query))
        long_doc = " ".join([short] * 12)
        d = len(tokenizer.encode(long_doc))
        assert q + d < 256 < tokenizer.positions(d, q)
        with pytest.raises(synapse.Refused) as refused:
            await h.rerank("qwen3-rerank", query, [short, long_doc], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        cut = await h.rerank("qwen3-rerank", query, [short, long_doc], truncate=True)
    assert cut.truncated == (1,)
    assert abs(cut.scores[0] - ref["scores"][0]) <= 1e-5
    runner = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy")
    prompt = runner.framing.pair
    kept = runner.tokenizer.encode(long_doc)[: 256 - prompt - q]
    expected = runner.rerank(runner.tokenizer.encode(query), [kept])[0]
    assert abs(cut.raw_scores[1] - float(expected)) <= 1e-5
