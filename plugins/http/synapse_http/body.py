"""Reading a request's body: bounded in size and in time.

The time bound is a cancel scope with a deadline, which costs more than the
rest of reading a small body. A small body has usually arrived with the
request's head, so on asyncio the first ``receive()`` is tried without one,
and the timeout is set up only if that ``receive()`` has to wait (see
:class:`Rest`). On trio a ``receive()`` always passes a checkpoint (its own
cancel scope, in effect) before it returns, so there the scope is always set up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import anyio
import sniffio
from starlette.types import Message, Receive

from .errors import HTTPError, too_large
from .schemas import ErrorBody


class ClientGone(Exception):
    """The client disconnected before its request was read."""


async def read_body(
    receive: Receive, declared: bytes | None, limit: int, timeout_s: float
) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes (before reading
    any of it when Content-Length, ``declared``, already says so), and with
    408 if it has not all arrived within ``timeout_s``. Raises
    :class:`ClientGone` if the client goes away first."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    if sniffio.current_async_library() == "asyncio":
        return await _read_asyncio(receive, limit, timeout_s)
    # Bounded: a client that stops sending mid-body (or a server that stops
    # passing it on while shutting down) must not hold the request forever.
    with anyio.move_on_after(timeout_s):
        return await _read_rest(await receive(), receive, limit)
    raise _timed_out(timeout_s)


async def _read_asyncio(receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The same on asyncio, where the first ``receive()`` runs its first step
    before any timeout is set up: a body that is all there already is taken
    at once. Otherwise the rest is awaited under ``asyncio.timeout``, which
    does not mind that a step of ``receive()`` ran outside it (an anyio
    scope would, if ``receive()`` entered one of its own)."""
    steps = receive().__await__()
    first: Rest | None = None
    try:
        waiting = steps.send(None)
    except StopIteration as arrived:
        message: Message = arrived.value
        if message["type"] == "http.request" and not message.get("more_body", False):
            body: bytes = message.get("body", b"")
            if len(body) > limit:
                raise _too_large(len(body), limit) from None
            return body
    else:
        first = Rest(steps, waiting)
    try:
        async with asyncio.timeout(timeout_s):
            if first is not None:
                message = await first
            return await _read_rest(message, receive, limit)
    except TimeoutError:
        raise _timed_out(timeout_s) from None


def _timed_out(timeout_s: float) -> HTTPError:
    return HTTPError(
        408,
        ErrorBody(
            error=f"the request body did not arrive within {timeout_s:g} s",
            error_type="body-timeout",
        ),
    )


async def _read_rest(message: Message, receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


class Rest:
    """The rest of an awaitable whose first step already ran: awaiting this
    goes on from the point where that step stopped (``waiting``, what it
    handed the event loop), as ``await`` itself would have. So a caller can
    see whether a ``receive()`` completes at once before it pays for a
    timeout, and enter the timeout's scope only when it does not."""

    __slots__ = ("_steps", "_waiting")

    def __init__(self, steps: Generator[Any, Any, Any], waiting: Any) -> None:
        self._steps = steps
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._steps
        waiting = self._waiting
        # What ``yield from steps`` does, from its second step on (PEP 380):
        # pass what the event loop sends or throws on to ``steps``.
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # a cancellation, say: ``steps`` handles it
                try:
                    waiting = steps.throw(exc)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    waiting = steps.send(sent)
                except StopIteration as finished:
                    return finished.value


def _too_large(size: int, limit: int) -> HTTPError:
    return too_large(
        f"request body of {size} bytes or more is over the limit of {limit} bytes "
        "(--max-body-bytes); send fewer inputs per request",
        "payload-too-large",
    )
