"""Request traces (``--otlp-endpoint``): the spans of a request through the real
app, their export to an OTLP/HTTP collector by a real ``synapse serve``, and
nothing of OpenTelemetry loaded when tracing is off."""

from __future__ import annotations

import http.server
import itertools
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.otel import OtelTracing
from synapse_http.testing import Server, model
from synapse_http.tracing import endpoint_of, traces_url
from synapse_mock_transport.inprocess import InProcessTransport

CHILDREN = ["synapse.tokenize", "synapse.admission", "synapse.exchange", "synapse.reply"]


@asynccontextmanager
async def traced_app(**settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The real app over a mock-transport host, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    tracing = OtelTracing(SimpleSpanProcessor(exporter), "synapse")
    plugins = [transport_plugin(InProcessTransport())]
    cfg = host_config(model("e", max_batch=2))
    async with synapse.open_host(cfg, plugins=plugins) as host:
        app: Starlette = create_app(host, ServeSettings(**settings), tracing=tracing)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            yield http, exporter
    tracing.shutdown()


def tree(spans: tuple[ReadableSpan, ...]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The one request span, and its children in order of their start."""
    (root,) = [s for s in spans if s.parent is None]
    assert root.context is not None
    children = [s for s in spans if s.parent is not None]
    assert all(s.parent.span_id == root.context.span_id for s in children)  # type: ignore[union-attr]
    assert all(s.context.trace_id == root.context.trace_id for s in children)  # type: ignore[union-attr]
    return root, sorted(children, key=lambda s: s.start_time or 0)


@pytest.mark.anyio
async def test_an_embed_request_is_one_span_with_a_child_per_step() -> None:
    async with traced_app() as (http, exporter):
        response = await http.post(
            "/embed", json={"inputs": ["a", "b", "c"]}, headers={"X-Request-Id": "req-7"}
        )
        assert response.status_code == 200
    root, children = tree(exporter.get_finished_spans())
    assert root.name == "POST /embed" and root.kind == SpanKind.SERVER
    attributes = dict(root.attributes or {})
    assert attributes["http.route"] == "/embed"
    assert attributes["http.response.status_code"] == 200
    assert attributes["synapse.model"] == "e" and attributes["synapse.task"] == "embed"
    assert attributes["synapse.request_id"] == "req-7"
    # three inputs in batches of at most two: two exchanges with the worker
    names = [s.name for s in children]
    assert names == [*CHILDREN[:2], "synapse.exchange", *CHILDREN[2:]]
    tokenize, admission, *exchanges, reply = children
    assert dict(tokenize.attributes or {})["synapse.inputs"] == 3
    assert dict(admission.attributes or {})["synapse.bucket"] == 8
    for exchange in exchanges:
        facts = dict(exchange.attributes or {})
        assert facts["synapse.bucket"] == 8 and facts["synapse.worker.generation"] == 1
        assert isinstance(facts["synapse.worker.id"], str) and facts["synapse.worker.id"]
        compute = facts["synapse.worker.compute_s"]  # as the worker reported it
        assert isinstance(compute, float) and compute >= 0
        assert exchange.status.status_code == StatusCode.UNSET
    assert sorted(dict(e.attributes or {})["synapse.rows"] for e in exchanges) == [1, 2]
    # one after the other, inside the request's span
    for before, after in itertools.pairwise(children):
        assert before.end_time == after.start_time
    assert root.start_time <= tokenize.start_time  # type: ignore[operator]
    assert reply.end_time <= root.end_time  # type: ignore[operator]


@pytest.mark.anyio
async def test_refused_requests_and_probes_are_traced_as_such() -> None:
    async with traced_app() as (http, exporter):
        assert (await http.get("/health")).status_code == 200  # a probe: not traced
        assert exporter.get_finished_spans() == ()
        bad = await http.post("/embed", json={"inputs": 3})
        assert bad.status_code == 422
        (refused,) = exporter.get_finished_spans()
        assert refused.name == "POST /embed"
        assert dict(refused.attributes or {})["http.response.status_code"] == 422
        exporter.clear()
        gone = await http.post("/embed?model=nothing", json={"inputs": ["a"]})
        assert gone.status_code == 404
        (unknown,) = exporter.get_finished_spans()
        assert dict(unknown.attributes or {})["synapse.request_id"]  # one of ours
        exporter.clear()
        await http.get("/info")  # Starlette's routes are traced too
        (info,) = exporter.get_finished_spans()
        assert info.name == "GET /info"


@pytest.mark.anyio
async def test_a_failed_exchange_is_an_error_span() -> None:
    exporter = InMemorySpanExporter()
    tracing = OtelTracing(SimpleSpanProcessor(exporter), "synapse")
    cfg = host_config(model("e", faults={"crash_on_infer": 1}))
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(cfg, plugins=plugins) as host:
        app = create_app(host, tracing=tracing)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            response = await http.post("/embed", json={"inputs": ["a"]})
    assert response.status_code >= 500
    root, children = tree(exporter.get_finished_spans())
    assert root.status.status_code == StatusCode.ERROR
    (exchange,) = [s for s in children if s.name == "synapse.exchange"]
    assert exchange.status.status_code == StatusCode.ERROR
    assert "synapse.worker.compute_s" not in dict(exchange.attributes or {})


def test_the_endpoint_comes_from_the_flag_or_the_standard_variable() -> None:
    assert endpoint_of(None, {}) is None
    assert endpoint_of(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}) == "http://a:4318"
    assert endpoint_of("http://b:4318", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a"}) == (
        "http://b:4318"
    )
    assert traces_url("http://a:4318/") == "http://a:4318/v1/traces"
    assert traces_url("http://a:4318/v1/traces") == "http://a:4318/v1/traces"


OFF = textwrap.dedent(
    """
    import sys
    import anyio, httpx
    import synapse_core as synapse
    import synapse_http.cli, synapse_http.server
    from synapse_core.testing import host_config, transport_plugin
    from synapse_http import create_app
    from synapse_http.testing import model
    from synapse_mock_transport.inprocess import InProcessTransport

    async def main():
        plugins = [transport_plugin(InProcessTransport())]
        async with synapse.open_host(host_config(model("e")), plugins=plugins) as host:
            transport = httpx.ASGITransport(app=create_app(host))
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
                assert (await http.post("/embed", json={"inputs": ["a"]})).status_code == 200

    anyio.run(main)
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    assert not loaded, loaded
    """
)


def test_tracing_off_loads_nothing_of_opentelemetry() -> None:
    subprocess.run([sys.executable, "-c", OFF], check=True, timeout=60)


# -- a real server exporting to a collector ---------------------------------------------


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps every span posted to ``/v1/traces``."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                assert self.headers["Content-Type"] == "application/x-protobuf"
                collector.requests.append(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[tuple[str, dict[str, Any], Any]]:
        """(name, attributes, span) of every span received."""
        found = []
        for request in self.requests:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        found.append((span.name, attributes, span))
        return found

    def services(self) -> set[str]:
        return {
            a.value.string_value
            for request in self.requests
            for resource in request.resource_spans
            for a in resource.resource.attributes
            if a.key == "service.name"
        }


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.mark.parametrize(("backend", "by_flag"), [("asyncio", True), ("trio", False)])
def test_a_served_request_reaches_the_collector_by_the_server_s_exit(
    serve: Callable[..., Server],
    collector: Collector,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    by_flag: bool,
) -> None:
    """``--otlp-endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``; the spans are
    batched, and the last batch leaves as the server exits."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the exporter must not go through a proxy
    monkeypatch.setenv("OTEL_SERVICE_NAME", f"synapse-{backend}")
    monkeypatch.delenv("SYNAPSE_OTLP_ENDPOINT", raising=False)
    args: tuple[str, ...] = ()
    if by_flag:
        args = ("--otlp-endpoint", collector.url)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    server = serve(backend, [model("e")], *args)
    assert any("tracing requests to " + collector.url in line for line in server.lines)
    with server.client() as client:
        response = client.post("/embed", json={"inputs": ["hello", "world"]})
        assert response.status_code == 200
    assert server.stop() == 0
    assert set(collector.paths) == {"/v1/traces"}
    assert collector.services() == {f"synapse-{backend}"}
    spans = collector.spans()
    (root,) = [span for name, _, span in spans if name == "POST /embed"]
    children = [
        (name, attrs)
        for name, attrs, span in sorted(spans, key=lambda found: found[2].start_time_unix_nano)
        if span.parent_span_id == root.span_id
    ]
    assert [name for name, _ in children] == CHILDREN
    exchange = dict(children)["synapse.exchange"]
    assert exchange["synapse.rows"] == 2 and exchange["synapse.worker.generation"] == 1
    assert exchange["synapse.worker.compute_s"] >= 0
