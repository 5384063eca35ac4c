"""LiteLLM: ``openai/`` embeddings (with and without ``/v1`` in the base URL)
and ``cohere/`` rerank."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import litellm

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, RERANK, TEXTS


def test_litellm_openai_embedding_matches_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    response = litellm.embedding(model=f"openai/{EMBED}", input=TEXTS, api_base=v1, api_key=API_KEY)
    same_vectors([d["embedding"] for d in response.data], TEXTS)


def test_litellm_openai_embedding_on_the_bare_url(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    response = litellm.embedding(
        model=f"openai/{EMBED}", input=[QUERY], api_base=url, api_key=API_KEY, max_retries=0
    )
    same_vectors([response.data[0]["embedding"]], [QUERY])


def test_litellm_cohere_rerank_orders_as_host_rerank(
    url: str, expected_order: Callable[[str, list[str]], list[int]]
) -> None:
    response = litellm.rerank(
        model=f"cohere/{RERANK}", query=QUERY, documents=TEXTS, api_base=url, api_key=API_KEY
    )
    assert [r["index"] for r in response.results] == expected_order(QUERY, TEXTS)
