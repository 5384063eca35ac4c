"""Request heads a client might send to break the server, on ``synapse
serve`` processes of both backends, over raw sockets on 127.0.0.1: a head
over the bound (431), both ``Content-Length`` and ``Transfer-Encoding``
(400), and HTTP/2's preface (400 at once, not a connection left waiting).
The server serves the next client as ever."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

import pytest

from synapse_http.testing import Server, model

#: the bound on a request head (``uvicorn_connection.MAX_HEAD_BYTES``), written out so
#: that this test runs against a server without it
MAX_HEAD_BYTES = 16 * 1024

#: seconds any one wait here may take before the test fails instead of hanging
BOUND_S = 30.0
#: an answer that takes longer than this was waited for (a timeout), not refused
PROMPT_S = 5.0
BODY = b'{"inputs": "a"}'


def exchange(server: Server, raw: bytes) -> tuple[bytes, float]:
    """Send ``raw``; what the server answers before it closes, and how long it took."""
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=BOUND_S) as sock:
        # refused before it read all of it: the answer is still there
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(raw)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer, time.monotonic() - start


def post(headers: str, body: bytes = BODY) -> bytes:
    head = f"POST /embed HTTP/1.1\r\nHost: synapse\r\nContent-Type: application/json\r\n{headers}"
    return head.encode() + b"\r\n" + body


@pytest.fixture
def server(serve: Callable[..., Server], anyio_backend: str) -> Server:
    return serve(anyio_backend, [model("e")])


def test_a_head_over_the_bound_is_a_431(server: Server) -> None:
    from synapse_http.uvicorn_connection import MAX_HEAD_BYTES as bound

    assert bound == MAX_HEAD_BYTES
    big = "x" * (MAX_HEAD_BYTES + 1024)
    answer, _ = exchange(server, post(f"X-Big: {big}\r\nContent-Length: {len(BODY)}\r\n"))
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    # far over it (the 20 MB) the same, without taking the memory
    huge, _ = exchange(server, b"GET /health HTTP/1.1\r\nX-Huge: " + b"y" * 20_000_000)
    assert huge.startswith(b"HTTP/1.1 431"), huge[:200]
    # a head within it, and a body far larger than it, are served
    fine = "x" * (MAX_HEAD_BYTES // 2)
    answer, _ = exchange(
        server, post(f"X-Fine: {fine}\r\nContent-Length: {len(BODY)}\r\nConnection: close\r\n")
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    long = b'{"inputs": ["' + b"a " * 100_000 + b'"], "truncate": true}'
    answer, _ = exchange(
        server, post(f"Content-Length: {len(long)}\r\nConnection: close\r\n", long)
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_content_length_with_transfer_encoding_is_a_400(server: Server) -> None:
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    answer, took = exchange(
        server, post(f"Content-Length: {len(BODY)}\r\nTransfer-Encoding: chunked\r\n", chunked)
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert took < PROMPT_S
    answer, _ = exchange(
        server, post("Transfer-Encoding: chunked\r\nConnection: close\r\n", chunked)
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_an_http2_preface_is_a_400_at_once(server: Server) -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
    answer, took = exchange(server, preface + settings)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert took < PROMPT_S
