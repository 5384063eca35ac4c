"""``synapse serve``: the HTTP server's command line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import anyio
import attrs
import click

from synapse_core.cli import catalog_option, load_config

from .settings import MIB, ServeSettings

ENV_API_KEY = "SYNAPSE_API_KEY"


@click.command("serve")
@catalog_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
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
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Longest a call may take (X-Synapse-Timeout-Ms may shorten it).",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=1),
    default=2 * MIB,
    show_default=True,
    help="Larger request bodies are answered 413.",
)
@click.option(
    "--max-inputs",
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="More inputs in one request are answered 413.",
)
@click.option(
    "--shutdown-grace",
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, how long requests in flight may still run.",
)
@click.option(
    "--preload",
    multiple=True,
    metavar="MODEL",
    help="Start MODEL's worker before serving (repeat for several models).",
)
@click.option(
    "--coalesce/--no-coalesce",
    default=True,
    show_default=True,
    help="Serve small embed requests that wait for a busy model together, in shared "
    "batches (overrides the catalog's 'coalesce').",
)
@click.option(
    "--backend",
    type=click.Choice(["asyncio", "trio"]),
    default="asyncio",
    show_default=True,
    help="asyncio serves with uvicorn, trio with hypercorn.",
)
@click.pass_obj
def serve_command(
    state: object,
    catalog: Path | None,
    host: str,
    port: int,
    api_key: str | None,
    request_timeout: float,
    max_body_bytes: int,
    max_inputs: int,
    shutdown_grace: float,
    preload: tuple[str, ...],
    coalesce: bool,
    backend: str,
) -> None:
    """Serve the catalog's models over HTTP (OpenAI and TEI-compatible routes).

    Binds 127.0.0.1 unless --host says otherwise and starts no worker until a
    model is called, or --preload names it. SIGTERM or SIGINT stops after
    requests in flight finish (a second signal stops at once); every worker's
    exit is confirmed before the command exits.
    """
    from .server import Listening, backend_options, serve  # the server's libraries load only here

    config = attrs.evolve(load_config(catalog), coalesce=coalesce)
    settings = ServeSettings(
        api_key=api_key or None,
        request_timeout_s=request_timeout,
        max_body_bytes=max_body_bytes,
        max_inputs=max_inputs,
        shutdown_grace_s=shutdown_grace,
        preload=preload,
    )
    logging.basicConfig(level=logging.INFO, format="synapse: %(message)s", stream=sys.stderr)
    plugins = getattr(state, "plugins", None)

    def listening(where: Listening) -> None:
        click.echo(f"synapse: serving on {where.url}", err=True)
        click.echo(f"synapse: models: {', '.join(where.models) or '(none)'}", err=True)
        if where.unavailable:
            names = ", ".join(where.unavailable)
            click.echo(f"synapse: not servable here: {names} (see 'synapse catalog')", err=True)

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
