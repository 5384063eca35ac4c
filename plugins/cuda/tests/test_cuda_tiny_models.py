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
    entry = model_entry(
        name,
        task=ref["kind"],
        transport="cuda",
        ceiling=512,
        model_dir=str(SECOND / name),
        precision="fp32",
        cache_dir=str(onnx_cache),
    )
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
