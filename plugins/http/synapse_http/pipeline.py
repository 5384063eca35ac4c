"""The steps every POST route takes: bounded body, typed decoding, deadline,
the call (cancelled if the client goes away), the answer or the error."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec
import sniffio
from starlette.requests import Request
from starlette.responses import Response

from synapse_core import Deadline, OutcomeUnknown, Refused, SynapseError, WorkerFault

from .errors import HTTPError, from_synapse, invalid, malformed, too_large, unexpected
from .schemas import ErrorBody
from .service import Service

T = TypeVar("T")
JSON = "application/json"
#: the status logged for a request whose client went away before its answer
CLIENT_GONE = 499
HEADER_MODEL = "x-synapse-model"
HEADER_TIMEOUT = "x-synapse-timeout-ms"
HEADER_TRUNCATED = "X-Synapse-Truncated"

_encoder = msgspec.json.Encoder()
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def service_of(request: Request) -> Service:
    service: Service = request.app.state.synapse
    return service


def json_response(
    payload: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(_encoder.encode(payload), status, headers, media_type=JSON)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes (before reading
    any of it when Content-Length already says so)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _body_too_large(int(declared), limit)
    chunks, size = [], 0
    # Bounded: a client that stops sending mid-body (or a server that stops
    # passing it on while shutting down) must not hold the request forever.
    with anyio.move_on_after(timeout_s) as waited:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _body_too_large(size, limit)
            chunks.append(chunk)
    if waited.cancelled_caught:
        raise HTTPError(
            408,
            ErrorBody(
                error=f"the request body did not arrive within {timeout_s:g} s",
                error_type="body-timeout",
            ),
        )
    return b"".join(chunks)


def _body_too_large(size: int, limit: int) -> HTTPError:
    return too_large(
        f"request body of {size} bytes or more is over the limit of {limit} bytes "
        "(--max-body-bytes); send fewer inputs per request",
        "payload-too-large",
    )


def decode(body: bytes, schema: type[T]) -> T:
    decoder = _decoders.get(schema)
    if decoder is None:
        decoder = _decoders[schema] = msgspec.json.Decoder(schema)
    try:
        return decoder.decode(body)  # type: ignore[no-any-return]
    except msgspec.DecodeError as exc:
        raise malformed(exc) from None


def check_count(count: int, limit: int, field: str) -> None:
    if count > limit:
        raise too_large(
            f"{count} inputs in {field} is over the limit of {limit} per request "
            "(--max-inputs); split them over several requests",
            "too-many-inputs",
        )


def deadline_of(request: Request, service: Service) -> Deadline:
    """The shorter of the server's request timeout and the request's
    ``X-Synapse-Timeout-Ms``, as an absolute deadline on the host's clock."""
    seconds = service.settings.request_timeout_s
    given = request.headers.get(HEADER_TIMEOUT)
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


def model_of(request: Request, named: str | None, service: Service, task: str) -> str:
    """The model a request names: in its body, ``?model=``, ``X-Synapse-Model``,
    or else the catalog's default for ``task``."""
    return (
        named
        # parsing the query string only when there is one saves every request the parser
        or (request.query_params.get("model") if request.scope["query_string"] else None)
        or request.headers.get(HEADER_MODEL)
        or service.default_model(task)  # type: ignore[arg-type]
    )


def truncated_header(indexes: tuple[int, ...]) -> dict[str, str]:
    return {HEADER_TRUNCATED: ",".join(map(str, indexes))} if indexes else {}


def refuse_direction(direction: str) -> None:
    if direction.lower() != "right":
        raise invalid(
            "$.truncation_direction: 'Left' is not supported; Synapse cuts at the end of a text",
            "$.truncation_direction",
        )


async def until_disconnect(request: Request, work: Callable[[], Awaitable[T]]) -> T | None:
    """Run ``work``; if the client disconnects first, cancel it and return None.

    A cancelled call is abandoned by its caller only: the host drains the
    worker's reply and lets go of everything, as for any cancelled caller.
    """
    if sniffio.current_async_library() == "asyncio":
        return await _until_disconnect_asyncio(request, work)
    outcome: list[T] = []
    failure: list[Exception] = []

    async def watch() -> None:
        await _disconnected(request)
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            outcome.append(await work())
        except Exception as exc:  # raised as is, not in a group
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return outcome[0] if outcome else None


async def _until_disconnect_asyncio(request: Request, work: Callable[[], Awaitable[T]]) -> T | None:
    """The same on asyncio, with a bare watcher task: a task group per
    request costs several event-loop passes more, on every request."""
    scope = anyio.CancelScope()

    def gone(task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            task.exception()  # a broken receive counts as a disconnect; retrieved here
            scope.cancel()

    watcher = asyncio.get_running_loop().create_task(_disconnected(request))
    watcher.add_done_callback(gone)
    try:
        with scope:
            return await work()
        return None  # cancelled: the client went away
    finally:
        watcher.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


Handler = Callable[[Request, Service, T], Awaitable[Response]]


def post(schema: type[T]) -> Callable[[Handler[T]], Callable[[Request], Awaitable[Response]]]:
    """Make ``handler(request, service, body)`` a Starlette endpoint for a JSON body."""

    def wrap(handler: Handler[T]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            service = service_of(request)
            try:
                settings = service.settings
                raw = await read_body(request, settings.max_body_bytes, settings.request_timeout_s)
                body = decode(raw, schema)
                answer = await until_disconnect(request, lambda: handler(request, service, body))
            except HTTPError as exc:
                return error_response(exc, request.url.path)
            except SynapseError as exc:
                return error_response(synapse_error(service, exc), request.url.path)
            except Exception as exc:
                return error_response(unexpected(exc), request.url.path)
            if answer is None:
                return Response(status_code=CLIENT_GONE)  # nobody reads it
            return answer

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        return endpoint

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
OPENAI_PATHS = ("/v1/embeddings", "/v1/models")


def error_response(exc: HTTPError, path: str = "") -> Response:
    """The error as JSON: TEI's flat ``{"error", "error_type", ...}``, or on
    OpenAI's routes OpenAI's ``{"error": {"message", "type", "param", "code"}}``
    holding the same fields (the ``openai`` client then exposes them)."""
    if not path.startswith(OPENAI_PATHS):
        return json_response(exc.body, exc.status, exc.headers)
    fields = msgspec.to_builtins(exc.body)
    inner = {
        "message": fields["error"],
        "type": fields["error_type"],
        "param": fields.get("field"),
        "code": fields["error_type"],
        **fields,
    }
    del inner["error"]
    return json_response({"error": inner}, exc.status, exc.headers)
