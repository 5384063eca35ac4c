"""Whether ``synapse serve`` traces its requests, and where to: off unless an
OTLP endpoint is given (``--otlp-endpoint``, or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``). Off, nothing of OpenTelemetry is imported
and every request takes the untraced path; on, :mod:`.otel` does the work.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .otel import OtelTracing

#: OpenTelemetry's own variables, read as its SDKs do
ENV_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
#: the service name spans carry unless ``OTEL_SERVICE_NAME`` says another
SERVICE_NAME = "synapse"
#: what tracing needs installed (the extra ``otel`` of synapse-http)
PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
INSTALL = "pip install 'synapse-http[otel]'"


def endpoint_of(given: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The OTLP endpoint to export to: ``given`` (the flag), else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``None`` (tracing off) without either."""
    return given or environ.get(ENV_OTLP_ENDPOINT) or None


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: a collector's base URL
    (``http://collector:4318``) gets the signal's path, ``/v1/traces``, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` does; a URL that ends in it is kept."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def service_name(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get(ENV_SERVICE_NAME) or SERVICE_NAME


def missing() -> str | None:
    """What to install for tracing, or ``None`` when it is installed."""
    try:
        absent = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    except ModuleNotFoundError:  # a parent package is missing
        absent = list(PACKAGES)
    if not absent:
        return None
    return "tracing needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http: " + INSTALL


def open_tracing(endpoint: str) -> OtelTracing:
    """Tracing that exports to ``endpoint`` (OTLP/HTTP) as :func:`service_name`."""
    from .otel import OtelTracing

    return OtelTracing.exporting(traces_url(endpoint), service_name())
