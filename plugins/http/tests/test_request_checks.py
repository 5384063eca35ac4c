"""What the app checks of a request before it reads the body, in-process on
both anyio backends: the ``Authorization`` header (its scheme in any case, one
header only) and the body's media type and encoding."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

KEY = "k-123"


@asynccontextmanager
async def serving(api_key: str | None = KEY) -> AsyncIterator[httpx.AsyncClient]:
    config = host_config(model("e"), model("r", task="rerank"))
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(config, plugins=plugins) as host:
        app = create_app(host, ServeSettings(api_key=api_key))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            yield http


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
@pytest.mark.parametrize("path", ["/embed", "/v1/models"])
async def test_the_auth_scheme_is_case_insensitive(scheme: str, path: str) -> None:
    async with serving() as http:
        headers = {"Authorization": f"{scheme} {KEY}"}
        if path == "/embed":
            answer = await http.post(path, json={"inputs": "a"}, headers=headers)
        else:
            answer = await http.get(path, headers=headers)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "values", [["Bearer nope", f"Bearer {KEY}"], [f"Bearer {KEY}", f"Bearer {KEY}"]]
)
@pytest.mark.parametrize("path", ["/embed", "/v1/models"])
async def test_more_than_one_authorization_header_is_a_400(values: list[str], path: str) -> None:
    headers = [("Authorization", value) for value in values]
    async with serving() as http:
        if path == "/embed":
            answer = await http.post(path, json={"inputs": "a"}, headers=headers)
        else:
            answer = await http.get(path, headers=headers)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    error = body.get("error")
    error_type = error["error_type"] if isinstance(error, dict) else body["error_type"]
    assert error_type == "invalid-header"


async def test_a_wrong_key_or_scheme_is_still_a_401() -> None:
    async with serving() as http:
        for value in ["Bearer nope", f"Basic {KEY}", KEY, f"Bearer{KEY}", f"bearer {KEY}x"]:
            answer = await http.post(
                "/embed", json={"inputs": "a"}, headers={"Authorization": value}
            )
            assert answer.status_code == 401, value


def error_type_of(answer: httpx.Response) -> str:
    body = answer.json()
    error = body.get("error")
    return str(error["error_type"] if isinstance(error, dict) else body["error_type"])


@pytest.mark.parametrize("path", ["/embed", "/v1/embeddings", "/rerank", "/tokenize", "/"])
async def test_a_gzip_body_is_a_415_saying_the_encoding_is_unsupported(path: str) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with serving(api_key=None) as http:
        answer = await http.post(path, content=gzip.compress(b'{"inputs": "a"}'), headers=headers)
        assert answer.status_code == 415, answer.text
        assert error_type_of(answer) == "unsupported-encoding"
        assert "'gzip'" in answer.text and "malformed" not in answer.text
        # identity is no encoding at all
        headers["Content-Encoding"] = "identity"
        plain = await http.post("/embed", content=b'{"inputs": "a"}', headers=headers)
        assert plain.status_code == 200, plain.text


@pytest.mark.parametrize(
    "media",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
    ],
)
async def test_a_body_that_is_not_sent_as_json_is_a_415(media: str | None) -> None:
    headers = {} if media is None else {"Content-Type": media}
    async with serving(api_key=None) as http:
        for path in ("/embed", "/v1/embeddings", "/tokenize"):
            answer = await http.post(
                path, content=b'{"inputs": "a", "input": "a", "model": "e"}', headers=headers
            )
            assert answer.status_code == 415, (path, answer.text)
            assert error_type_of(answer) == "unsupported-media-type"
        for fine in ("application/json", "Application/JSON; charset=utf-8", "application/x+json"):
            answer = await http.post(
                "/embed", content=b'{"inputs": "a"}', headers={"Content-Type": fine}
            )
            assert answer.status_code == 200, (fine, answer.text)


@pytest.mark.parametrize("ids", [[9906, -1], [-5], [9906, 2**32]])
async def test_token_ids_no_encoding_has_are_invalid_token_before_tiktoken_loads(
    ids: list[int],
) -> None:
    config = host_config({**model("e"), "tiktoken_encoding": "no-such-encoding"})
    async with synapse.open_host(config, plugins=[transport_plugin(InProcessTransport())]) as host:
        app = create_app(host, ServeSettings())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            answer = await http.post("/v1/embeddings", json={"model": "e", "input": [ids]})
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["error_type"] == "invalid-token", error
            position = next(i for i, token in enumerate(ids) if not 0 <= token < 2**32)
            assert error["field"] == f"$.input[0][{position}]"
            # ids that could be valid still need the encoding, which is unavailable
            fine = await http.post("/v1/embeddings", json={"model": "e", "input": [[9906]]})
            assert fine.json()["error"]["error_type"] == "tiktoken-unavailable"
            assert len(fine.json()["error"]["message"]) < 600
