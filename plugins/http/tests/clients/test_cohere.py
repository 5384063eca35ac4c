"""The Cohere SDK's v1 and v2 clients, ``base_url`` the server: rerank, and v2 embed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cohere

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, RERANK, TEXTS


def test_cohere_v1_rerank_orders_as_host_rerank(
    url: str, expected_order: Callable[[str, list[str]], list[int]]
) -> None:
    co = cohere.Client(api_key=API_KEY, base_url=url)
    response = co.rerank(model=RERANK, query=QUERY, documents=TEXTS)
    assert [r.index for r in response.results] == expected_order(QUERY, TEXTS)
    scores = [r.relevance_score for r in response.results]
    assert scores == sorted(scores, reverse=True)


def test_cohere_v2_rerank_orders_as_host_rerank(
    url: str, expected_order: Callable[[str, list[str]], list[int]]
) -> None:
    co = cohere.ClientV2(api_key=API_KEY, base_url=url)
    response = co.rerank(model=RERANK, query=QUERY, documents=TEXTS, top_n=2)
    assert [r.index for r in response.results] == expected_order(QUERY, TEXTS)[:2]


def test_cohere_v2_embed_gives_host_embed_in_every_type(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    """MiniLM has no prompts: ``input_type`` leaves the texts as they are."""
    co = cohere.ClientV2(api_key=API_KEY, base_url=url)
    response = co.embed(
        model=EMBED,
        texts=TEXTS,
        input_type="search_document",
        embedding_types=["float", "int8", "ubinary"],
    )
    embeddings = response.embeddings
    assert embeddings.float_ is not None
    same_vectors(embeddings.float_, TEXTS)
    same_vectors(embeddings.int8, TEXTS)  # int8 keeps each vector's direction
    assert embeddings.ubinary is not None
    assert [len(row) for row in embeddings.ubinary] == [(len(embeddings.float_[0]) + 7) // 8] * 3
