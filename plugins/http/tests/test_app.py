"""The app in-process, through ``create_app``: with a host its caller owns, or
opening its own in the ASGI lifespan. No server, no sockets; both anyio backends."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

import synapse_core as synapse
from synapse_core.frontend import app_factory
from synapse_core.plugin import BasicTokenizer, Conversion
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.server import backend_options
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio


class BrokenTokenizer(InProcessTransport):
    """A tokenizer that fails on texts saying "boom": a plugin bug, not the caller's."""

    def tokenizer(self, spec: Any) -> Any:
        class Broken(BasicTokenizer):
            def encode(self, text: str) -> list[int]:
                if "boom" in text:
                    raise ValueError("cannot tokenize this")
                return super().encode(text)

        return Broken()


class IdsOnlyTokenizer(InProcessTransport):
    """A tokenizer with the two methods every tokenizer has, and no ``pieces``."""

    def tokenizer(self, spec: Any) -> Any:
        basic = BasicTokenizer()

        class IdsOnly:
            encode = staticmethod(basic.encode)
            sequence_length = staticmethod(basic.sequence_length)

        return IdsOnly()


class Quantized(InProcessTransport):
    """Model "q" is served int8 with a measured loss, "u" int8 not measured yet;
    "broken" fails to say (a plugin bug: /info still answers)."""

    def model_conversion(self, model: Any) -> Conversion | None:
        if model.name == "broken":
            raise RuntimeError("cannot read its loss")
        measured = {"q": Conversion("int8", 0.9863, 0.9942), "u": Conversion("int8")}
        return measured.get(model.name)


def config() -> synapse.HostConfig:
    return host_config(model("e"), model("r", task="rerank"))


@asynccontextmanager
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
        yield http


async def test_an_unexpected_error_is_500_with_an_id_in_the_log_and_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [transport_plugin(BrokenTokenizer())]
    async with (
        synapse.open_host(config(), plugins=plugins) as host,
        client(create_app(host)) as http,
    ):
        response = await http.post("/embed", json={"inputs": ["fine", "boom"]})
        assert (await http.post("/embed", json={"inputs": ["fine"]})).status_code == 200
    assert response.status_code == 500
    body = response.json()
    assert body["error_type"] == "internal-error" and body["error_id"] in body["error"]
    assert "Traceback" not in response.text and "cannot tokenize" not in response.text
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(body["error_id"] in r.getMessage() and r.exc_info for r in logged)


async def test_an_app_given_an_open_host_serves_it_and_leaves_it_open() -> None:
    transport = InProcessTransport()
    async with synapse.open_host(config(), plugins=[transport_plugin(transport)]) as host:
        async with client(create_app(host, ServeSettings(max_inputs=2))) as http:
            assert len((await http.post("/embed", json={"inputs": ["a", "b"]})).json()) == 2
            assert (await http.post("/embed", json={"inputs": ["a"] * 3})).status_code == 413
        assert host.snapshot().worker("e").state == "ready"  # the app closed nothing


async def test_an_app_given_a_config_opens_its_host_in_the_lifespan_and_closes_it() -> None:
    transport = InProcessTransport()
    settings = ServeSettings(preload=("r",))
    app = create_app(config(), settings, plugins=[transport_plugin(transport)])
    async with client(app) as http:
        before = await http.post("/embed", json={"inputs": ["a"]})
        assert before.status_code == 503 and before.json()["error_type"] == "unavailable"
        assert (await http.get("/health")).status_code == 503
        async with app.router.lifespan_context(app):
            assert len(transport.launches) == 1  # preloaded "r" only
            assert (await http.get("/health")).status_code == 200
            assert (await http.post("/embed", json={"inputs": ["a"]})).status_code == 200
        assert (await http.get("/health")).status_code == 503
    assert len(transport.launches) == 2
    assert all(record.process.exited for record in transport.launches)


async def test_the_server_timeout_bounds_a_call_when_it_is_the_shorter() -> None:
    slow = model("slow", faults={"reply_delay_s": 2.0})
    cfg = host_config(slow)
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        await host.load("slow")
        app = create_app(host, ServeSettings(request_timeout_s=0.2))
        async with client(app) as http:
            late = await http.post(
                "/embed", json={"inputs": ["a"]}, headers={"X-Synapse-Timeout-Ms": "60000"}
            )
    assert late.status_code == 504 and late.json()["error_type"] == "deadline-exceeded"


def test_the_asyncio_backend_serves_on_uvloop_and_trio_on_trio() -> None:
    assert backend_options("asyncio") == {"use_uvloop": True}  # a dependency on Linux
    assert backend_options("trio") == {}


async def test_tokenize_gives_the_ids_alone_of_a_tokenizer_that_cannot_describe_them() -> None:
    plugins = [transport_plugin(IdsOnlyTokenizer())]
    async with (
        synapse.open_host(config(), plugins=plugins) as host,
        client(create_app(host)) as http,
    ):
        response = await http.post("/tokenize", json={"inputs": "Hello, world"})
    assert response.status_code == 200
    tokens = response.json()[0]
    assert [t["id"] for t in tokens] == BasicTokenizer().encode("Hello, world")
    assert all(t["text"] == "" and not t["special"] and t.get("start") is None for t in tokens)


async def test_a_prompt_named_by_the_request_goes_in_front_of_each_text() -> None:
    entry = {**model("e"), "prompts": {"query": "query: "}}
    transport = InProcessTransport()
    async with (
        synapse.open_host(host_config(entry), plugins=[transport_plugin(transport)]) as host,
        client(create_app(host)) as http,
    ):
        body = {"inputs": ["hello", "world"], "prompt_name": "query", "normalize": False}
        prompted = (await http.post("/embed", json=body)).json()
        expected = await host.embed("e", ["query: hello", "query: world"])
        assert prompted == expected.vectors  # JSON carries every float exactly
        tokenize = {"inputs": "hello", "prompt_name": "query", "add_special_tokens": False}
        tokens = (await http.post("/tokenize", json=tokenize)).json()[0]
        assert [t["text"] for t in tokens] == ["query", ":", "hello"]
        unknown = await http.post("/embed", json={"inputs": "x", "prompt_name": "passage"})
        assert unknown.status_code == 422
        assert unknown.json()["error_type"] == "unknown-prompt" and "'query'" in unknown.text
        ids = await http.post("/embed", json={"inputs": ["a", [5, 6]], "prompt_name": "query"})
        assert ids.status_code == 422 and ids.json()["field"] == "$.inputs[1]"
        flat = await http.post("/embed", json={"inputs": [5, 6], "prompt_name": "query"})
        assert flat.status_code == 422 and flat.json()["field"] == "$.inputs"
        # A text without tokens gets no prompt: it is refused as empty, with its index.
        blank = await http.post("/embed", json={"inputs": ["a", " \t"], "prompt_name": "query"})
        assert blank.status_code == 422
        assert blank.json()["error_type"] == "empty-sequence" and blank.json()["index"] == 1
        assert (await http.post("/embed", json={"inputs": "a"})).status_code == 200


async def test_info_carries_the_conversion_and_its_measured_cosine_to_float32() -> None:
    cfg = host_config(model("q"), model("u"), model("e"), model("broken"))
    async with (
        synapse.open_host(cfg, plugins=[transport_plugin(Quantized())]) as host,
        client(create_app(host)) as http,
    ):
        infos = {
            name: (await http.get(f"/info?model={name}")).json()
            for name in ("q", "u", "e", "broken")
        }
    fields = ("quantize", "min_cosine_to_float32", "mean_cosine_to_float32")
    assert [infos["q"][f] for f in fields] == ["int8", 0.9863, 0.9942]
    assert [infos["u"][f] for f in fields] == ["int8", None, None]
    assert [infos["e"][f] for f in fields] == [None, None, None]
    assert [infos["broken"][f] for f in fields] == [None, None, None]
    assert infos["broken"]["model_id"] == "broken"


async def test_the_app_is_found_by_name_with_its_options() -> None:
    """What synapse-ray serves: the ``http`` factory of ``synapse.apps``, its
    options being ``synapse serve``'s settings by name."""
    factory = app_factory("http", "synapse-http")
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(config(), plugins=plugins) as host:
        with pytest.raises(synapse.ConfigError, match="api_kee: not a setting of synapse serve"):
            factory(host, {"api_kee": "k"})
        async with client(factory(host, {"api_key": "k"})) as http:  # type: ignore[arg-type]
            refused = await http.post("/embed", json={"inputs": ["a"]})
            auth = {"Authorization": "Bearer k"}
            served = await http.post("/embed", json={"inputs": ["a"]}, headers=auth)
    assert (refused.status_code, served.status_code) == (401, 200)
    assert len(served.json()) == 1
