"""Reading a request's body, in-process on both backends, with scripted
``receive()`` calls: a body there at once, one that has to be waited for, one
in pieces, one that stalls past the timeout, and a client that goes away."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from starlette.types import ASGIApp, Message

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

BODY = json.dumps({"inputs": ["a", "b"]}).encode()
Receive = Callable[[], Awaitable[Message]]


@asynccontextmanager
async def app(timeout_s: float = 30.0) -> AsyncIterator[ASGIApp]:
    config = host_config(model("e"))
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(config, plugins=plugins) as host:
        yield create_app(host, ServeSettings(request_timeout_s=timeout_s))


async def post(
    app: ASGIApp, receive: Receive, length: int | None = len(BODY), path: str = "/embed"
) -> tuple[int, Any]:
    """POST ``path`` with ``receive``; the status and the decoded body answered."""
    path, _, query = path.partition("?")
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "query_string": query.encode(),
        "headers": headers,
        "http_version": "1.1",
        "asgi": {"version": "3.0"},
    }
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(body) if body else None


def script(*messages: Message, before: anyio.Event | None = None) -> Receive:
    """``receive()`` giving ``messages`` in turn (waiting for ``before`` first,
    if given), then waiting forever as a client that sent everything does."""
    pending = list(messages)

    async def receive() -> Message:
        if before is not None and not before.is_set():
            await before.wait()
        if pending:
            return pending.pop(0)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


def request(body: bytes, more: bool = False) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_there_at_once_and_one_waited_for_in_pieces_give_the_same_answer() -> None:
    async with app() as served:
        at_once = await post(served, script(request(BODY)))
        arrives = anyio.Event()
        half = len(BODY) // 2
        receive = script(request(BODY[:half], more=True), request(BODY[half:]), before=arrives)
        async with anyio.create_task_group() as tg:
            answers: list[tuple[int, Any]] = []

            async def call() -> None:
                answers.append(await post(served, receive))

            tg.start_soon(call)
            await anyio.wait_all_tasks_blocked()  # the app waits in receive()
            assert not answers
            arrives.set()
    assert at_once[0] == 200 and len(at_once[1]) == 2
    assert answers == [at_once]


async def test_a_body_that_stalls_past_the_timeout_is_408() -> None:
    async with app(timeout_s=0.2) as served:
        for receive in (script(), script(request(BODY[:5], more=True))):
            status, body = await post(served, receive)
            assert status == 408 and body["error_type"] == "body-timeout", body
        # the app goes on serving
        assert (await post(served, script(request(BODY))))[0] == 200


async def test_a_client_gone_while_its_body_is_read_gets_499_and_nothing_runs() -> None:
    gone: Message = {"type": "http.disconnect"}
    async with app() as served:
        assert await post(served, script(gone)) == (499, None)
        assert await post(served, script(request(BODY[:5], more=True), gone)) == (499, None)


async def test_a_body_over_the_limit_without_content_length_is_413() -> None:
    async with app() as served:
        big = json.dumps({"inputs": ["x" * 3 * 1024 * 1024]}).encode()
        status, body = await post(served, script(request(big)), length=None)
        assert status == 413 and body["error_type"] == "payload-too-large"
