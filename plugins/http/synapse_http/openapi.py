"""The OpenAPI 3.1 document of the routes, built from the route table.

Every body schema comes from the msgspec Structs that decode and encode the
bodies (``msgspec.json.schema_components``), so the document cannot drift
from what the server reads and writes. What it adds is per route: which
errors it can answer, in which shape (OpenAI's envelope on OpenAI's routes,
TEI's flat body elsewhere). ``/docs`` is Swagger UI reading ``/openapi.json``.

The document is exact for the server that serves it: what it accepts, the
server accepts. So it also says what this server is (:class:`Served`): the
names of the models each route serves (an ``enum`` on a body's ``model``;
the query's and header's name is not always read, the body's winning, so
stays a string), their prompt names, and ``--max-inputs`` (``maxItems``).
What depends on the one model a request names (its vocabulary, ceiling,
tokenizer and size) it cannot say.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .pipeline import OPENAI_PATHS, PostRoute, service_of
from .schemas import MAX_INPUTS, PROMPTED_INPUTS, ErrorBody, OpenAIErrorBody
from .service import Service
from .settings import VERSION

F = TypeVar("F", bound=Callable[..., Any])
JSON = "application/json"
REF = "#/components/schemas/{name}"

#: what each error status means, for the document
ERRORS = {
    400: "a request the server will not read: more than one `Authorization` header "
    "(`invalid-header`)",
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
    415: "the body is not `application/json` (`unsupported-media-type`), or is compressed "
    "(`unsupported-encoding`)",
}
#: the errors of a route taking a JSON body
POST_ERRORS = (400, 401, 404, 408, 413, 415, 422, 429, 500, 503, 504)
#: the task of the models a route serves (``pipeline.model_of``'s): it refuses
#: another task's (``wrong-task``); a route not named here serves any model
TASKS = {
    "/v1/embeddings": "embed",
    "/embeddings": "embed",
    "/embed": "embed",
    "/embed_sparse": "embed",
    "/embed_all": "embed",
    "/v1/encode": "embed",
    "/rerank": "rerank",
    "/v1/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/v2/embed": "embed",
}
#: how a request names its model besides its body (see ``pipeline.model_of``)
MODEL_PARAMETERS = [
    {
        "name": "model",
        "in": "query",
        "required": False,
        # A string, not the enum of the names served: the body's ``model`` wins
        # over it (and it over the header), so a name here is not always read.
        "description": "the catalog model to serve, if the body names none "
        "(`GET /v1/models` lists them); else the catalog's first of the route's task",
        "schema": {"type": "string"},
    },
    {
        "name": "X-Synapse-Model",
        "in": "header",
        "required": False,
        "description": "the same, as a header, if neither the body nor `?model=` names one",
        "schema": {"type": "string"},
    },
]
#: a POST request's own deadline (see ``pipeline.deadline_of``)
TIMEOUT_PARAMETER = {
    "name": "X-Synapse-Timeout-Ms",
    "in": "header",
    "required": False,
    "description": "the call's deadline in milliseconds, if shorter than the server's "
    "(the server takes any positive number; the schema shows whole ones)",
    "schema": {"type": "string", "pattern": "^[1-9][0-9]{0,11}$"},
}


class Answer(msgspec.Struct, frozen=True):
    """What a GET route answers with 200, and the errors it may answer."""

    body: object = None
    media: str = JSON
    errors: tuple[int, ...] = (400, 401, 500, 503)
    summary: str = ""
    #: the route serves the model ``?model=`` or ``X-Synapse-Model`` names
    names_model: bool = False


def answers(answer: Answer) -> Callable[[F], F]:
    """Say what a GET endpoint answers, for the document."""

    def mark(endpoint: F) -> F:
        endpoint.answer = answer  # type: ignore[attr-defined]
        return endpoint

    return mark


@attrs.frozen
class Served:
    """What the document says of the server it describes, beyond its Structs."""

    #: the names of the models that can run here, by task
    models: dict[str, tuple[str, ...]]
    #: ``--max-inputs``: the most inputs one request may hold
    max_inputs: int
    #: every prompt name of the embedding models
    prompts: tuple[str, ...] = ()

    def names(self, path: str) -> list[str]:
        """The models route ``path`` serves."""
        task = TASKS.get(path)
        if task is not None:
            return list(self.models.get(task, ()))
        return sorted({name for names in self.models.values() for name in names})


def served_by(service: Service) -> Served:
    """What ``service``'s host serves, as the document says it."""
    models: dict[str, list[str]] = {}
    prompts: set[str] = set()
    for entry in service.host.catalog.entries.values():
        if entry.available:
            models.setdefault(entry.spec.task, []).append(entry.spec.name)
            if entry.spec.task == "embed":
                prompts.update(entry.spec.prompts)
    return Served(
        models={task: tuple(names) for task, names in models.items()},
        max_inputs=service.settings.max_inputs,
        prompts=tuple(sorted(prompts)),
    )


def document(
    routes: Iterable[Route], secured: bool, open_paths: Iterable[str], served: Served
) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` on the server ``served`` describes;
    ``secured``: every route but ``open_paths`` needs the bearer key."""
    open_paths = frozenset(open_paths)
    types: list[object] = [ErrorBody, OpenAIErrorBody]
    paths: dict[str, dict[str, Any]] = {}
    operations: list[tuple[str, str, dict[str, Any]]] = []
    bodies: dict[str, list[str]] = {}  # a body Struct's name: the models its route serves
    for route in routes:
        endpoint = route.endpoint
        methods = sorted((route.methods or set()) - {"HEAD"})
        names = served.names(route.path)
        for method in methods:
            operation = _operation(route.path, endpoint, types)
            if route.path in open_paths:
                operation["security"] = []
                operation["responses"].pop("401", None)
                operation["responses"].pop("400", None)
            for body in _bodies(endpoint):
                bodies.setdefault(body.__name__, []).extend(names)
            operations.append((route.path, method.lower(), operation))
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    components = {
        name: _exact(component, served, bodies.get(name)) for name, component in components.items()
    }
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
    posts = _posts(endpoint)
    if posts:
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


def _posts(endpoint: object) -> Sequence[PostRoute[Any]]:
    """The POST routes ``endpoint`` is (a :class:`PostRoute`) or serves by
    task (``POST /``'s ``routes``); none for a GET endpoint."""
    if isinstance(endpoint, PostRoute):
        return [endpoint]
    routes: dict[str, PostRoute[Any]] | None = getattr(endpoint, "routes", None)
    return list(routes.values()) if routes is not None else []


def _bodies(endpoint: object) -> list[type[Any]]:
    """The Structs of the bodies ``endpoint`` decodes."""
    return [p.schema for p in _posts(endpoint) if isinstance(p.schema, type)]


def _exact(component: Any, served: Served, names: list[str] | None) -> Any:
    """A Struct's schema with what the server adds to it: its limit on inputs
    where the Struct marks a counted list, and, where a body names its model
    or prompt, the names served (``names``: the models of the routes that
    decode this body)."""
    if isinstance(component, list):
        return [_exact(item, served, None) for item in component]
    if not isinstance(component, dict):
        return component
    out = {k: _exact(v, served, None) for k, v in component.items() if k != MAX_INPUTS}
    if component.get(MAX_INPUTS):
        out["maxItems"] = served.max_inputs
    properties = out.get("properties")
    if names is not None and isinstance(properties, dict):
        if "model" in properties:
            properties["model"] = _or_null({"enum": sorted(set(names))}, properties["model"])
        if "prompt_name" in properties:
            enum = {"enum": list(served.prompts)} if served.prompts else None
            properties["prompt_name"] = _or_null(enum, properties["prompt_name"])
            if enum is not None and "inputs" in properties:
                # a prompt named: texts only (its text cannot go in front of ids)
                out["if"] = {"properties": {"prompt_name": enum}, "required": ["prompt_name"]}
                out["then"] = {"properties": {"inputs": _exact(PROMPTED_INPUTS, served, None)}}
    return out


def _or_null(schema: dict[str, Any] | None, was: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null (``None``: null alone), keeping ``was``'s default."""
    shown: dict[str, Any] = (
        {"type": "null"} if schema is None else {"anyOf": [schema, {"type": "null"}]}
    )
    if "default" in was:
        shown["default"] = was["default"]
    return shown


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
            service = service_of(request)
            secured = service.settings.api_key is not None
            cached = state.openapi = msgspec.json.encode(
                document(request.app.routes, secured, open_paths, served_by(service))
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
