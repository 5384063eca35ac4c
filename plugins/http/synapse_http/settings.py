"""What ``synapse serve`` is told on its command line, as one value."""

from __future__ import annotations

import attrs

VERSION = "0.1.0"
MIB = 1024 * 1024


@attrs.frozen
class ServeSettings:
    """The HTTP face's own settings; the host's are in its catalog."""

    #: clients must send ``Authorization: Bearer <api_key>`` (``None``: no check)
    api_key: str | None = None
    #: the longest a call may take; a request's ``X-Synapse-Timeout-Ms`` may shorten it
    request_timeout_s: float = 30.0
    #: larger bodies are answered 413 before they are read
    max_body_bytes: int = 2 * MIB
    #: more inputs in one request are answered 413
    #: OpenAI's own limit per request (LangChain sends up to 1000 at once)
    max_inputs: int = 2048
    #: how long in-flight requests may run on after a shutdown signal
    shutdown_grace_s: float = 20.0
    #: after a shutdown signal, how long the listener stays open answering
    #: ``/health`` with 503 (so a load balancer sees it) before it closes
    drain_s: float = 5.0
    #: a request head must have arrived this long after its first byte
    header_timeout_s: float = 10.0
    #: a connection with no request under way is closed after this long
    keep_alive_s: float = 15.0
    #: models to start before serving (the rest start on their first call)
    preload: tuple[str, ...] = ()
    #: the OTLP/HTTP collector to export request traces to (``None``: no tracing)
    otlp_endpoint: str | None = None
    #: one log record a request (logger ``synapse.access``)
    access_log: bool = False
