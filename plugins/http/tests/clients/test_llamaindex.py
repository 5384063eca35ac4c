"""LlamaIndex: ``OpenAILikeEmbedding`` on the OpenAI route,
``TextEmbeddingsInference`` on TEI's ``/embed``, and the TEI rerank
postprocessor on ``/rerank``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.embeddings.openai_like import OpenAILikeEmbedding
from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference
from llama_index.postprocessor.tei_rerank import TextEmbeddingInference

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, TEXTS


def test_openai_like_embedding_matches_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embed_model = OpenAILikeEmbedding(model_name=EMBED, api_base=v1, api_key=API_KEY)
    same_vectors(embed_model.get_text_embedding_batch(TEXTS), TEXTS)
    same_vectors([embed_model.get_query_embedding(QUERY)], [QUERY])


def test_text_embeddings_inference_matches_host_embed(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embed_model = TextEmbeddingsInference(model_name=EMBED, base_url=url, auth_token=API_KEY)
    same_vectors(embed_model.get_text_embedding_batch(TEXTS), TEXTS)
    same_vectors([embed_model.get_query_embedding(QUERY)], [QUERY])


def test_tei_rerank_orders_nodes_as_host_rerank(
    url: str, expected_order: Callable[[str, list[str]], list[int]]
) -> None:
    # This postprocessor sends auth_token as the whole Authorization header.
    rerank = TextEmbeddingInference(base_url=url, auth_token=f"Bearer {API_KEY}", top_n=3)
    nodes = [NodeWithScore(node=TextNode(text=t), score=0.0) for t in TEXTS]
    ranked = rerank.postprocess_nodes(nodes, query_str=QUERY)
    assert [node.text for node in ranked] == [TEXTS[i] for i in expected_order(QUERY, TEXTS)]
    assert all(0.0 <= (node.score or 0.0) <= 1.0 for node in ranked)
