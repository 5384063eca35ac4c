"""The ASGI app: :func:`create_app` builds it, and nothing here runs a server
or touches signals, so other hosts (a Ray Serve ingress, a test client, any
ASGI server) can serve the same app."""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from synapse_core import ConfigError, Host, HostConfig, PluginHost, SynapseError

from . import openapi, routes_cohere, routes_encode, routes_openai, routes_rerank, routes_tei
from .access import logged
from .errors import HTTPError, unexpected
from .metrics import CONTENT_TYPE
from .openapi import Answer, answers
from .pipeline import PostRoute, error_response, service_of, synapse_error
from .schemas import ErrorBody
from .service import Service
from .settings import ServeSettings
from .uvicorn_connection import MAX_HEAD_BYTES

if TYPE_CHECKING:
    from .otel import OtelTracing

#: routes that answer without an API key (load balancers probe ``/health``;
#: the API's description is no secret, and Swagger UI fetches it keyless)
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs"})
#: routes whose requests are not traced: probes and scrapes, every few seconds
UNTRACED = frozenset({"/health", "/metrics"})


@answers(Answer(body=None, media="text/plain", summary="Prometheus metrics."))
async def metrics(request: Request) -> Response:
    return Response(service_of(request).metrics.render(), media_type=CONTENT_TYPE)


#: a POST route the app serves directly
Direct = PostRoute[Any] | routes_tei.ServedTask

ROUTES = [
    Route("/v1/embeddings", routes_openai.embeddings, methods=["POST"]),
    # TEI's alias of its OpenAI route (LiteLLM's ``openai/`` without ``/v1`` posts here)
    Route("/embeddings", routes_openai.embeddings, methods=["POST"]),
    Route("/v1/models", routes_openai.models, methods=["GET"]),
    Route("/v1/rerank", routes_rerank.rerank, methods=["POST"]),
    Route("/v2/rerank", routes_rerank.rerank_v2, methods=["POST"]),
    Route("/v2/embed", routes_cohere.embed_v2, methods=["POST"]),
    Route("/", routes_tei.served, methods=["POST"]),
    Route("/embed", routes_tei.embed, methods=["POST"]),
    Route("/embed_sparse", routes_tei.embed_sparse, methods=["POST"]),
    Route("/embed_all", routes_tei.embed_all, methods=["POST"]),
    Route("/v1/encode", routes_encode.encode, methods=["POST"]),
    Route("/rerank", routes_tei.rerank, methods=["POST"]),
    Route("/tokenize", routes_tei.tokenize, methods=["POST"]),
    Route("/info", routes_tei.info, methods=["GET"]),
    Route("/health", routes_tei.health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi.json_route(OPEN_PATHS), methods=["GET"]),
    Route("/docs", openapi.docs, methods=["GET"]),
]
#: metric labels: each route's path, and one label for every other path
ROUTE_LABELS = frozenset(route.path for route in ROUTES)
#: the POST routes :class:`SynapseApp` serves without Starlette's middleware and routing
DIRECT: dict[str, Direct] = {
    route.path: route.endpoint
    for route in ROUTES
    if isinstance(route.endpoint, PostRoute | routes_tei.ServedTask)
}


def create_app(
    host_or_config: Host | HostConfig | None = None,
    settings: ServeSettings | None = None,
    *,
    plugins: PluginHost | Iterable[object] | None = None,
    tracing: OtelTracing | None = None,
) -> Starlette:
    """The Synapse HTTP app.

    ``host_or_config``: an open :class:`~synapse_core.host.Host`, which the
    caller keeps owning (and closes), or a configuration (``None``: the
    shipped catalog), in which case the app opens its own host in the ASGI
    lifespan, with ``plugins`` (``None``: the installed ones), preloads
    ``settings.preload`` and closes it, confirming worker exits, at shutdown.

    ``tracing``: the OpenTelemetry tracing of its requests, which the caller
    keeps owning (and shuts down); without it, ``settings.otlp_endpoint``
    makes one that the app shuts down when its lifespan ends. It becomes the
    host's tracer too (:mod:`.otel`).
    """
    settings = settings or ServeSettings()
    owns = tracing is None and settings.otlp_endpoint is not None
    if owns:
        from .tracing import open_tracing

        assert settings.otlp_endpoint is not None
        tracing = open_tracing(settings.otlp_endpoint)
    if isinstance(host_or_config, Host):
        service = Service(host_or_config, None, settings, tracing=tracing, owns_tracing=owns)
    else:
        service = Service(None, host_or_config, settings, plugins, tracing, owns)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with service.lifespan():
            yield

    app = SynapseApp(
        service,
        settings.api_key,
        routes=ROUTES,
        middleware=[
            Middleware(Observed, service=service),
            Middleware(ApiKey, key=settings.api_key),
        ],
        exception_handlers={
            HTTPError: _http_error,
            SynapseError: _synapse_error,
            HTTPException: _starlette_error,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    return app


def asgi_app(host: Host, options: Mapping[str, object]) -> Starlette:
    """The app over an open ``host`` (its caller keeps owning it), ``options``
    being :class:`ServeSettings` fields by name: the factory this package
    registers in the ``synapse.apps`` entry-point group as ``http``, so that
    another plugin serves it without importing this one
    (:func:`synapse_core.frontend.app_factory`)."""
    known = {field.name for field in attrs.fields(ServeSettings)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            "the options of the http app",
            [
                f"{name}: not a setting of synapse serve ({', '.join(sorted(known))})"
                for name in unknown
            ],
        )
    return create_app(host, ServeSettings(**cast(dict[str, Any], options)))


class SynapseApp(Starlette):
    """The Starlette app, but the POST routes that carry the load (embed,
    rerank, tokenize) are served directly: what Observed and ApiKey do for
    them is done here, without the middleware stack, exception middleware,
    routing and ``Request`` that every request would otherwise pay for. Every
    other request, and any request under a ``root_path``, goes through
    Starlette as usual (where the same routes are mounted too)."""

    def __init__(self, service: Service, api_key: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state.synapse = service
        self.service = service
        self.key = Key(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _head_bytes(scope) > MAX_HEAD_BYTES:
            # A head that arrived whole, in one read: the servers bound only
            # one still arriving (see uvicorn_connection), so it is bounded here.
            await self._too_large(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = DIRECT.get(scope["path"])
            if route is not None:
                await self._direct(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _direct(self, route: Direct, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        service = self.service
        metrics = service.metrics
        tracing = service.tracing
        # off: one attribute read, and nothing of OpenTelemetry loaded
        span = None if tracing is None else tracing.request(scope, scope["path"])
        metrics.inside += 1
        status = 500
        try:
            refusal = self.key.refusal(scope)
            if refusal is not None:
                status = refusal.status_code
                await refusal(scope, receive, send)
            else:
                status = await route.serve(service, scope, receive, send)
            metrics.answered += 1
        finally:
            metrics.inside -= 1
            took = time.perf_counter() - start
            metrics.observe(scope["path"], status, took)
            if span is not None:
                span.end(status)
            if service.settings.access_log:
                logged(scope, scope["path"], status, took)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        answer = error_response(
            HTTPError(
                431,
                ErrorBody(
                    error=f"the request's headers are over {MAX_HEAD_BYTES} bytes; "
                    "send shorter headers",
                    error_type="header-too-large",
                ),
                {"Connection": "close"},
            ),
            scope["path"],
        )
        await answer(scope, receive, send)
        self.service.metrics.observe("other", 431, time.perf_counter() - start)


def _head_bytes(scope: Scope) -> int:
    """The size of a request's headers and target, about as they were sent."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
    for name, value in scope["headers"]:
        size += len(name) + len(value) + 4
    return size


class Key:
    """The API key check: with a key set, every route but ``/health`` needs
    ``Authorization: Bearer <key>``, the key compared in constant time and the
    scheme in any case (RFC 7235); more than one ``Authorization`` header is
    a 400, whichever of them holds the key."""

    def __init__(self, key: str | None) -> None:
        self.expected = None if key is None else key.encode()

    def refusal(self, scope: Scope) -> Response | None:
        """The 401 (or 400) answer for a request without the key, or None."""
        if self.expected is None or scope["path"] in OPEN_PATHS:
            return None
        given = [value for name, value in scope["headers"] if name == b"authorization"]
        if len(given) > 1:
            return error_response(
                HTTPError(
                    400,
                    ErrorBody(
                        error=f"{len(given)} Authorization headers; send exactly one, "
                        "'Authorization: Bearer <key>'",
                        error_type="invalid-header",
                        field="Authorization",
                    ),
                ),
                scope["path"],
            )
        scheme, _, credentials = (given[0] if given else b"").strip().partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self.expected):
            return None
        problem = "missing" if not given else "wrong"
        return error_response(
            HTTPError(
                401,
                ErrorBody(
                    error=f"{problem} API key; send the header 'Authorization: Bearer <key>'",
                    error_type="unauthorized",
                ),
                {"WWW-Authenticate": "Bearer"},
            ),
            scope["path"],
        )


class Observed:
    """Counts every answer by route and status, with its latency."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.metrics = service.metrics
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        route = path if path in ROUTE_LABELS else "other"
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.metrics.answered += 1

        tracing = self.service.tracing
        span = None
        if tracing is not None and route not in UNTRACED:
            span = tracing.request(scope, route)
        self.metrics.inside += 1
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.inside -= 1
            took = time.perf_counter() - start
            self.metrics.observe(route, status, took)
            if span is not None:
                span.end(status)
            if self.service.settings.access_log:
                logged(scope, route, status, took)


class ApiKey:
    """:class:`Key`'s check as middleware, for the routes Starlette serves."""

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        self.app = app
        self.key = Key(key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.key.refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    return error_response(exc, request.url.path)


async def _synapse_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SynapseError)
    return error_response(synapse_error(service_of(request), exc), request.url.path)


async def _starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    hint = {
        404: f"no route {request.url.path}; see the routes in the Synapse HTTP docs",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    # Starlette's 405 carries ``Allow`` (the route's methods): passed on
    headers = dict(exc.headers) if exc.headers else None
    answer = HTTPError(exc.status_code, ErrorBody(error=hint, error_type=kind), headers)
    return error_response(answer, request.url.path)


async def _unexpected(request: Request, exc: Exception) -> Response:
    return error_response(unexpected(exc), request.url.path)
