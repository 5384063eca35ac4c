"""The steps every POST route takes: bounded body, typed decoding, deadline,
the call (cancelled if the client goes away), the answer or the error."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import msgspec
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from synapse_core import (
    Deadline,
    OutcomeUnknown,
    Refused,
    SynapseError,
    WorkerFault,
)
from synapse_core.frontend import give_back, shown

from .access import MODEL_KEY
from .body import ClientGone, read_body
from .disconnect import until_disconnect
from .errors import (
    HTTPError,
    from_synapse,
    invalid,
    malformed,
    too_large,
    undecodable,
    unexpected,
)
from .integral import decode_whole, refused_a_float
from .schemas import UNSET, ErrorBody, OpenAIError, OpenAIErrorBody
from .service import Service
from .text import lone_surrogate

T = TypeVar("T")
JSON = "application/json"
#: the status logged for a request whose client went away before its answer
CLIENT_GONE = 499
HEADER_MODEL = b"x-synapse-model"
HEADER_TIMEOUT = b"x-synapse-timeout-ms"
HEADER_TRUNCATED = "X-Synapse-Truncated"
#: after answering a body this large, the memory it took is given back
GIVE_BACK_BYTES = 1024 * 1024

_encoder = msgspec.json.Encoder()
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def service_of(request: Request) -> Service:
    service: Service = request.app.state.synapse
    return service


class Incoming:
    """What a POST route reads of its request besides the body: headers and
    the query string, straight from the ASGI scope (no Starlette ``Request``:
    the hot routes are served without one)."""

    __slots__ = ("headers", "path", "scope")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.path: str = scope["path"]
        # ASGI servers give header names lower-cased
        self.headers: dict[bytes, bytes] = dict(scope["headers"])

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    def query(self, name: str) -> str | None:
        raw = self.scope["query_string"]
        # parsing the query string only when there is one saves every request the parser
        return QueryParams(raw).get(name) if raw else None


def json_response(
    payload: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(_encoder.encode(payload), status, headers, media_type=JSON)


def decode(body: bytes, schema: type[T]) -> T:
    decoder = _decoders.get(schema)
    if decoder is None:
        decoder = _decoders[schema] = msgspec.json.Decoder(schema)
    try:
        try:
            return decoder.decode(body)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            if not refused_a_float(exc):
                raise
        return decode_whole(body, schema)  # "dimensions": 65.0 is an integer
    except msgspec.DecodeError as exc:
        # msgspec refuses a lone surrogate escape ("\ud800") as if the body
        # were cut short: say what is wrong with which input instead.
        surrogate = lone_surrogate(body)
        if surrogate is not None:
            raise surrogate from None
        raise malformed(exc) from None
    except Exception as exc:  # RecursionError: nesting deeper than the stack
        raise undecodable(body, exc) from None


def check_media(headers: dict[bytes, bytes]) -> None:
    """Refuse (415) a body that is not JSON as it arrives: a ``Content-Type``
    other than ``application/json`` (or ``application/*+json``), none at all,
    or a ``Content-Encoding`` (gzip, say) the server does not undo. A browser
    page may post ``text/plain`` or a form to any address without asking
    first: those are refused unread, whether or not a key is set."""
    encoding = headers.get(b"content-encoding", b"").strip().lower()
    if encoding and encoding != b"identity":
        raise HTTPError(
            415,
            ErrorBody(
                error=f"Content-Encoding {_quoted(encoding)} is not supported; send the JSON "
                "body uncompressed",
                error_type="unsupported-encoding",
                field="Content-Encoding",
            ),
        )
    given = headers.get(b"content-type")
    media = (given or b"").partition(b";")[0].strip().lower()
    if media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    ):
        return
    what = "no Content-Type" if given is None else f"Content-Type {_quoted(given)}"
    raise HTTPError(
        415,
        ErrorBody(
            error=f"the body must be JSON, sent with 'Content-Type: application/json'; got {what}",
            error_type="unsupported-media-type",
            field="Content-Type",
        ),
    )


def _quoted(value: bytes) -> str:
    return shown(value.decode("latin-1"))


def check_count(count: int, limit: int, field: str) -> None:
    if count > limit:
        raise too_large(
            f"{count} inputs in {field} is over the limit of {limit} per request "
            "(--max-inputs); split them over several requests",
            "too-many-inputs",
        )


def deadline_of(request: Incoming, service: Service) -> Deadline:
    """The shorter of the server's request timeout and the request's
    ``X-Synapse-Timeout-Ms``, as an absolute deadline on the host's clock."""
    seconds = service.settings.request_timeout_s
    given = request.header(HEADER_TIMEOUT)
    if given is not None:
        try:
            ms = float(given)
        except ValueError:
            ms = math.nan
        if not ms > 0 or math.isinf(ms):
            raise invalid(
                f"header X-Synapse-Timeout-Ms must be a positive number of milliseconds, "
                f"got {given!r}",
                "X-Synapse-Timeout-Ms",
                "invalid-header",
            )
        seconds = min(seconds, ms / 1000)
    return Deadline.after(seconds, clock=service.host.clock)


def model_of(request: Incoming, named: str | None, service: Service, task: str) -> str:
    """The model a request names: in its body, ``?model=``, ``X-Synapse-Model``,
    or else the catalog's default for ``task``. A name given empty is no
    model's (``unknown-model``), never the default."""
    given = named
    if given is None:  # looked up only when needed: the body names it on most requests
        given = request.query("model")
        if given is None:
            given = request.header(HEADER_MODEL)
            if given is None:
                given = service.default_model(task)  # type: ignore[arg-type]
                request.scope[MODEL_KEY] = given  # for the access log
                return given
    if not given:
        raise Refused(
            "unknown-model",
            "the model's name is empty; name a catalog model (GET /v1/models lists them) "
            "or leave the name out for the default",
            model="",
        )
    request.scope[MODEL_KEY] = given  # for the access log
    return given


def truncated_header(indexes: tuple[int, ...]) -> dict[str, str]:
    return {HEADER_TRUNCATED: ",".join(map(str, indexes))} if indexes else {}


Handler = Callable[[Incoming, Service, T], Awaitable[Response]]


class PostRoute(Generic[T]):
    """A POST route taking a JSON body, as a bare ASGI endpoint: bounded body,
    typed decoding, the handler (cancelled if the client goes away), and
    every error as its JSON answer. No Starlette ``Request`` is made: these
    routes carry the load, and the app serves them directly (see
    :class:`~synapse_http.app.SynapseApp`); mounted in a Starlette route, it
    finds its service in the app's state."""

    def __init__(self, schema: type[T], handler: Handler[T], answers: object) -> None:
        self.schema = schema
        #: the type of a 200 answer's body (for the OpenAPI document)
        self.answers = answers
        self.handler = handler
        self.__name__ = handler.__name__
        self.__doc__ = handler.__doc__

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.serve(scope["app"].state.synapse, scope, receive, send)

    async def serve(self, service: Service, scope: Scope, receive: Receive, send: Send) -> int:
        """Answer one request; returns the status answered (499: the client went away)."""
        answer, size = await self._answer(service, scope, receive)
        await answer(scope, receive, send)
        status = answer.status_code
        if size >= GIVE_BACK_BYTES:
            # Everything made of a large body is gone now (it lived in
            # _answer's frame): return that memory to the system.
            del answer
            await anyio.to_thread.run_sync(give_back)
        return status

    async def _answer(
        self, service: Service, scope: Scope, receive: Receive
    ) -> tuple[Response, int]:
        """The answer to the request, and the size of its body."""
        request = Incoming(scope)
        size = 0
        try:
            check_media(request.headers)
            settings = service.settings
            raw = await read_body(
                receive,
                request.headers.get(b"content-length"),
                settings.max_body_bytes,
                settings.request_timeout_s,
            )
            size = len(raw)
            body = decode(raw, self.schema)
            handler = self.handler
            answer = await until_disconnect(receive, lambda: handler(request, service, body))
        except ClientGone:
            answer = None
        except HTTPError as exc:
            answer = error_response(exc, request.path)
        except SynapseError as exc:
            answer = error_response(synapse_error(service, exc), request.path)
        except Exception as exc:
            answer = error_response(unexpected(exc), request.path)
        if answer is None:
            answer = Response(status_code=CLIENT_GONE)  # nobody reads it
        return answer, size


def post(schema: type[T], answers: object) -> Callable[[Handler[T]], PostRoute[T]]:
    """Make ``handler(request, service, body)`` a POST route for a JSON body
    of ``schema``, answering a body of type ``answers``."""

    def wrap(handler: Handler[T]) -> PostRoute[T]:
        return PostRoute(schema, handler, answers)

    return wrap


def synapse_error(service: Service, exc: SynapseError) -> HTTPError:
    """Count the error in the metrics, and turn it into an answer."""
    if isinstance(exc, Refused):
        service.metrics.refusals.labels(exc.code).inc()
    elif isinstance(exc, OutcomeUnknown | WorkerFault):
        service.metrics.faults.labels(exc.code).inc()
    answer = from_synapse(exc)
    return unexpected(exc) if answer.status == 500 else answer


#: routes whose clients read OpenAI's error envelope
OPENAI_PATHS = ("/v1/embeddings", "/v1/models", "/embeddings")


def error_response(exc: HTTPError, path: str = "") -> Response:
    """The error as JSON: TEI's flat ``{"error", "error_type", ...}``, or on
    OpenAI's routes OpenAI's ``{"error": {"message", "type", "param", "code"}}``
    holding the same fields (the ``openai`` client then exposes them)."""
    if not path.startswith(OPENAI_PATHS):
        return json_response(exc.body, exc.status, exc.headers)
    body = exc.body
    inner = OpenAIError(
        message=body.error,
        type=body.error_type,
        param=None if body.field is UNSET else body.field,
        code=body.error_type,
        error_type=body.error_type,
        index=body.index,
        field=body.field,
        may_have_run=body.may_have_run,
        error_id=body.error_id,
    )
    return json_response(OpenAIErrorBody(error=inner), exc.status, exc.headers)
