"""``synapse serve``: the HTTP server's command line."""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import Any

import anyio
import attrs
import click

from synapse_core.cli import ModelSource, catalog_option, load_config, model_options

from .logs import LOG_FORMATS, configure_logging
from .settings import MIB, ServeSettings
from .tracing import (
    ENV_OTLP_ENDPOINT,
    ENV_SERVICE_NAME,
    SERVICE_NAME,
    endpoint_of,
    missing,
    service_name,
    traces_url,
)

#: every flag of ``synapse serve`` is also read from ``SYNAPSE_<FLAG>``
#: (``--max-inputs``: ``SYNAPSE_MAX_INPUTS``), as containers and units set them
ENV_PREFIX = "SYNAPSE_"
ENV_API_KEY = "SYNAPSE_API_KEY"
#: the command's own lines (where it serves, what it serves): log records, so
#: that ``--log-format json`` gives them as JSON too
log = logging.getLogger("synapse.serve")


def env(flag: str) -> dict[str, Any]:
    """``flag``'s environment variable, shown in ``--help``."""
    return {"envvar": ENV_PREFIX + flag.upper().replace("-", "_"), "show_envvar": True}


@click.command("serve")
@catalog_option
@model_options(envvar_prefix=ENV_PREFIX)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind.", **env("host")
)
@click.option(
    "--port",
    **env("port"),
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to bind (0: any free port; the URL printed says which).",
)
@click.option(
    "--api-key",
    envvar=ENV_API_KEY,
    show_envvar=True,
    default=None,
    help="Require 'Authorization: Bearer KEY' on every route but /health.",
)
@click.option(
    "--request-timeout",
    **env("request-timeout"),
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Longest a call may take (X-Synapse-Timeout-Ms may shorten it).",
)
@click.option(
    "--max-body-bytes",
    **env("max-body-bytes"),
    type=click.IntRange(min=1),
    default=2 * MIB,
    show_default=True,
    help="Larger request bodies are answered 413.",
)
@click.option(
    "--max-inputs",
    **env("max-inputs"),
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="More inputs in one request are answered 413.",
)
@click.option(
    "--shutdown-grace",
    **env("shutdown-grace"),
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, how long requests in flight may still run.",
)
@click.option(
    "--drain-grace",
    **env("drain-grace"),
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, how long the listener stays open answering /health with "
    "503 (and serving) before it closes, so a load balancer sees the server leave.",
)
@click.option(
    "--header-timeout",
    **env("header-timeout"),
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="A connection whose request head has not all arrived this long after it began is closed.",
)
@click.option(
    "--keep-alive-timeout",
    **env("keep-alive-timeout"),
    type=click.FloatRange(min=0, min_open=True),
    default=15.0,
    show_default=True,
    metavar="SECONDS",
    help="A connection with no request under way is closed after this long.",
)
@click.option(
    "--preload",
    **env("preload"),
    multiple=True,
    metavar="MODEL",
    help="Start MODEL's worker before serving (repeat for several models).",
)
@click.option(
    "--coalesce/--no-coalesce",
    **env("coalesce"),
    default=True,
    show_default=True,
    help="Serve small embed requests that wait for a busy model together, in shared "
    "batches (overrides the catalog's 'coalesce').",
)
@click.option(
    "--idle-unload-s",
    **env("idle-unload-s"),
    type=click.FloatRange(min=0, min_open=True, max=1e9),
    default=None,
    metavar="S",
    help="Let go of (retire) the workers of a model with no call for S seconds; its next "
    "call starts them again. The default of the catalog's per-model 'idle_unload_s' "
    "(overrides the catalog's top-level one). Default: never.",
)
@click.option(
    "--backend",
    **env("backend"),
    type=click.Choice(["asyncio", "trio"]),
    default="asyncio",
    show_default=True,
    help="asyncio serves with uvicorn, trio with hypercorn.",
)
@click.option(
    "--log-format",
    **env("log-format"),
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="text: one 'synapse: ...' line per record; json: one JSON object per line "
    "(time, level, logger, message and the record's fields), for log shippers.",
)
@click.option(
    "--access-log/--no-access-log",
    **env("access-log"),
    default=False,
    show_default=True,
    help="One log record a request (logger synapse.access): request id, method, route, "
    "model, status and duration; with --log-format json, one JSON object each.",
)
@click.option(
    "--otlp-endpoint",
    **env("otlp-endpoint"),
    default=None,
    metavar="URL",
    help=f"Export a trace of every request (OpenTelemetry, OTLP/HTTP protobuf) to this "
    f"collector, e.g. http://127.0.0.1:4318 (/v1/traces is added). Without it, "
    f"{ENV_OTLP_ENDPOINT} is read; with neither, nothing is traced. Spans name the "
    f"service {ENV_SERVICE_NAME} (default {SERVICE_NAME!r}).",
)
@click.pass_obj
def serve_command(
    state: object,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
    host: str,
    port: int,
    api_key: str | None,
    request_timeout: float,
    max_body_bytes: int,
    max_inputs: int,
    shutdown_grace: float,
    drain_grace: float,
    header_timeout: float,
    keep_alive_timeout: float,
    preload: tuple[str, ...],
    coalesce: bool,
    idle_unload_s: float | None,
    backend: str,
    log_format: str,
    access_log: bool,
    otlp_endpoint: str | None,
) -> None:
    """Serve the catalog's models over HTTP (OpenAI and TEI-compatible routes).

    Binds 127.0.0.1 unless --host says otherwise and starts no worker until a
    model is called, or --preload names it. --model PATH serves a model
    folder (or a cached hub id) without a catalog. Every option may be set
    from its environment variable instead (SYNAPSE_<OPTION>). SIGTERM or SIGINT stops after
    requests in flight finish (a second signal stops at once); every worker's
    exit is confirmed before the command exits.
    """
    # the server's libraries load only here
    from .server import BindError, Listening, backend_options, serve

    if api_key is None and ENV_API_KEY in os.environ:
        api_key = os.environ[ENV_API_KEY]  # click reads an empty variable as unset
    if api_key is not None and not api_key.strip():
        raise click.BadParameter(
            "the key is empty, which would turn authentication off; give a key, or leave "
            f"both --api-key and {ENV_API_KEY} unset to serve without one",
            param_hint=f"'--api-key' / {ENV_API_KEY}",
        )
    endpoint = endpoint_of(otlp_endpoint)
    if endpoint is not None and (problem := missing()) is not None:
        raise click.UsageError(problem)
    plugins = getattr(state, "plugins", None)
    config = load_config(catalog, models, transport=transport, plugins=plugins)
    config = attrs.evolve(config, coalesce=coalesce)
    if idle_unload_s is not None:
        config = attrs.evolve(config, idle_unload_s=idle_unload_s)
    settings = ServeSettings(
        api_key=api_key,
        request_timeout_s=request_timeout,
        max_body_bytes=max_body_bytes,
        max_inputs=max_inputs,
        shutdown_grace_s=shutdown_grace,
        drain_s=drain_grace,
        header_timeout_s=header_timeout,
        keep_alive_s=keep_alive_timeout,
        preload=preload,
        otlp_endpoint=endpoint,
        access_log=access_log,
    )
    configure_logging(log_format)
    if api_key is None and not loopback(host):
        log.warning(
            "serving on %s without an API key: anyone who can reach this address may call "
            "every route, /metrics included; set --api-key (or %s), or bind 127.0.0.1 "
            "behind a proxy",
            host,
            ENV_API_KEY,
        )

    def listening(where: Listening) -> None:
        log.info("serving on %s", where.url, extra={"synapse": {"url": where.url}})
        if endpoint is not None:
            url = traces_url(endpoint)
            log.info(
                "tracing requests to %s as service %r",
                url,
                service_name(),
                extra={"synapse": {"otlp_traces_url": url}},
            )
        log.info(
            "models: %s",
            ", ".join(where.models) or "(none)",
            extra={"synapse": {"models": where.models}},
        )
        if where.unavailable:
            log.info(
                "not servable here: %s (see 'synapse catalog')",
                ", ".join(where.unavailable),
                extra={"synapse": {"unavailable": where.unavailable}},
            )

    try:
        anyio.run(
            lambda: serve(
                config,
                settings,
                host=host,
                port=port,
                backend="trio" if backend == "trio" else "asyncio",
                plugins=plugins,
                on_listening=listening,
            ),
            backend=backend,
            backend_options=backend_options("trio" if backend == "trio" else "asyncio"),
        )
    except BindError as exc:
        raise click.ClickException(f"{exc.strerror}; pick another --host or --port") from None


def loopback(host: str) -> bool:
    """Whether ``host`` (an address to bind) reaches this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere
