"""The official ``openai`` client, as its README configures another endpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from synapse_http.testing import API_KEY

from .conftest import EMBED, QUERY, TEXTS


def test_openai_embeddings_match_host_embed(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    client = openai.OpenAI(base_url=v1, api_key=API_KEY)
    result = client.embeddings.create(model=EMBED, input=TEXTS)
    assert [d.index for d in result.data] == [0, 1, 2]
    same_vectors([d.embedding for d in result.data], TEXTS)


def test_openai_lists_the_served_models(v1: str) -> None:
    client = openai.OpenAI(base_url=v1, api_key=API_KEY)
    assert EMBED in [m.id for m in client.models.list()]


@pytest.mark.anyio
async def test_async_openai_embeds_one_text(
    v1: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    async with openai.AsyncOpenAI(base_url=v1, api_key=API_KEY) as client:
        result = await client.embeddings.create(model=EMBED, input=QUERY)
    same_vectors([result.data[0].embedding], [QUERY])
