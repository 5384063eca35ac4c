"""What clients send with their default settings, in-process on both anyio
backends: token ids checked before any worker runs, OpenAI token arrays read
as tiktoken ids, Cohere's ``/v2/rerank``, TEI's ``/`` and ``/embeddings``,
and the small things clients trip on (``Allow``, an empty model name, a lone
surrogate, ``served_model_name``, 2048 inputs)."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import httpx
import pytest
import tiktoken

import synapse_core as synapse
from synapse_core.plugin import BasicTokenizer
from synapse_core.testing import host_config, transport_plugin
from synapse_core.tokenizer import VOCAB
from synapse_http import ServeSettings, create_app, tiktoken_ids
from synapse_http.testing import Server, model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

TEXTS = ["a serving host", "the brain junction, café", "host"]
CL100K = tiktoken.get_encoding("cl100k_base")  # from TIKTOKEN_CACHE_DIR (conftest)


class Live(NamedTuple):
    host: synapse.Host
    http: httpx.AsyncClient
    transport: InProcessTransport


@asynccontextmanager
async def served(
    *entries: dict[str, Any], settings: ServeSettings | None = None
) -> AsyncIterator[Live]:
    transport = InProcessTransport()
    entries = entries or (model("e"), model("r", task="rerank"))
    async with synapse.open_host(
        host_config(*entries), plugins=[transport_plugin(transport)]
    ) as host:
        app = create_app(host, settings)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://synapse",
            headers={"Content-Type": "application/json"},  # for raw bodies (content=)
        ) as http:
            yield Live(host, http, transport)


# -- 1. token ids checked before any worker runs -------------------------------------------


@pytest.mark.parametrize(
    ("ids", "says"),
    [
        ([5, VOCAB], f"token id {VOCAB} at position 1 is past the vocabulary"),
        ([7, -1], "token id -1 at position 1 is negative"),
        ([99999999999999999999], "token id 99999999999999999999 at position 0 is past"),
    ],
)
async def test_tei_token_ids_outside_the_vocabulary_are_invalid_token_and_no_worker_starts(
    ids: list[int], says: str
) -> None:
    async with served() as live:
        answer = await live.http.post("/embed", json={"inputs": ["fine", ids]})
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert (body["error_type"], body["index"]) == ("invalid-token", 1)
        assert f"input 1: {says}" in body["error"]
        flat = await live.http.post("/embed", json={"inputs": ids})
        assert (flat.status_code, flat.json()["index"]) == (422, 0)
        assert live.transport.launches == []  # refused in the plan
        # The model's own ids inside its vocabulary are served.
        ok = await live.http.post("/embed", json={"inputs": [[5, VOCAB - 1]]})
        assert ok.status_code == 200


async def test_openai_token_ids_outside_the_encoding_are_invalid_token() -> None:
    async with served() as live:
        for ids, position in (([15339, 100256], 1), ([99999999999999999999], 0), ([-3], 0)):
            answer = await live.http.post("/v1/embeddings", json={"model": "e", "input": [ids]})
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert (error["type"], error["index"]) == ("invalid-token", 0)
            assert error["param"] == f"$.input[0][{position}]"
            assert f"at position {position} is not a token of" in error["message"]
        assert live.transport.launches == []


# -- 2. OpenAI's token arrays are tiktoken ids ---------------------------------------------


async def test_openai_token_arrays_are_decoded_with_tiktoken_and_embedded_as_their_text() -> None:
    async with served() as live:
        expected = (await live.host.embed("e", TEXTS)).vectors
        # What LangChain's OpenAIEmbeddings sends by default: cl100k_base ids.
        arrays = [CL100K.encode(text) for text in TEXTS]
        for path in ("/v1/embeddings", "/embeddings"):
            answer = await live.http.post(path, json={"model": "e", "input": arrays})
            assert answer.status_code == 200, answer.text
            assert [d["embedding"] for d in answer.json()["data"]] == expected
        # One flat array is one input; texts and arrays may be mixed.
        flat = await live.http.post("/v1/embeddings", json={"model": "e", "input": arrays[1]})
        assert flat.json()["data"][0]["embedding"] == expected[1]
        mixed = await live.http.post("/v1/embeddings", json={"input": [TEXTS[0], arrays[2]]})
        assert [d["embedding"] for d in mixed.json()["data"]] == [expected[0], expected[2]]
        # TEI's /embed keeps TEI's meaning: the model's own ids.
        own = BasicTokenizer().encode(TEXTS[0])
        tei = await live.http.post("/embed", json={"inputs": [own], "normalize": False})
        assert tei.json() == [expected[0]]


async def test_the_tiktoken_encoding_is_the_catalog_entrys() -> None:
    entry = {**model("e"), "tiktoken_encoding": "no_such_encoding"}
    async with served(entry) as live:
        answer = await live.http.post("/v1/embeddings", json={"model": "e", "input": [[15339]]})
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert error["type"] == "tiktoken-unavailable"
        assert "'no_such_encoding'" in error["message"]
        assert "check_embedding_ctx_length=False" in error["message"]
        texts = await live.http.post("/v1/embeddings", json={"model": "e", "input": ["text"]})
        assert texts.status_code == 200  # text needs no tiktoken


async def test_without_tiktoken_token_arrays_get_a_422_that_says_what_to_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import tiktoken: ImportError
    monkeypatch.setattr(tiktoken_ids, "_loaded", {})
    async with served() as live:
        answer = await live.http.post(
            "/v1/embeddings", json={"model": "e", "input": [[15339, 1917]]}
        )
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert error["type"] == "tiktoken-unavailable"
        assert "tiktoken is not installed" in error["message"]
        assert "check_embedding_ctx_length=False" in error["message"]
        assert live.transport.launches == []


# -- 3. Cohere v2 rerank, TEI's aliases ------------------------------------------------------


async def test_cohere_v2_rerank_answers_results_best_first_and_meta() -> None:
    async with served() as live:
        documents = ["a brain junction", "a serving host", "host"]
        scores = (await live.host.rerank("r", "serving host", documents)).scores
        body = {"model": "r", "query": "serving host", "documents": documents, "top_n": 2}
        answer = await live.http.post("/v2/rerank", json=body)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert set(got) == {"id", "results", "meta"}
        best = sorted(range(3), key=lambda i: -scores[i])[:2]
        assert [r["index"] for r in got["results"]] == best
        assert all(set(r) == {"index", "relevance_score"} for r in got["results"])
        assert all(0 <= r["relevance_score"] <= 1 for r in got["results"])
        assert got["meta"]["api_version"]["version"] == "2"
        assert "x-synapse-truncated" not in answer.headers


async def test_cohere_v2_rerank_cuts_long_documents_as_cohere_does() -> None:
    async with served(model("r", task="rerank", ceiling=16)) as live:
        long = " ".join(f"w{i}" for i in range(40))
        body = {"query": "q", "documents": ["short", long]}
        answer = await live.http.post("/v2/rerank", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-synapse-truncated"] == "1"
        # max_tokens_per_doc cuts to its count of the model's tokens.
        capped = await live.http.post("/v2/rerank", json={**body, "max_tokens_per_doc": 3})
        expected = (await live.host.rerank("r", "q", ["short", "w0 w1 w2"])).scores
        got = {r["index"]: r["relevance_score"] for r in capped.json()["results"]}
        assert got[1] == pytest.approx(1 / (1 + pow(2.718281828459045, -expected[1])))
        assert capped.headers["x-synapse-truncated"] == "1"
        bad = await live.http.post("/v2/rerank", json={**body, "max_tokens_per_doc": 0})
        assert bad.status_code == 422 and bad.json()["field"] == "$.max_tokens_per_doc"


async def test_tei_root_serves_the_default_models_task_and_embeddings_is_openais() -> None:
    async with served() as live:
        expected = (await live.host.embed("e", TEXTS)).vectors
        root = await live.http.post("/", json={"inputs": TEXTS, "normalize": False})
        assert root.status_code == 200 and root.json() == expected
        rerank = await live.http.post("/?model=r", json={"query": "host", "texts": ["a", "host"]})
        assert rerank.status_code == 200 and rerank.json()[0]["index"] == 1
        header = await live.http.post(
            "/", json={"query": "host", "texts": ["host"]}, headers={"X-Synapse-Model": "r"}
        )
        assert header.status_code == 200 and header.json()[0]["index"] == 0
        unknown = await live.http.post("/?model=nope", json={"inputs": "x"})
        assert unknown.status_code == 404 and unknown.json()["error_type"] == "unknown-model"
        openai = await live.http.post("/embeddings", json={"model": "e", "input": TEXTS})
        assert [d["embedding"] for d in openai.json()["data"]] == expected
        error = await live.http.post("/embeddings", json={"model": "nope", "input": "x"})
        assert error.json()["error"]["type"] == "unknown-model"  # OpenAI's envelope


async def test_a_reranker_first_in_the_catalog_makes_root_rerank() -> None:
    async with served(model("r", task="rerank"), model("e")) as live:
        answer = await live.http.post("/", json={"query": "host", "texts": ["a", "host"]})
        assert answer.status_code == 200 and answer.json()[0]["index"] == 1


# -- 4. limits and small things ----------------------------------------------------------------


async def test_2048_inputs_are_served_in_one_request_by_default() -> None:
    assert ServeSettings().max_inputs == 2048
    async with served() as live:
        texts = [f"text number {i}" for i in range(2048)]
        answer = await live.http.post("/v1/embeddings", json={"model": "e", "input": texts})
        assert answer.status_code == 200, answer.text
        data = answer.json()["data"]
        assert [d["index"] for d in data] == list(range(2048))
        assert data[1234]["embedding"] == (await live.host.embed("e", [texts[1234]])).vectors[0]
        over = await live.http.post("/embed", json={"inputs": ["x"] * 2049})
        assert over.status_code == 413 and over.json()["error_type"] == "too-many-inputs"


async def test_info_names_the_served_model_and_405_says_which_methods_are_allowed() -> None:
    async with served() as live:
        info = (await live.http.get("/info?model=r")).json()
        assert info["served_model_name"] == info["model_id"] == "r"
        for method, path, allowed in (
            ("GET", "/embed", "POST"),
            ("GET", "/v2/rerank", "POST"),
            ("POST", "/info", "GET HEAD"),
            ("DELETE", "/v1/embeddings", "POST"),
        ):
            answer = await live.http.request(method, path)
            assert answer.status_code == 405, (method, path)
            assert sorted(answer.headers["allow"].split(", ")) == allowed.split()


async def test_an_empty_model_name_is_unknown_model_never_the_default() -> None:
    async with served() as live:
        for answer in (
            await live.http.post("/embed?model=", json={"inputs": "x"}),
            await live.http.post("/embed", json={"inputs": "x"}, headers={"X-Synapse-Model": ""}),
            await live.http.post(
                "/v1/rerank", json={"model": "", "query": "q", "documents": ["d"]}
            ),
            await live.http.get("/info?model="),
        ):
            assert answer.status_code == 404, answer.text
            assert answer.json()["error_type"] == "unknown-model"
        openai = await live.http.post("/v1/embeddings", json={"model": "", "input": "x"})
        assert openai.status_code == 404 and openai.json()["error"]["type"] == "unknown-model"
        assert live.transport.launches == []


async def test_a_lone_surrogate_in_json_is_invalid_text_naming_its_input() -> None:
    async with served() as live:
        raw = b'{"inputs": ["fine", "caf\\udce9"]}'
        answer = await live.http.post("/embed", content=raw)
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert (body["error_type"], body["index"], body["field"]) == (
            "invalid-text",
            1,
            "$.inputs[1]",
        )
        assert "lone surrogate (U+DCE9) at character 3" in body["error"]
        one = await live.http.post("/v1/embeddings", content=b'{"input": "\\ud800", "model": "e"}')
        error = one.json()["error"]
        assert (one.status_code, error["type"], error["index"]) == (422, "invalid-text", 0)
        query = await live.http.post("/rerank", content=b'{"query": "q\\udfff", "texts": ["a"]}')
        assert query.json()["error_type"] == "invalid-text" and "index" not in query.json()
        assert query.json()["field"] == "$.query"
        # Not JSON at all stays a malformed body.
        broken = await live.http.post("/embed", content=b'{"inputs": ["\\ud800"')
        assert broken.json()["error_type"] == "invalid-body"
        assert live.transport.launches == []


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_clean_sigterm_logs_no_traceback(serve: Callable[..., Server], backend: str) -> None:
    server = serve(backend, [model("e")])
    with server.client() as http:
        assert http.post("/embed", json={"inputs": ["a"]}).status_code == 200
    server.signal(signal.SIGTERM)
    output = server.output()
    assert server.wait() == 0, output
    assert "stopped taking requests; 1 answered" in output
    assert "Traceback" not in output and "CancelledError" not in output, output
