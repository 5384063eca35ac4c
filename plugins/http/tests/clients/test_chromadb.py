"""chromadb's ``OpenAIEmbeddingFunction``, alone and behind a collection's bulk ``add``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chromadb
from chromadb.config import Settings
from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, TEXTS, pending


def embedding_function(v1: str) -> OpenAIEmbeddingFunction:
    return OpenAIEmbeddingFunction(api_key=API_KEY, model_name=EMBED, api_base=v1)


def test_openai_embedding_function_matches_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    same_vectors(embedding_function(v1)(TEXTS), TEXTS)


@pending("--max-inputs 2048 by default")
def test_collection_bulk_add_of_300_documents_then_query(v1: str) -> None:
    client = chromadb.EphemeralClient(Settings(anonymized_telemetry=False))
    collection = client.create_collection("bulk", embedding_function=embedding_function(v1))
    documents = [*TEXTS, *(f"filler document number {i}" for i in range(297))]
    collection.add(ids=[str(i) for i in range(len(documents))], documents=documents)
    found = collection.query(query_texts=[QUERY], n_results=1)
    assert found["documents"] == [[TEXTS[0]]]
