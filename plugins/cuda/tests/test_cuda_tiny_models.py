"""Every family's tiny reference through the CUDA lane (on the simulated
device: the same worker and graphs on onnxruntime's CPU execution provider).

float32 holds the reference's own tolerance (cosine >= 0.99999); float16
holds :data:`FP16_MIN_COSINE` and :data:`FP16_MAX_LOGIT`, the tolerances the
on-GPU check holds too (docs/cuda-lane.md, float16).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

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
