"""Fixtures for the model home's tests (see :mod:`synapse_models.testing`)."""

from __future__ import annotations

from synapse_models.testing import (  # noqa: F401  (fixtures)
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
