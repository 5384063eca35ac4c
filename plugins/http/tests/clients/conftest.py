"""The client suite: a real ``synapse serve`` driven by the client libraries
people already use, each configured as its own documentation says for an
OpenAI-, TEI- or Cohere-compatible endpoint.

The libraries are test dependencies of this suite alone
(``requirements/clients.txt``); the nox session ``clients`` installs them and
sets ``SYNAPSE_CLIENT_SUITE=1``. Without it (the main suite) nothing here is
collected.

Nothing leaves loopback: every client's base URL is the local server, API
keys are dummies, the libraries' telemetry is switched off below, before any
of them is imported, and :func:`_guard` refuses any connection or name lookup
off loopback and fails the test that tried one.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, model_entry
from synapse_http.testing import API_KEY, Server, model, start_server

#: set by the nox session; the main suite (which may lack the libraries, numpy
#: and synapse-cpu) collects nothing here and patches nothing
ENABLED = bool(os.environ.get("SYNAPSE_CLIENT_SUITE"))
if not ENABLED:
    collect_ignore_glob = ["test_*.py"]

#: tiktoken's cl100k_base file (the parent conftest points TIKTOKEN_CACHE_DIR
#: at it): LangChain tokenises with it, and the server decodes its token arrays
TIKTOKEN_CACHE = Path(__file__).parent.parent / "data" / "tiktoken"

#: switches read at import by the libraries (so set before any test module
#: imports one)
QUIET_ENV = {
    "ANONYMIZED_TELEMETRY": "False",  # chromadb
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    # litellm (which has no telemetry switch left) fetches its model price map
    # from the network at import otherwise
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
    "DO_NOT_TRACK": "1",
    # litellm points TIKTOKEN_CACHE_DIR at its own copy on import unless this is set
    "CUSTOM_TIKTOKEN_CACHE_DIR": str(TIKTOKEN_CACHE),
    # dummies, so no library looks further for a key
    "OPENAI_API_KEY": API_KEY,
    "CO_API_KEY": API_KEY,
    "HF_TOKEN": API_KEY,
}
# HF_HUB_OFFLINE is left unset on purpose: huggingface_hub blocks every
# request in offline mode, the local server's included (InferenceClient and
# Haystack's HuggingFaceAPI embedders); the guard below keeps it on loopback.

# -- nothing off loopback ----------------------------------------------------------------

#: connections and lookups refused, for the test that tried them to fail
_OFF_LOOPBACK: list[str] = []


def _loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(what: str) -> OSError:
    _OFF_LOOPBACK.append(what)
    # A refusal, so a library that falls back (litellm's cost map) does so,
    # and the test still fails below.
    return ConnectionRefusedError(f"the client suite sends nothing off loopback: {what}")


_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _loopback(host):
        raise _refuse(f"name lookup of {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
        raise _refuse(f"connection to {address!r}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(self, address)
    _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(self, address)
    return _connect_ex(self, address)


if ENABLED:
    os.environ.update(QUIET_ENV)
    socket.getaddrinfo = _guarded_getaddrinfo
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _guard() -> Iterator[None]:
    """Fails the test during which anything tried to leave loopback (the
    first test, for an attempt made while modules were imported)."""
    _no_attempts()
    yield
    _no_attempts()


def _no_attempts() -> None:
    attempts = list(_OFF_LOOPBACK)
    _OFF_LOOPBACK.clear()
    assert not attempts, f"tried to leave loopback: {attempts}"


# -- the server and its reference ------------------------------------------------------

EMBED = "minilm"
RERANK = "minilm-rerank"
#: MiniLM on the CPU lane; a client's vectors are compared with ``host.embed``'s
minilm = {"transport": "cpu", "package": "all-MiniLM-L6-v2", "ceiling": 256}
MINILM = [
    model_entry(EMBED, **minilm),
    model_entry(RERANK, task="rerank", **minilm),
]
#: the mock models, first after MiniLM's (TEI's routes serve the first of a task)
MOCK = [model("mock-e"), model("mock-r", task="rerank")]
CLASSIFY = "tiny-classifier"
#: a tiny seeded BERT classifier of four labels (``POST /predict``)
CLASSIFIER = [
    model_entry(
        CLASSIFY,
        task="classify",
        transport="cpu",
        ceiling=128,
        model_dir=str(Path(__file__).parents[3] / "models/tests/data/classifier/bert-classify"),
    )
]
SPARSE = "tiny-splade"
#: a tiny SPLADE folder (``POST /embed_sparse`` and ``/v1/encode``'s sparse output)
SPLADER = [
    model_entry(
        SPARSE,
        transport="cpu",
        ceiling=64,
        model_dir=str(Path(__file__).parents[3] / "models/tests/data/tiny-models-2/splade"),
    )
]
MODELS = [*MINILM, *MOCK, *CLASSIFIER, *SPLADER]
SETTINGS: dict[str, Any] = {"exit_grace_s": 5.0, "exchange_timeout_s": 30.0}
#: cosine a client's vector must reach with ``host.embed``'s for the same text
MIN_COSINE = 0.9999
TEXTS = [
    "Synapse serves embedding models to many callers at once.",
    "A synapse is the junction between two nerve cells.",
    "The weather in Lisbon is mild in winter.",
]
QUERY = "What is a serving host for embedding models?"


@contextmanager
def serving(tmp: Path, backend: str) -> Iterator[Server]:
    """``synapse serve`` on ``backend`` with :data:`MODELS`, stopped cleanly after."""
    running = start_server(
        tmp,
        backend,
        MODELS,
        "--api-key",
        API_KEY,
        # every model's worker before any test, so the fuzzing can check that
        # none was restarted
        *(arg for entry in MODELS for arg in ("--preload", entry["name"])),
        plugins="mock,cpu,http",
        **SETTINGS,
    )
    yield running
    assert running.stop() == 0, "".join(running.lines)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``synapse serve`` for the whole suite (asyncio backend)."""
    with serving(tmp_path_factory.mktemp("clients"), "asyncio") as running:
        yield running


@pytest.fixture(scope="session")
def url(server: Server) -> str:
    """The server's base URL (``http://127.0.0.1:PORT``), as TEI clients take it."""
    return server.url


@pytest.fixture(scope="session")
def v1(server: Server) -> str:
    """The OpenAI-style base URL (``.../v1``), as OpenAI clients take it."""
    return server.url + "/v1"


class Reference:
    """``host.embed`` and ``host.rerank`` in this process, on the same MiniLM entries."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, host: synapse.Host) -> None:
        self._portal = portal
        self._host = host

    def embed(self, texts: list[str]) -> list[list[float]]:
        async def call() -> list[list[float]]:
            return (await self._host.embed(EMBED, texts)).vectors

        return self._portal.call(call)

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        async def call() -> list[float]:
            return (await self._host.rerank(RERANK, query, documents)).scores

        return self._portal.call(call)


@pytest.fixture(scope="session")
def reference() -> Iterator[Reference]:
    import synapse_cpu.plugin

    config = host_config(*MINILM, source="client suite reference", **SETTINGS)
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        opened = synapse.open_host(config, plugins=[synapse_cpu.plugin])
        with portal.wrap_async_context_manager(opened) as host:
            yield Reference(portal, host)


def cosines(got: Any, expected: Any) -> list[float]:
    import numpy as np

    a = np.asarray(got, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    assert a.shape == b.shape, f"shape {a.shape}, expected {b.shape}"
    return list((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


@pytest.fixture(scope="session")
def same_vectors(reference: Reference) -> Callable[[Any, list[str]], None]:
    """Asserts ``vectors`` are ``host.embed``'s for ``texts`` (cosine >= MIN_COSINE)."""

    def check(vectors: Any, texts: list[str]) -> None:
        found = cosines(vectors, reference.embed(texts))
        assert min(found) >= MIN_COSINE, f"cosines with host.embed: {found}"

    return check


@pytest.fixture(scope="session")
def expected_order(reference: Reference) -> Callable[[str, list[str]], list[int]]:
    """Document indexes best first, by ``host.rerank``'s scores."""

    def order(query: str, documents: list[str]) -> list[int]:
        scores = reference.rerank(query, documents)
        return sorted(range(len(documents)), key=lambda i: -scores[i])

    return order
