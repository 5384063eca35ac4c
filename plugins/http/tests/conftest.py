"""Fixtures: ``synapse serve`` processes for both backends, each stopped with
SIGTERM afterwards and required to exit 0 (see :mod:`synapse_http.testing`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from synapse_http.testing import Server, start_server

#: tiktoken's cl100k_base file, under the name tiktoken caches it by: tiktoken
#: (in the servers these tests start, which inherit it, and in clients) reads
#: it from here instead of downloading it
TIKTOKEN_CACHE = Path(__file__).parent / "data" / "tiktoken"
os.environ["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_CACHE)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers; each is stopped with SIGTERM at the end and must exit 0."""
    started: list[Server] = []

    def start(
        backend: str, models: list[dict[str, Any]] | None, *args: str, **settings: Any
    ) -> Server:
        folder = tmp_path / f"server{len(started)}"
        folder.mkdir()
        server = start_server(folder, backend, models, *args, **settings)
        started.append(server)
        return server

    yield start
    for server in started:
        status = server.stop()
        assert status == 0, "".join(server.lines)


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One server per test module and backend, for the module's ``MODELS``
    started with its ``ARGS`` and host ``SETTINGS``."""
    module = request.module
    running = start_server(
        tmp_path_factory.mktemp(module.__name__.rpartition(".")[2]),
        request.param,
        module.MODELS,
        *getattr(module, "ARGS", ()),
        **getattr(module, "SETTINGS", {}),
    )
    yield running
    assert running.stop() == 0, "".join(running.lines)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    """A client of the module's server, with the API key."""
    with server.client() as client:
        yield client
