"""``huggingface_hub.InferenceClient(base_url=...)``: ``feature_extraction``
posts to ``/``, as against a TEI server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from huggingface_hub import InferenceClient

from synapse_http.testing import API_KEY

from .conftest import QUERY


def test_inference_client_feature_extraction_matches_host_embed(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    client = InferenceClient(base_url=url, api_key=API_KEY)
    vector = client.feature_extraction(QUERY)
    same_vectors(vector.reshape(1, -1), [QUERY])
