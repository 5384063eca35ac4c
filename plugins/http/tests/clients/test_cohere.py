"""The Cohere SDK's v1 and v2 clients, ``base_url`` the server: rerank."""

from __future__ import annotations

from collections.abc import Callable

import cohere

from synapse_http.testing import API_KEY

from .conftest import QUERY, RERANK, TEXTS


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
