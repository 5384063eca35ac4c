"""Cohere's ``POST /v2/embed``, in-process on both anyio backends: every
embedding type from one call's vectors, ``input_type`` as the model's
prompts, and ``truncate`` NONE / START / END."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import httpx
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import create_app
from synapse_http.routes_cohere import as_type
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

TEXTS = ["a serving host", "the brain junction, café", "host"]


def flat(rows: list[list[float]]) -> list[float]:
    return [x for row in rows for x in row]


class Live(NamedTuple):
    host: synapse.Host
    http: httpx.AsyncClient


@asynccontextmanager
async def served(*entries: dict[str, Any]) -> AsyncIterator[Live]:
    entries = entries or (model("e"),)
    plugin = transport_plugin(InProcessTransport())
    async with synapse.open_host(host_config(*entries), plugins=[plugin]) as host:
        app = create_app(host)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            yield Live(host, http)


async def test_every_embedding_type_comes_from_the_same_vectors() -> None:
    async with served() as live:
        expected = (await live.host.embed("e", TEXTS)).vectors
        kinds = ["float", "int8", "uint8", "binary", "ubinary"]
        body = {"model": "e", "texts": TEXTS, "embedding_types": kinds}
        answer = await live.http.post("/v2/embed", json=body)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert got["response_type"] == "embeddings_by_type" and got["texts"] == TEXTS
        assert got["meta"]["api_version"]["version"] == "2"
        assert got["meta"]["billed_units"]["input_tokens"] > 0
        by_type = got["embeddings"]
        assert set(by_type) == set(kinds)
        assert flat(by_type["float"]) == pytest.approx(flat(expected))
        dims = len(expected[0])
        for row, vector in enumerate(expected):
            bits = [1 if x > 0 else 0 for x in vector]
            packed = [
                int("".join(map(str, bits[i : i + 8])).ljust(8, "0"), 2) for i in range(0, dims, 8)
            ]
            assert by_type["ubinary"][row] == packed
            assert by_type["binary"][row] == [b - 128 for b in packed]
            assert max(map(abs, by_type["int8"][row])) == 127
            assert by_type["uint8"][row] == [v + 128 for v in by_type["int8"][row]]
            # int8 keeps the vector's direction: cosine to the floats near 1.
            q = by_type["int8"][row]
            cosine = sum(a * b for a, b in zip(q, vector, strict=True)) / (
                math.hypot(*q) * math.hypot(*vector)
            )
            assert cosine > 0.999


async def test_float_is_the_default_type() -> None:
    async with served() as live:
        answer = await live.http.post("/v2/embed", json={"texts": TEXTS})
        assert answer.status_code == 200, answer.text
        assert set(answer.json()["embeddings"]) == {"float"}


async def test_input_type_puts_the_models_prompt_in_front() -> None:
    prompts = {"query": "query: ", "passage": "passage: "}
    async with served({**model("e"), "prompts": prompts}) as live:
        queried = (await live.host.embed("e", ["query: " + t for t in TEXTS])).vectors
        passages = (await live.host.embed("e", ["passage: " + t for t in TEXTS])).vectors
        plain = (await live.host.embed("e", TEXTS)).vectors
        for input_type, expected in (
            ("search_query", queried),
            ("search_document", passages),
            ("clustering", plain),  # no clustering prompt: the texts as they are
        ):
            body = {"texts": TEXTS, "input_type": input_type}
            answer = await live.http.post("/v2/embed", json=body)
            assert answer.status_code == 200, answer.text
            assert flat(answer.json()["embeddings"]["float"]) == pytest.approx(flat(expected)), (
                input_type
            )


async def test_truncate_none_refuses_and_start_or_end_cut() -> None:
    async with served(model("e", ceiling=8)) as live:
        long = " ".join(f"w{i}" for i in range(20))
        texts = ["short", long]
        refused = await live.http.post("/v2/embed", json={"texts": texts, "truncate": "NONE"})
        assert refused.status_code == 422
        assert refused.json()["index"] == 1, refused.json()
        for how, host_side in (("END", "end"), ("START", "start")):
            body = {"texts": texts, "truncate": how}
            answer = await live.http.post("/v2/embed", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-synapse-truncated"] == "1"
            expected = (await live.host.embed("e", texts, truncate=host_side)).vectors
            assert flat(answer.json()["embeddings"]["float"]) == pytest.approx(flat(expected))


async def test_bad_embedding_types_are_refused_naming_the_field() -> None:
    async with served() as live:
        for types in (["float16"], []):
            body = {"texts": TEXTS, "embedding_types": types}
            answer = await live.http.post("/v2/embed", json=body)
            assert answer.status_code == 422, types
            assert answer.json()["field"].startswith("$.embedding_types"), answer.json()


def test_binary_packs_eight_dimensions_to_a_byte_high_bit_first() -> None:
    vector = [0.5, -1.0, 0.0, 2.0, -0.1, 0.3, 0.3, -0.3, 1.0]
    assert as_type([vector], "ubinary") == [[0b10010110, 0b10000000]]
    assert as_type([vector], "binary") == [[0b10010110 - 128, 0]]
    assert as_type([[0.0, 0.0]], "int8") == [[0, 0]]
