"""The access log (``--access-log``): one record a request, on the logger
``synapse.access``, with the facts a log shipper indexes: the request id
(the client's ``X-Request-Id``, else one made here), method, route, model,
status and duration. With ``--log-format json`` each is one JSON object.

Off by default: a record a request costs a few microseconds of the
serving path, which a request that is not logged does not pay.
"""

from __future__ import annotations

import logging
import os

from starlette.types import Scope

log = logging.getLogger("synapse.access")
#: the most of a client's ``X-Request-Id`` kept
REQUEST_ID_CHARS = 128
#: the scope key a route leaves the model it served under (``pipeline.model_of``)
MODEL_KEY = "synapse.model"


def request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` (cut to :data:`REQUEST_ID_CHARS`), else a new one."""
    for name, value in scope["headers"]:
        if name == b"x-request-id" and value:
            given: bytes = value[:REQUEST_ID_CHARS]
            return given.decode("latin-1")
    return os.urandom(8).hex()


def logged(scope: Scope, route: str, status: int, seconds: float) -> None:
    """One access record for the request of ``scope``."""
    model = scope.get(MODEL_KEY)
    facts = {
        "request_id": request_id(scope),
        "method": scope.get("method", ""),
        "route": route,
        "model": model,
        "status": status,
        "duration_ms": round(seconds * 1000, 3),
    }
    log.info(
        "%s %s %s %d %.1f ms",
        facts["method"],
        route,
        model or "-",
        status,
        seconds * 1000,
        extra={"synapse": facts},
    )
