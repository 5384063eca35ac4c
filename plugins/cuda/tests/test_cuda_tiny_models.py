"""Every family's tiny reference through the CUDA lane (on the simulated
device: the same worker and graphs on onnxruntime's CPU execution provider).

float32 holds the reference's own tolerance (cosine >= 0.99999); float16
holds :data:`FP16_MIN_COSINE` and :data:`FP16_MAX_LOGIT`, the tolerances the
on-GPU check holds too (docs/cuda-lane.md, float16).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_core.testing import model_entry
from synapse_models.testing import DATA

from .conftest import REFERENCE, config, deadline, host, tiny

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

FP16_MIN_COSINE = 0.999
FP16_MAX_LOGIT = 0.02
TOLERANCE = {"fp32": (0.99999, 1e-5), "fp16": (FP16_MIN_COSINE, FP16_MAX_LOGIT)}


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@asyncio_only
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
async def test_every_tiny_model_is_served_as_its_reference(
    precision: str, onnx_cache: Path
) -> None:
    min_cosine, max_logit = TOLERANCE[precision]
    models = [tiny(name, precision=precision, cache_dir=str(onnx_cache)) for name in REFERENCE]
    async with host(config(*models)) as h:
        for name, ref in REFERENCE.items():
            if ref["kind"] == "embed":
                result = await h.embed(name, ref["texts"], deadline=deadline(), truncate=True)
                assert cosines(result.vectors, ref["vectors"]).min() >= min_cosine, name
                identity = result.identity
            else:
                for (q, d), raw in zip(ref["pairs"], ref["raw_scores"], strict=True):
                    ranked = await h.rerank(name, q, [d], deadline=deadline())
                    assert abs(ranked.raw_scores[0] - raw) <= max_logit, name
                identity = ranked.identity
            assert identity.startswith(f"cuda:{name}:")
            assert identity.endswith(f":onnxruntime-cuda-{precision}"), identity


@asyncio_only
async def test_float16_is_another_vector_space_than_float32(onnx_cache: Path) -> None:
    ref = REFERENCE["bert-cls"]
    half = tiny("bert-cls", cache_dir=str(onnx_cache)) | {"name": "half"}
    full = tiny("bert-cls", precision="fp32", cache_dir=str(onnx_cache)) | {"name": "full"}
    async with host(config(half, full)) as h:
        a = await h.embed("half", ref["texts"][:3], deadline=deadline())
        b = await h.embed("full", ref["texts"][:3], deadline=deadline())
    assert a.identity.replace("-fp16", "-fp32") == b.identity != a.identity
    assert np.abs(np.array(a.vectors) - np.array(b.vectors)).max() > 0.0  # it is float16


SECOND = DATA / "tiny-models-2"
SECOND_REFERENCE: dict[str, Any] = json.loads(
    (SECOND / "reference.json").read_text(encoding="utf-8")
)["models"]


def second(name: str, task: str, folder: str, **options: Any) -> dict[str, Any]:
    """A CUDA-lane catalog entry of the second batch's ``folder``."""
    folder_dir = str(SECOND / folder)
    return model_entry(
        name, task=task, transport="cuda", ceiling=512, model_dir=folder_dir, **options
    )


@asyncio_only
@pytest.mark.parametrize(
    "name", [n for n, m in SECOND_REFERENCE.items() if m["kind"] in ("embed", "rerank")]
)
async def test_every_family_of_the_second_batch_is_served_as_its_reference(
    name: str, onnx_cache: Path
) -> None:
    """ModernBERT, Qwen3 (its embedder and its LLM reranker, framed in the
    model card's prompt on the host as in the worker), Gemma 3, NomicBERT
    and DeBERTa through the CUDA lane in float32: the reference's own
    tolerance. A pair over the ceiling is cut as the reference cut it."""
    ref = SECOND_REFERENCE[name]
    entry = second(name, ref["kind"], name, precision="fp32", cache_dir=str(onnx_cache))
    async with host(config(entry)) as h:
        if ref["kind"] == "embed":
            texts = [t for t in ref["texts"] if t == t.strip()]
            expected = [
                v for t, v in zip(ref["texts"], ref["vectors"], strict=True) if t == t.strip()
            ]
            result = await h.embed(name, texts, deadline=deadline(), truncate=True)
            assert cosines(result.vectors, expected).min() >= 0.99999
        else:
            for (q, d), raw in zip(ref["pairs"], ref["raw_scores"], strict=True):
                ranked = await h.rerank(name, q, [d], deadline=deadline(), truncate=True)
                assert abs(ranked.raw_scores[0] - raw) <= 1e-5, (name, q, d)


@asyncio_only
async def test_the_catalogs_instruction_reaches_the_llm_rerankers_host_and_worker(
    onnx_cache: Path,
) -> None:
    """``options.instruction`` as on the CPU lane: the host counts the
    instructed prompt and the worker scores pairs in it (the numpy runtime
    loaded with the same instruction is the expected value)."""
    from synapse_models import model as runtime

    told = "Given a question, find the passage that names a city"
    ref = SECOND_REFERENCE["qwen3-rerank"]
    options = {"precision": "fp32", "cache_dir": str(onnx_cache), "instruction": told}
    entry = second("told", "rerank", "qwen3-rerank", **options)
    expected_model = runtime.load(str(SECOND / "qwen3-rerank"), runtime="numpy", instruction=told)
    encode = expected_model.tokenizer.encode
    async with host(config(entry)) as h:
        assert h.catalog.entries["told"].traits.instruction == told
        for q, d in ref["pairs"]:
            ranked = await h.rerank("told", q, [d], deadline=deadline())
            expected = float(expected_model.rerank(encode(q), [encode(d)])[0])
            assert abs(ranked.raw_scores[0] - expected) <= 1e-5, (q, d)
            framing = expected_model.framing
            whole = len([*framing.before, *encode(q), *framing.between, *encode(d)])
            counted = h.catalog.entries["told"].tokenizer.sequence_length(encode(d), encode(q))
            assert counted == whole + len(framing.pair_after)
        assert "-llm-reranker-i" in ranked.identity


@asyncio_only
async def test_an_instruction_for_a_model_with_no_prompt_makes_it_unavailable() -> None:
    entry = second("bert", "rerank", "modernbert-rerank", instruction="Find it")
    async with host(config(entry)) as h:
        problem = h.catalog.entries["bert"].problem or ""
    assert "options.instruction: an instruction is an LLM reranker's" in problem
