"""chromadb's ``OpenAIEmbeddingFunction``, alone and behind a collection's bulk ``add``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chromadb
from chromadb.config import Settings
from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

from .conftest import EMBED, QUERY, TEXTS


def embedding_function(v1: str) -> OpenAIEmbeddingFunction:
    # chromadb persists the variable's name, never the key (OPENAI_API_KEY: the conftest's)
    return OpenAIEmbeddingFunction(api_key_env_var="OPENAI_API_KEY", model_name=EMBED, api_base=v1)


def test_openai_embedding_function_matches_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    same_vectors(embedding_function(v1)(TEXTS), TEXTS)


def test_collection_bulk_add_of_300_documents_then_query(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    client = chromadb.EphemeralClient(Settings(anonymized_telemetry=False))
    collection = client.create_collection(
        "bulk",
        embedding_function=embedding_function(v1),
        # chromadb's index is approximate (HNSW, built on several threads):
        # with its defaults, 297 near-identical fillers can hide the one true
        # neighbour from a query now and then. A search list longer than the
        # collection and one build thread make the query exact and repeatable,
        # so a wrong answer can only come from wrong vectors.
        configuration={"hnsw": {"ef_search": 512, "ef_construction": 512, "num_threads": 1}},
    )
    documents = [*TEXTS, *(f"filler document number {i}" for i in range(297))]
    ids = [str(i) for i in range(len(documents))]
    collection.add(ids=ids, documents=documents)
    # every stored row is host.embed's for its own document (order restored)
    stored = collection.get(ids=ids, include=["embeddings", "documents"])
    same_vectors(stored["embeddings"], stored["documents"])
    found = collection.query(query_texts=[QUERY], n_results=1)
    assert found["documents"] == [[TEXTS[0]]]
