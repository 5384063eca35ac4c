"""Bodies and inputs a client might send to break the server, in-process on
both backends: nesting deeper than the decoder's stack, a 10,000-character
model name, texts far over a model's ceiling, and inputs large enough that
tokenising them must not hold up the event loop. None of them is a 5xx."""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import synapse_core as synapse
from synapse_core.frontend import OFFLOAD_CHARS
from synapse_core.plugin import Availability, BasicTokenizer, TokenPiece
from synapse_core.testing import catalog_toml, host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

#: seconds any one wait here may take before the test fails instead of hanging
BOUND_S = 20.0
#: deeper than any decoder's stack
DEPTH = 100_000
#: the test models' ceiling is 16 tokens: texts over 16 * 32 characters are refused unread
CEILING = 16
MAX_CHARS = CEILING * 32
#: the media type of the raw bodies posted here (``content=``)
JSON = "application/json"


class Counting(BasicTokenizer):
    """The default tokenizer, counting the texts it is given; a text holding
    the word ``block`` waits for ``release`` (or fails after ``BOUND_S``)."""

    def __init__(self) -> None:
        self.texts = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def _seen(self, text: str) -> None:
        self.texts += 1
        if "block" in text:
            self.entered.set()
            if not self.release.wait(BOUND_S):
                raise AssertionError("tokenising held up the event loop")

    def encode(self, text: str) -> list[int]:
        self._seen(text)
        return super().encode(text)

    def count(self, text: str) -> int:
        self._seen(text)
        return super().count(text)

    def pieces(self, text: str, special: bool = False) -> list[TokenPiece]:
        self._seen(text)
        return super().pieces(text, special)


class CountingTransport(InProcessTransport):
    def __init__(self) -> None:
        super().__init__()
        self.counting = Counting()

    def tokenizer(self, spec: Any) -> Any:
        return self.counting


class Missing(InProcessTransport):
    """A model whose files are missing from a directory of this machine."""

    def __init__(self, where: Path) -> None:
        super().__init__()
        self.where = where

    def model_availability(self, model: Any) -> Availability:
        return Availability.no(f"its files are not in {self.where / 'model'}; install them")


@asynccontextmanager
async def serving(
    config: synapse.HostConfig | None = None, transport: InProcessTransport | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    config = config or host_config(model("e"), model("r", task="rerank"))
    plugins = [transport_plugin(transport or InProcessTransport())]
    async with synapse.open_host(config, plugins=plugins) as host:
        app = create_app(host, ServeSettings(max_inputs=512))
        transport_ = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport_, base_url="http://synapse", headers={"Content-Type": JSON}
        ) as http:
            yield http


def nested(opening: str, closing: str, inner: str = "1") -> str:
    return opening * DEPTH + inner + closing * DEPTH


@pytest.mark.parametrize(
    "deep",
    [nested("[", "]"), nested('{"a":', "}"), nested('[{"a":', "}]")],
    ids=["lists", "objects", "both"],
)
async def test_an_unknown_field_nested_too_deeply_is_a_422_naming_it(deep: str) -> None:
    body = '{"inputs": ["fine"], "extra": ' + deep + "}"
    async with serving() as http:
        for path in ("/embed", "/v1/embeddings", "/rerank", "/tokenize"):
            response = await http.post(path, content=body.replace('"inputs"', _key(path)))
            assert response.status_code == 422, (path, response.text)
            fields = _fields(path, response.json())
            assert fields["error_type"] == "invalid-body"
            assert fields["field"] == "$.extra"
            assert "nested too deeply" in fields["error"]
        first = '{"extra": ' + deep + ', "inputs": "fine"}'
        response = await http.post("/embed", content=first)
        assert response.status_code == 422 and response.json()["field"] == "$.extra"
        # Still serving.
        assert (await http.post("/embed", json={"inputs": "fine"})).status_code == 200


async def test_a_known_field_nested_too_deeply_is_a_422_naming_it() -> None:
    async with serving() as http:
        response = await http.post("/embed", content='{"inputs": ' + nested("[", "]") + "}")
    assert response.status_code == 422
    assert response.json()["field"].startswith("$.inputs")


def _key(path: str) -> str:
    return {"/v1/embeddings": '"model": "e", "input"', "/rerank": '"query": "q", "texts"'}.get(
        path, '"inputs"'
    )


def _fields(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The error's fields, TEI's flat ones or OpenAI's envelope's (message as ``error``)."""
    if path.startswith("/v1/"):
        inner: dict[str, Any] = body["error"]
        return {**inner, "error": inner["message"]}
    return body


async def test_a_10000_character_model_name_is_cut_in_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = "m" * 10_000
    async with serving() as http:
        answers = [
            await http.post("/v1/embeddings", json={"model": name, "input": "x"}),
            await http.post("/embed", json={"inputs": "x"}, headers={"X-Synapse-Model": name}),
            await http.post("/tokenize", json={"inputs": "x"}, params={"model": name}),
            await http.post("/v1/rerank", json={"model": name, "query": "q", "documents": ["d"]}),
        ]
    for response in answers:
        assert response.status_code == 404, response.text
        assert len(response.text) < 1000
        assert "(10000 characters)" in response.text
    assert all(len(record.getMessage()) < 1000 for record in caplog.records)


async def test_error_bodies_name_no_absolute_path(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(model("e"), model("gone")), encoding="utf-8")
    config = synapse.HostConfig.from_toml(catalog)
    async with serving(config, Missing(tmp_path)) as http:
        unknown = await http.post("/embed", json={"inputs": "x"}, params={"model": "nope"})
        missing = await http.post("/embed", json={"inputs": "x"}, params={"model": "gone"})
    assert unknown.status_code == 404 and missing.status_code == 503
    assert "catalog.toml" in unknown.json()["error"]
    assert "its files are not in model; install them" in missing.json()["error"]
    for response in (unknown, missing):
        assert str(tmp_path) not in response.text


async def test_a_text_far_over_the_ceiling_is_refused_before_it_is_tokenised() -> None:
    transport = CountingTransport()
    long = "word " * (MAX_CHARS // 5 + 1)
    async with serving(transport=transport) as http:
        for path, body in [
            ("/embed", {"inputs": ["short", long]}),
            ("/rerank", {"query": "q", "texts": ["short", long]}),
            ("/tokenize", {"inputs": ["short", long]}),
        ]:
            before = transport.counting.texts
            response = await http.post(path, json=body)
            assert response.status_code == 422, response.text
            assert response.json()["error_type"] == "over-ceiling"
            assert response.json()["index"] == 1
            assert f"texts over {MAX_CHARS} characters" in response.json()["error"]
            assert transport.counting.texts == before  # nothing was tokenised
        # Asked for, truncation cuts it instead, and says so.
        cut = await http.post("/embed", json={"inputs": ["short", long], "truncate": True})
    assert cut.status_code == 200 and cut.headers["X-Synapse-Truncated"] == "1"


async def test_tokenize_refuses_a_text_over_the_ceiling_as_embed_does() -> None:
    words = " ".join(["w"] * CEILING)  # with [CLS] and [SEP], two over
    async with serving() as http:
        tokenized = await http.post("/tokenize", json={"inputs": ["fine", words]})
        embedded = await http.post("/embed", json={"inputs": ["fine", words]})
    for response in (tokenized, embedded):
        assert response.status_code == 422
        assert response.json()["error_type"] == "over-ceiling"
        assert response.json()["index"] == 1


@pytest.mark.parametrize("path", ["/embed", "/rerank", "/tokenize"])
async def test_large_inputs_are_tokenised_off_the_event_loop(path: str) -> None:
    transport = CountingTransport()
    counting = transport.counting
    # Each text fits the ceiling; together they are over the bound for the loop.
    text = " ".join(["x" * 45] * 10)
    texts = [f"block {text}", *[text] * (OFFLOAD_CHARS // len(text))]
    body: dict[str, Any] = (
        {"texts": texts, "query": "q"} if path == "/rerank" else {"inputs": texts}
    )
    answer: list[httpx.Response] = []
    async with serving(transport=transport) as http:

        async def call() -> None:
            answer.append(await http.post(path, json=body))

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.to_thread.run_sync(counting.entered.wait)
                # The tokenizer is blocked on the first text; the loop still answers.
                health = await http.get("/health")
                assert health.status_code == 200
                assert not answer
                counting.release.set()
    (response,) = answer
    assert response.status_code == 200, response.text
    assert len(response.json()) == len(texts)


@pytest.mark.parametrize("path", ["/embed", "/tokenize"])
async def test_a_refused_large_call_leaves_nothing_for_the_cyclic_collector(path: str) -> None:
    # Large together (tokenised in a thread), the last text over the ceiling.
    text = " ".join(["x" * 45] * 10)
    texts = [*[text] * (OFFLOAD_CHARS // len(text) + 1), " ".join(["w"] * CEILING)]
    async with serving() as http:
        await http.post(path, json={"inputs": texts})  # anything made once is made
        gc.collect()
        gc.disable()
        try:
            response = await http.post(path, json={"inputs": texts})
            # A refusal in a reference cycle would keep the frames it passed,
            # and the call's texts with them, until the collector ran: here
            # it runs, keeping what it finds unreachable.
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            kept = [o for o in gc.garbage if isinstance(o, synapse.Refused)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert response.status_code == 422, response.text
    assert response.json()["index"] == len(texts) - 1
    assert kept == []
