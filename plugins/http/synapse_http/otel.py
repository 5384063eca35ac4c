"""OpenTelemetry traces of ``synapse serve``'s requests: imported only when
tracing is on (:mod:`.tracing` says when), so a server without it loads none
of OpenTelemetry.

Each request is a server span (``POST /embed``), current while its route
runs. The host's calls made inside it are traced by :class:`CallTracer`,
which the app installs as the host's tracer: each point the serving path
passes (:mod:`synapse_core.tracing`) closes a child span that began at the
point before, so the children follow one another without gaps:
``synapse.tokenize``, ``synapse.admission``, one ``synapse.exchange`` per
request to a worker, and ``synapse.reply`` from the last exchange to the
answer written. Spans are made after the fact, with the times read at the
points: nothing is held open across the call.
"""

from __future__ import annotations

import os
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import Scope

from synapse_core.frontend import NO_TRACE, CallTrace, Failure, Output, Tracer

if TYPE_CHECKING:
    from synapse_core import Task
    from synapse_core.frontend import Fault, Frame, Infer, Plan, Shape

#: the instrumentation scope every span is made in
SCOPE = "synapse_http"
#: how long the server's exit waits for its last spans to be exported
FLUSH_MS = 5000
#: the most of a request's X-Request-Id kept
REQUEST_ID_CHARS = 128
#: the request being traced in this task (``None``: none is)
_request: ContextVar[RequestSpan | None] = ContextVar("synapse_request_span", default=None)


class OtelTracing:
    """The server's OpenTelemetry tracing: a tracer provider whose spans go
    to ``processor``. :meth:`exporting` makes the one ``synapse serve`` uses
    (OTLP/HTTP to a collector); tests give an in-memory exporter's."""

    def __init__(self, processor: SpanProcessor, service_name: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE)
        #: the host's tracer: traces the calls made inside a traced request
        self.calls = CallTracer(self.tracer)

    @classmethod
    def exporting(cls, url: str, service_name: str) -> OtelTracing:
        """Spans exported in batches, from a thread of the SDK's, as OTLP/HTTP
        protobuf to ``url`` (a collector's ``/v1/traces``); the exporter's other
        settings (headers, timeout, compression) come from the standard
        ``OTEL_EXPORTER_OTLP_*`` variables."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=url)
        return cls(BatchSpanProcessor(exporter), service_name)

    def request(self, scope: Scope, route: str) -> RequestSpan:
        """Begin the span of the request ``scope`` on ``route`` (its path
        among the app's routes, or ``other``); end it with :meth:`RequestSpan.end`."""
        return RequestSpan(self.tracer, scope, route)

    def shutdown(self) -> None:
        """Export what is left (within :data:`FLUSH_MS`), then stop."""
        self.provider.force_flush(FLUSH_MS)
        self.provider.shutdown()


class RequestSpan:
    """One request's server span, current in its task from its start to :meth:`end`."""

    __slots__ = ("_token", "context", "mark", "span", "tracer")

    def __init__(self, tracer: trace.Tracer, scope: Scope, route: str) -> None:
        self.tracer = tracer
        method = scope["method"]
        given = dict(scope["headers"]).get(b"x-request-id")
        # A proxy's id ties the span to the proxy's log; otherwise one of ours.
        request_id = given[:REQUEST_ID_CHARS].decode("latin-1") if given else os.urandom(8).hex()
        attributes: dict[str, str | int] = {
            "http.request.method": method,
            "url.path": scope["path"],
            "synapse.request_id": request_id,
        }
        if route != "other":
            attributes["http.route"] = route
        name = f"{method} {route}" if route != "other" else method
        self.span = tracer.start_span(name, kind=SpanKind.SERVER, attributes=attributes)
        self.context: Context = trace.set_span_in_context(self.span)
        #: when the last of its calls' points was passed (ns; 0: none was)
        self.mark = 0
        self._token = _request.set(self)

    def end(self, status: int) -> None:
        """The request was answered with ``status``: close its reply span (if
        a call of it reached a worker or failed on the way) and its own."""
        try:
            if self.mark:
                reply = self.tracer.start_span("synapse.reply", self.context, start_time=self.mark)
                reply.end()
            self.span.set_attribute("http.response.status_code", status)
            if status >= 500:
                self.span.set_status(Status(StatusCode.ERROR))
            self.span.end()
        finally:
            _request.reset(self._token)


class CallTracer(Tracer):
    """The host's tracer while tracing is on: a call made inside a traced
    request gets an :class:`OtelCallTrace`; any other call (a preload, a
    tool's) is not traced."""

    __slots__ = ("tracer",)

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def call(self, model: str, task: Task) -> CallTrace:
        request = _request.get()
        if request is None:
            return NO_TRACE
        request.span.set_attribute("synapse.model", model)
        request.span.set_attribute("synapse.task", task)
        return OtelCallTrace(self.tracer, request)


class OtelCallTrace(CallTrace):
    """One call's points as child spans of its request's span, each from the
    point before (the first from the call's start) to its own."""

    __slots__ = ("mark", "request", "tracer")

    def __init__(self, tracer: trace.Tracer, request: RequestSpan) -> None:
        self.tracer = tracer
        self.request = request
        self.mark = time.time_ns()

    def _span(
        self, name: str, attributes: dict[str, str | int | float], error: str | None = None
    ) -> None:
        now = time.time_ns()
        span = self.tracer.start_span(
            name, self.request.context, start_time=self.mark, attributes=attributes
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=now)
        self.mark = self.request.mark = now

    def planned(self, plan: Plan) -> None:
        self._span(
            "synapse.tokenize",
            {
                "synapse.inputs": len(plan.items),
                "synapse.tokens": plan.tokens,
                "synapse.truncated": len(plan.truncated),
            },
        )

    def admitted(self, shape: Shape) -> None:
        self._span(
            "synapse.admission", {"synapse.bucket": shape.bucket, "synapse.batch": shape.batch}
        )

    def exchanged(
        self, request: Infer, reply: Frame | Fault, worker_id: str, generation: int
    ) -> None:
        attributes: dict[str, str | int | float] = {
            "synapse.bucket": request.shape.bucket,
            "synapse.batch": request.shape.batch,
            "synapse.rows": len(request.sequences),
            "synapse.worker.id": worker_id,
            "synapse.worker.generation": generation,
        }
        error = None
        if type(reply) is Output:
            if reply.compute_ns is not None:  # as the worker measured it
                attributes["synapse.worker.compute_s"] = reply.compute_ns / 1e9
        elif isinstance(reply, Failure):
            error = f"{reply.code}: {reply.message}"
        else:  # a fault of the worker, or a reply that is not one
            error = str(getattr(reply, "reason", None) or type(reply).__name__)
        self._span("synapse.exchange", attributes, error)
