"""Fixtures for the CPU lane's tests: the reference vectors and loaded models
(shared with every lane's tests, from :mod:`synapse_models.testing`), and
both anyio backends."""

from __future__ import annotations

import pytest

from synapse_models.testing import (  # noqa: F401  (fixtures)
    DATA,
    MAX_ABS,
    MIN_COSINE,
    TINY,
    close_to_reference,
    graph_cache_home,
    int8_model,
    matches_reference,
    model,
    model_copy,
    model_dir,
    numpy_model,
    onnx_cache,
    onnxruntime_model,
    reference,
    reference_vectors,
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
