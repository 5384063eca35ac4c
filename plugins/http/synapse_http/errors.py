"""Errors as HTTP answers: a status, a stable ``error_type`` and a message
that says what to do.

Synapse's own errors keep their code as ``error_type``; errors of the HTTP
layer (a malformed body, a missing key) have codes of their own. Nothing
unexpected ever shows a traceback: the client gets an id to quote, and the
server log has the traceback under that id.
"""

from __future__ import annotations

import logging
import re
import uuid

import msgspec

from synapse_core import (
    DeadlineExceeded,
    OutcomeUnknown,
    Overloaded,
    Refused,
    SynapseError,
    WorkerFault,
)
from synapse_core.frontend import SHOWN_CHARS

from .schemas import UNSET, ErrorBody

log = logging.getLogger("synapse.http")

#: what a client should do about a refusal is in its message; its status here
REFUSAL_STATUS = {
    "unknown-model": 404,
    "wrong-task": 422,
    "empty-input": 422,
    "missing-query": 422,
    "invalid-text": 422,
    "empty-sequence": 422,
    "over-ceiling": 422,
    "unknown-prompt": 422,
    "unsupported-output": 422,
    # The model exists but cannot run on this machine: the server's problem.
    "transport-unavailable": 503,
}
#: Synapse errors other than refusals; anything not listed is a 503
ERROR_STATUS = {
    "overloaded": 429,
    "deadline-exceeded": 504,
    "plugin-error": 500,
    "internal-error": 500,
}
#: seconds a 429 asks the client to wait
RETRY_AFTER_S = 1


class HTTPError(Exception):
    """An answer other than 200, raised anywhere while handling a request."""

    def __init__(self, status: int, body: ErrorBody, headers: dict[str, str] | None = None):
        super().__init__(body.error)
        self.status = status
        self.body = body
        self.headers = headers or {}


def invalid(message: str, field: str, error_type: str = "invalid-body") -> HTTPError:
    return HTTPError(422, ErrorBody(error=message, error_type=error_type, field=field))


def too_large(message: str, error_type: str) -> HTTPError:
    return HTTPError(413, ErrorBody(error=message, error_type=error_type))


_PATH = re.compile(r" - at `(?P<path>\$[^`]*)`$")
#: a run of this many opening brackets (each perhaps after an object's key) is
#: what made decoding run out of stack; msgspec's own limit is deeper
_DEEP_RUN = 128
_DEEP = re.compile(rb'(?:[\[{]\s*(?:"(?:[^"\\]|\\.)*"\s*:\s*)?){%d}' % _DEEP_RUN)
_KEY = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:')


def malformed(exc: msgspec.DecodeError) -> HTTPError:
    """A body msgspec could not decode: 422 naming the field's path."""
    text = str(exc)
    match = _PATH.search(text)
    path = match["path"] if match else "$"
    what = text[: match.start()] if match else text
    return invalid(f"invalid request body at {path}: {_cut(what)}", path)


def undecodable(body: bytes, exc: Exception) -> HTTPError:
    """A body that failed to decode other than as msgspec reports (nesting
    deeper than the stack allows, which msgspec meets while skipping an
    unknown field): 422, naming the top-level field where the deep nesting
    starts when it can be found."""
    if isinstance(exc, RecursionError):
        path = _deep_field(body)
        return invalid(
            f"invalid request body at {path}: lists or objects nested too deeply; "
            "nest them less deeply (or leave out fields the route does not take)",
            path,
        )
    return invalid(f"invalid request body: {_cut(str(exc))}", "$")


def _deep_field(body: bytes) -> str:
    """``$.key`` for the top-level key whose value starts the first deep run
    of brackets in ``body``, else ``$``."""
    run = _DEEP.search(body)
    if run is None:
        return "$"
    start = run.start()
    if not body[:start].strip():
        # The run begins with the body's own brace: its first key holds the rest.
        first = _KEY.search(body, start, run.end())
        key = first[1] if first else None
    else:
        keys = list(_KEY.finditer(body, 0, start))
        key = keys[-1][1] if keys else None
    if key is None:
        return "$"
    return "$." + key.decode("utf-8", "replace")[:SHOWN_CHARS]


def _cut(text: str) -> str:
    """``text`` cut to a length an error body may echo."""
    limit = 4 * SHOWN_CHARS
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


#: an absolute file path in a message (a route such as ``/v1/models`` is kept)
_ABSOLUTE = re.compile(r"(?<![\w.~/-])/[\w.~@+%-]+(?:/[\w.~@+%-]*)+")
_ROUTE_PREFIXES = ("/v1/",)


def public(message: str) -> str:
    """``message`` with each absolute file path in it shown by its last
    component: error bodies tell a client nothing of the server's files."""
    if "/" not in message:
        return message
    return _ABSOLUTE.sub(_last_component, message)


def _last_component(match: re.Match[str]) -> str:
    path = match.group()
    if path.startswith(_ROUTE_PREFIXES):
        return path
    return path.rstrip("/").rpartition("/")[2] or path


def from_synapse(exc: SynapseError) -> HTTPError:
    """The answer for an error the host raised."""
    index = getattr(exc, "index", None) if isinstance(exc, Refused) else None
    message = public(exc.message if isinstance(exc, Refused) else str(exc))
    if isinstance(exc, Refused):
        status = REFUSAL_STATUS.get(exc.code, 422)
    else:
        status = ERROR_STATUS.get(exc.code, 503)
    body = ErrorBody(error=message, error_type=exc.code, index=UNSET if index is None else index)
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(RETRY_AFTER_S)
    # Said only where it is known: a retirement racing a call may or may not
    # have let its request reach the worker.
    if isinstance(exc, OutcomeUnknown):
        body.may_have_run = True
        body.error += "; the server did not retry it: retry only if running it twice is harmless"
    elif isinstance(exc, WorkerFault):
        body.may_have_run = False
        body.error += " (it did not run; retrying is safe)"
    if isinstance(exc, DeadlineExceeded):
        body.error += (
            "; raise the request's X-Synapse-Timeout-Ms (or the server's --request-timeout)"
        )
    return HTTPError(status, body, headers)


def unexpected(exc: BaseException) -> HTTPError:
    """A bug: logged with its traceback under a fresh id; the client gets the id."""
    error_id = uuid.uuid4().hex[:16]
    log.error(
        "internal error %s", error_id, exc_info=exc, extra={"synapse": {"error_id": error_id}}
    )
    return HTTPError(
        500,
        ErrorBody(
            error=f"internal server error; the server log has it under id {error_id}",
            error_type="internal-error",
            error_id=error_id,
        ),
    )
