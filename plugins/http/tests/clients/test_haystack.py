"""Haystack: ``HuggingFaceAPITextEmbedder`` (TEI api type, ``url`` the bare
server URL: it posts to ``/``) and ``OpenAITextEmbedder``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from haystack.components.embedders import OpenAITextEmbedder
from haystack.utils import Secret
from haystack_integrations.components.embedders.huggingface_api import (
    HuggingFaceAPITextEmbedder,
)

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY


def test_openai_text_embedder_matches_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embedder = OpenAITextEmbedder(api_key=Secret.from_token(API_KEY), model=EMBED, api_base_url=v1)
    same_vectors([embedder.run(QUERY)["embedding"]], [QUERY])


def test_huggingface_api_text_embedder_on_the_bare_url_matches_host_embed(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embedder = HuggingFaceAPITextEmbedder(
        api_type="text_embeddings_inference",
        api_params={"url": url},
        token=Secret.from_token(API_KEY),
    )
    same_vectors([embedder.run(QUERY)["embedding"]], [QUERY])
