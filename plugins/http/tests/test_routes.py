"""Every route on a real server, checked field by field against the upstream shapes.

The OpenAI routes are driven by the official ``openai`` client, the TEI and
rerank routes by httpx. The same tests run against ``--backend asyncio``
(uvicorn) and ``--backend trio`` (hypercorn).
"""

from __future__ import annotations

import base64
import math
import struct
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
import tiktoken

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http.testing import API_KEY, Server, metric, model, start_server
from synapse_mock_transport.transport import MockTransport

pytestmark = pytest.mark.subprocess

MODELS = [
    model("e"),
    {**model("e2", dims=4), "matryoshka_dims": [2]},  # trained to be cut to 2
    model("r", task="rerank"),
]
SETTINGS: dict[str, Any] = {"exit_grace_s": 5.0}
ARGS = ("--api-key", API_KEY, "--max-body-bytes", "4096", "--max-inputs", "8")
TEXTS = ["a serving host", "the brain junction", "host"]


def host_embed(texts: list[str], name: str = "e") -> list[list[float]]:
    """What ``host.embed`` gives in-process for the same catalog (real mock worker)."""
    config = host_config(*MODELS, **SETTINGS)

    async def main() -> list[list[float]]:
        async with synapse.open_host(config, plugins=[transport_plugin(MockTransport())]) as h:
            return (await h.embed(name, texts)).vectors

    return anyio.run(main)


def host_rerank(query: str, documents: list[str]) -> list[float]:
    config = host_config(*MODELS, **SETTINGS)

    async def main() -> list[float]:
        async with synapse.open_host(config, plugins=[transport_plugin(MockTransport())]) as h:
            return (await h.rerank("r", query, documents)).scores

    return anyio.run(main)


def rows_close(got: list[list[float]], expected: list[list[float]]) -> bool:
    """Equal up to float32 rounding (normalising again in float64 moves the last bits)."""
    return len(got) == len(expected) and all(
        a == pytest.approx(b, rel=1e-6, abs=1e-7) for a, b in zip(got, expected, strict=True)
    )


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# -- OpenAI ------------------------------------------------------------------------------


def test_openai_client_embeds_float_and_base64_as_host_embed_does(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    expected = host_embed(TEXTS)
    floats = client.embeddings.create(model="e", input=TEXTS, encoding_format="float")
    assert [d.embedding for d in floats.data] == expected  # exact: JSON floats round-trip
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert floats.object == "list" and floats.model == "e"
    assert {d.object for d in floats.data} == {"embedding"}
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == 3 + 3 + 1
    # Explicit base64: the client hands back the string; little-endian float32.
    packed = client.embeddings.create(model="e", input=TEXTS, encoding_format="base64")
    for item, vector in zip(packed.data, expected, strict=True):
        raw = base64.b64decode(str(item.embedding))
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(vector, abs=1e-6)
    # Left out, the client asks for base64 and decodes it itself.
    default = client.embeddings.create(model="e", input="a serving host")
    assert list(default.data[0].embedding) == pytest.approx(expected[0], abs=1e-6)


def test_openai_client_token_ids_dimensions_and_models(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    by_text = client.embeddings.create(model="e", input="hello there", encoding_format="float")
    # Token arrays here are tiktoken's (cl100k_base), as OpenAI reads them;
    # the server reads the encoding's file from TIKTOKEN_CACHE_DIR (conftest).
    ids = tiktoken.get_encoding("cl100k_base").encode("hello there")
    by_ids = client.embeddings.create(model="e", input=[ids], encoding_format="float")
    assert by_ids.data[0].embedding == by_text.data[0].embedding
    same = client.embeddings.create(model="e", input="x", dimensions=8, encoding_format="float")
    assert len(same.data[0].embedding) == 8
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.embeddings.create(model="e", input="x", dimensions=3, encoding_format="float")
    assert refused.value.body["error_type"] == "unsupported-dimensions"  # type: ignore[index]
    assert refused.value.body["field"] == "$.dimensions"  # type: ignore[index]
    assert sorted(m.id for m in client.models.list()) == ["e", "e2", "r"]


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


def test_a_model_trained_to_be_cut_is_cut_on_every_embed_route(
    http: httpx.Client, server: Server
) -> None:
    """Matryoshka: each vector's first values, normalised again, from OpenAI's
    ``dimensions``, TEI's ``dimensions`` and Cohere's ``output_dimension``;
    ``/info`` lists the sizes, and an unlisted one is refused naming its field."""
    expected = [unit(v[:2]) for v in host_embed(TEXTS, "e2")]
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    answer = client.embeddings.create(model="e2", input=TEXTS, dimensions=2)  # base64
    assert rows_close([list(d.embedding) for d in answer.data], expected)
    tei = http.post("/embed?model=e2", json={"inputs": TEXTS, "dimensions": 2})
    assert tei.status_code == 200, tei.text
    assert rows_close(tei.json(), expected)
    body = {"model": "e2", "texts": TEXTS, "output_dimension": 2}
    cohere = http.post("/v2/embed", json=body)
    assert cohere.status_code == 200, cohere.text
    assert rows_close(cohere.json()["embeddings"]["float"], expected)
    assert http.get("/info?model=e2").json()["matryoshka_dims"] == [2]
    assert "matryoshka_dims" not in http.get("/info?model=e").json()
    refused = http.post("/v2/embed", json={**body, "output_dimension": 3})
    assert refused.status_code == 422
    assert refused.json()["error_type"] == "unsupported-dimensions"
    assert refused.json()["field"] == "$.output_dimension"
    assert "may be cut to 2" in refused.json()["error"]


# -- TEI ---------------------------------------------------------------------------------


def test_tei_embed_returns_bare_vectors_normalized_by_default(http: httpx.Client) -> None:
    expected = host_embed(TEXTS)
    response = http.post("/embed", json={"inputs": TEXTS})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert "x-synapse-truncated" not in response.headers
    assert rows_close(response.json(), expected)
    one = http.post("/embed", json={"inputs": "host", "normalize": False}).json()
    assert one == [expected[2]]
    other = http.post("/embed?model=e2", json={"inputs": "host"}).json()
    assert len(other[0]) == 4
    header = http.post("/embed", json={"inputs": "host"}, headers={"X-Synapse-Model": "e2"})
    assert header.json() == other


def test_tei_rerank_sorted_best_first_with_input_index(http: httpx.Client) -> None:
    docs = ["the brain junction", "a serving host", "serving"]
    scores = host_rerank("serving host", docs)
    response = http.post("/rerank", json={"query": "serving host", "texts": docs})
    assert response.status_code == 200
    ranks = response.json()
    assert [set(r) for r in ranks] == [{"index", "score"}] * 3  # no text unless asked
    assert [r["index"] for r in ranks] == sorted(range(3), key=lambda i: -scores[i])
    for rank in ranks:
        assert rank["score"] == pytest.approx(sigmoid(scores[rank["index"]]))
    raw = http.post(
        "/rerank",
        json={"query": "serving host", "texts": docs, "raw_scores": True, "return_text": True},
    ).json()
    for rank in raw:
        assert rank["score"] == pytest.approx(scores[rank["index"]])
        assert rank["text"] == docs[rank["index"]]


def test_tokenize_info_and_health(http: httpx.Client, server: Server) -> None:
    tokens = http.post("/tokenize", json={"inputs": ["Hello, world"]}).json()
    assert [t["text"] for t in tokens[0]] == ["[CLS]", "Hello", ",", "world", "[SEP]"]
    assert [t["special"] for t in tokens[0]] == [True, False, False, False, True]
    assert (tokens[0][1]["start"], tokens[0][1]["stop"]) == (0, 5)
    # Spans count the text's UTF-8 bytes, as TEI's do.
    text = "h\u00e9llo \u65e5\u672c"
    words = http.post("/tokenize", json={"inputs": text}).json()[0][1:-1]
    assert [(t["start"], t["stop"]) for t in words] == [(0, 6), (7, 13)]
    assert [text.encode()[t["start"] : t["stop"]].decode() for t in words] == [
        "h\u00e9llo",
        "\u65e5\u672c",
    ]
    # Lower-casing U+0130 makes two tokens of one character: ids, without spans.
    dotted = http.post("/tokenize", json={"inputs": "\u0130stanbul"})
    assert dotted.status_code == 200
    middle = dotted.json()[0][1:-1]
    assert len(middle) == 3 and all(t.get("start") is None for t in middle)
    info = http.get("/info").json()
    assert info["model_id"] == "e" and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == 16 and info["max_client_batch_size"] == 8
    assert info["auto_truncate"] is False and isinstance(info["version"], str)
    assert set(info) >= {
        "model_dtype",
        "max_concurrent_requests",
        "max_batch_tokens",
        "tokenization_workers",
    }
    reranker = http.get("/info?model=r").json()
    assert "reranker" in reranker["model_type"]
    # /health answers without a key (load balancers probe it).
    assert httpx.get(server.url + "/health").status_code == 200


# -- Cohere / Jina rerank ----------------------------------------------------------------------


def test_v1_rerank_cohere_shape_omits_document_unless_asked(http: httpx.Client) -> None:
    docs = ["the brain junction", "a serving host", "serving"]
    scores = host_rerank("serving host", docs)
    order = sorted(range(3), key=lambda i: -scores[i])
    body = http.post(
        "/v1/rerank", json={"model": "r", "query": "serving host", "documents": docs, "top_n": 2}
    ).json()
    assert set(body) >= {"id", "results", "meta"}
    assert [r["index"] for r in body["results"]] == order[:2]
    for result in body["results"]:
        assert set(result) == {"index", "relevance_score"}  # no "document": null
        assert result["relevance_score"] == pytest.approx(sigmoid(scores[result["index"]]))
    assert "truncated" not in body
    with_docs = http.post(
        "/v1/rerank",
        json={
            "query": "serving host",
            "documents": [{"text": d} for d in docs],
            "return_documents": True,
        },
    ).json()
    assert [r["document"] for r in with_docs["results"]] == [{"text": docs[i]} for i in order]


# -- truncation, only when asked ---------------------------------------------------------------


def test_truncate_true_cuts_and_reports_indexes_refusal_stays_default(
    http: httpx.Client,
) -> None:
    long = " ".join(f"w{i}" for i in range(30))
    inputs = ["short", long, "also short", long]
    refused = http.post("/embed", json={"inputs": inputs})
    assert refused.status_code == 422
    assert (refused.json()["error_type"], refused.json()["index"]) == ("over-ceiling", 1)
    cut = http.post("/embed", json={"inputs": inputs, "truncate": True})
    assert cut.status_code == 200 and cut.headers["x-synapse-truncated"] == "1,3"
    first14 = " ".join(f"w{i}" for i in range(14))
    assert rows_close([cut.json()[1]], host_embed([first14]))
    openai_cut = http.post("/v1/embeddings", json={"model": "e", "input": inputs, "truncate": True})
    assert openai_cut.json()["truncated"] == [1, 3]
    assert openai_cut.headers["x-synapse-truncated"] == "1,3"
    plain = http.post("/v1/embeddings", json={"model": "e", "input": ["short"]}).json()
    assert "truncated" not in plain
    ranked = http.post(
        "/v1/rerank", json={"query": "q", "documents": ["d", long], "truncate": True}
    )
    assert ranked.json()["truncated"] == [1] and ranked.headers["x-synapse-truncated"] == "1"
    tei = http.post("/rerank", json={"query": "q", "texts": [long, "d"], "truncate": True})
    assert tei.status_code == 200 and tei.headers["x-synapse-truncated"] == "0"
    # TEI's truncation_direction "Left" cuts at the start: the last 14 words stay.
    left = http.post(
        "/embed", json={"inputs": inputs, "truncate": True, "truncation_direction": "Left"}
    )
    assert left.status_code == 200 and left.headers["x-synapse-truncated"] == "1,3"
    last14 = " ".join(f"w{i}" for i in range(16, 30))
    assert rows_close([left.json()[1]], host_embed([last14]))
    # Without truncate, the direction changes nothing: still refused.
    assert (
        http.post("/embed", json={"inputs": inputs, "truncation_direction": "Left"}).status_code
        == 422
    )


# -- metrics -------------------------------------------------------------------------------------


def test_metrics_count_requests_refusals_and_show_the_host(server: Server) -> None:
    with server.client() as http:
        http.post("/embed", json={"inputs": ["x"]})
        http.post("/embed", json={"inputs": [""]})
    text = server.metrics()
    assert metric(text, "synapse_http_requests_total", route="/embed", status="200")[0] >= 1
    assert metric(text, "synapse_refusals_total", code="empty-sequence")[0] >= 1
    assert metric(text, "synapse_http_request_duration_seconds_count", route="/embed")[0] >= 2
    assert metric(text, "synapse_calls_waiting") == [0.0]
    assert metric(text, "synapse_lane_capacity_units", lane="mock:0") == [1_000_000.0]
    assert metric(text, "synapse_lane_reserved_units", lane="mock:0")[0] > 0
    assert metric(text, "synapse_worker_generation", model="e") == [1.0]
    assert metric(text, "synapse_worker_restarts_total", model="e") == [0.0]
    assert metric(text, "synapse_worker_pid", model="e")[0] > 0


def test_server_prints_its_url_and_models(server: Server) -> None:
    printed = "".join(server.lines)
    assert f"serving on {server.url}" in printed and server.url.startswith("http://127.0.0.1:")
    assert "models: e, e2, r" in printed


def test_nothing_starts_until_asked_and_preload_starts_workers(
    tmp_path: Path, server: Server
) -> None:
    fresh = start_server(tmp_path, "asyncio", MODELS, "--preload", "e2")
    try:
        text = fresh.metrics()
        assert metric(text, "synapse_worker_pid", model="e2")[0] > 0
        assert metric(text, "synapse_worker_pid", model="e") == []
    finally:
        assert fresh.stop() == 0
