"""LangChain's ``OpenAIEmbeddings``: by default it tokenises with tiktoken
(cl100k_base, from the test data: ``TIKTOKEN_CACHE_DIR``) and sends token-id
arrays; with ``check_embedding_ctx_length=False`` it sends the texts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_openai import OpenAIEmbeddings

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, TEXTS


def test_langchain_defaults_send_token_ids_and_get_the_texts_vectors(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embeddings = OpenAIEmbeddings(model=EMBED, base_url=v1, api_key=API_KEY, max_retries=0)
    same_vectors(embeddings.embed_documents(TEXTS), TEXTS)
    same_vectors([embeddings.embed_query(QUERY)], [QUERY])


def test_langchain_with_texts_gets_host_embed_vectors(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    embeddings = OpenAIEmbeddings(
        model=EMBED, base_url=v1, api_key=API_KEY, check_embedding_ctx_length=False
    )
    same_vectors(embeddings.embed_documents(TEXTS), TEXTS)
    same_vectors([embeddings.embed_query(QUERY)], [QUERY])


def test_langchain_sends_its_default_chunk_of_a_thousand_documents_at_once(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    documents = [f"document {i} of the bulk load" for i in range(1000)]
    embeddings = OpenAIEmbeddings(
        model=EMBED, base_url=v1, api_key=API_KEY, check_embedding_ctx_length=False, max_retries=0
    )
    assert embeddings.chunk_size == 1000  # one request of all of them
    same_vectors(embeddings.embed_documents(documents), documents)
