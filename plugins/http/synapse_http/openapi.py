"""The OpenAPI 3.1 document of the routes, built from the route table.

Every body schema comes from the msgspec Structs that decode and encode the
bodies (``msgspec.json.schema_components``), so the document cannot drift
from what the server reads and writes. What it adds is per route: which
errors it can answer, in which shape (OpenAI's envelope on OpenAI's routes,
TEI's flat body elsewhere). ``/docs`` is Swagger UI reading ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .pipeline import OPENAI_PATHS, PostRoute, service_of
from .schemas import ErrorBody, OpenAIErrorBody
from .settings import VERSION

F = TypeVar("F", bound=Callable[..., Any])
JSON = "application/json"
REF = "#/components/schemas/{name}"

#: what each error status means, for the document
ERRORS = {
    401: "no API key, or the wrong one (`unauthorized`)",
    404: "the model is not in the catalog (`unknown-model`)",
    408: "the body did not arrive within the request timeout (`body-timeout`)",
    413: "the body or its number of inputs is over the server's limit",
    422: "an input or field the server cannot serve; `error_type` says which, `index` and "
    "`field` where",
    429: "too many calls already wait (`overloaded`); retry after `Retry-After` seconds",
    500: "a bug: `error_id` names it in the server log",
    503: "the model or server cannot serve now; `may_have_run` says whether a retry is safe",
    504: "the call's deadline passed (`deadline-exceeded`)",
}
#: the errors of a route taking a JSON body
POST_ERRORS = (401, 404, 408, 413, 422, 429, 500, 503, 504)
#: how a request names its model besides its body (see ``pipeline.model_of``)
MODEL_PARAMETERS = [
    {
        "name": "model",
        "in": "query",
        "required": False,
        "description": "the catalog model to serve (else the body's, else the default)",
        "schema": {"type": "string"},
    },
    {
        "name": "X-Synapse-Model",
        "in": "header",
        "required": False,
        "description": "the same, as a header",
        "schema": {"type": "string"},
    },
]
#: a POST request's own deadline (see ``pipeline.deadline_of``)
TIMEOUT_PARAMETER = {
    "name": "X-Synapse-Timeout-Ms",
    "in": "header",
    "required": False,
    "description": "the call's deadline in milliseconds, if shorter than the server's",
    "schema": {"type": "string"},
}


class Answer(msgspec.Struct, frozen=True):
    """What a GET route answers with 200, and the errors it may answer."""

    body: object = None
    media: str = JSON
    errors: tuple[int, ...] = (401, 500, 503)
    summary: str = ""
    #: the route serves the model ``?model=`` or ``X-Synapse-Model`` names
    names_model: bool = False


def answers(answer: Answer) -> Callable[[F], F]:
    """Say what a GET endpoint answers, for the document."""

    def mark(endpoint: F) -> F:
        endpoint.answer = answer  # type: ignore[attr-defined]
        return endpoint

    return mark


def document(routes: Iterable[Route], secured: bool, open_paths: Iterable[str]) -> dict[str, Any]:
    """The OpenAPI document of ``routes``; ``secured``: every route but
    ``open_paths`` needs the bearer key."""
    open_paths = frozenset(open_paths)
    types: list[object] = [ErrorBody, OpenAIErrorBody]
    paths: dict[str, dict[str, Any]] = {}
    operations: list[tuple[str, str, dict[str, Any]]] = []
    for route in routes:
        endpoint = route.endpoint
        methods = sorted((route.methods or set()) - {"HEAD"})
        for method in methods:
            operation = _operation(route.path, endpoint, types)
            if route.path in open_paths:
                operation["security"] = []
                operation["responses"].pop("401", None)
            operations.append((route.path, method.lower(), operation))
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    refs = dict(zip(map(_key, types), schemas, strict=True))
    for path, method, operation in operations:
        paths.setdefault(path, {})[method] = _resolved(operation, refs)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Synapse",
            "version": VERSION,
            "description": "Embedding and rerank models behind OpenAI-, TEI- and "
            "Cohere-compatible routes.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
    if secured:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc


def _operation(path: str, endpoint: object, types: list[object]) -> dict[str, Any]:
    """One operation, with ``("type", T)`` placeholders where a schema goes."""
    error = OpenAIErrorBody if path.startswith(OPENAI_PATHS) else ErrorBody
    bodies = getattr(endpoint, "routes", None)
    if isinstance(endpoint, PostRoute) or bodies is not None:
        posts: Sequence[PostRoute[Any]] = (
            [endpoint] if isinstance(endpoint, PostRoute) else list(bodies.values())  # type: ignore[union-attr]
        )
        request = _one_of([p.schema for p in posts], types)
        answer = _one_of([p.answers for p in posts], types)
        operation: dict[str, Any] = {
            "summary": _summary(endpoint),
            "parameters": [*MODEL_PARAMETERS, TIMEOUT_PARAMETER],
            "requestBody": {"required": True, "content": {JSON: {"schema": request}}},
            "responses": {"200": _response("OK", JSON, answer)},
        }
        statuses: tuple[int, ...] = POST_ERRORS
    else:
        given: Answer = getattr(endpoint, "answer", Answer())
        body = None if given.body is None else _one_of([given.body], types)
        operation = {
            "summary": given.summary or _summary(endpoint),
            "responses": {"200": _response("OK", given.media, body)},
        }
        if given.names_model:
            operation["parameters"] = list(MODEL_PARAMETERS)
        statuses = given.errors
    for status in statuses:
        operation["responses"][str(status)] = _response(
            ERRORS[status], JSON, _one_of([error], types)
        )
    return operation


def _summary(endpoint: object) -> str:
    """The first paragraph of the endpoint's docstring, as Markdown."""
    doc = getattr(endpoint, "__doc__", None) or ""
    return " ".join(doc.strip().split("\n\n")[0].split()).replace("``", "`")


def _response(description: str, media: str, schema: object) -> dict[str, Any]:
    if schema is None:
        return {"description": description}
    return {"description": description, "content": {media: {"schema": schema}}}


def _one_of(found: Sequence[object], types: list[object]) -> object:
    """A placeholder for the schema of one of ``found``'s types."""
    for t in found:
        if _key(t) not in map(_key, types):
            types.append(t)
    if len(found) == 1:
        return ("type", _key(found[0]))
    return {"anyOf": [("type", _key(t)) for t in found]}


def _key(t: object) -> str:
    return repr(t)


def _resolved(value: object, refs: dict[str, Any]) -> Any:
    """``value`` with every placeholder replaced by its schema."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "type":
        return refs[value[1]]
    if isinstance(value, dict):
        return {k: _resolved(v, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v, refs) for v in value]
    return value


def json_route(open_paths: Iterable[str]) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``/openapi.json``, for an app whose ``open_paths`` need no key."""

    @answers(Answer(body=dict[str, Any], errors=(), summary="This OpenAPI 3.1 document."))
    async def openapi_json(request: Request) -> Response:
        state = request.app.state
        cached: bytes | None = getattr(state, "openapi", None)
        if cached is None:  # built once per app, on first asking
            secured = service_of(request).settings.api_key is not None
            cached = state.openapi = msgspec.json.encode(
                document(request.app.routes, secured, open_paths)
            )
        return Response(cached, media_type=JSON)

    return openapi_json


#: Swagger UI from a CDN: the browser loads it, the server ships no assets
DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Synapse API</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>
SwaggerUIBundle({url: "openapi.json", dom_id: "#swagger-ui"});
</script>
</body>
</html>
"""


@answers(Answer(media="text/html", errors=(), summary="Swagger UI for this document."))
async def docs(request: Request) -> Response:
    return HTMLResponse(DOCS_PAGE)
