"""``synapse certify``: record a stream, run the placement gate, print an identity.

Exit status: 0 when the gate passes, 3 when it fails, 2 for a usage error
(click's, as for every ``synapse`` command), 1 when the input cannot be used
(unreadable stream, bad catalog, failed call). A script can thus tell "the
stream was judged and failed" from "the command was called wrongly".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import anyio
import attrs
import click

from synapse_core import Deadline, Hello, HostConfig, PluginHost, SynapseError, open_host
from synapse_core.cli import catalog_option, installed_plugins, load_config, unwrap

from . import stream
from .errors import StreamError
from .gate import GateReport, replay
from .identity import installed_identity
from .recorder import Recorder

EXIT_ERROR = 1
EXIT_USAGE = 2  # click.UsageError's own exit status
EXIT_GATE_FAILED = 3

PluginSource = Callable[[], PluginHost]
_SOURCE = "synapse_certify.plugins"


def make_group(plugins: PluginSource = installed_plugins) -> click.Group:
    """The ``certify`` group; ``plugins`` builds the plugin host that ``record``
    and ``identity`` use (tests pass their own instead of the installed ones)."""

    @click.group("certify")
    @click.pass_context
    def certify(ctx: click.Context) -> None:
        """Record observation streams, run the placement gate, print certified identities."""
        ctx.meta[_SOURCE] = plugins

    for command in (validate, record, identity):
        certify.add_command(command)
    return certify


def _plugins(*extra: object) -> PluginHost:
    source: PluginSource = click.get_current_context().meta.get(_SOURCE, installed_plugins)
    host = source()
    for plugin in extra:
        host.add(plugin)
    for problem in host.problems:
        click.echo(f"warning: {problem}", err=True)
    return host


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise click.exceptions.Exit(EXIT_ERROR)


def _report(report: GateReport, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            click.echo(problem.line())
        click.echo(report.summary())
    raise click.exceptions.Exit(0 if report.ok else EXIT_GATE_FAILED)


@click.command("validate")
@click.argument(
    "stream_path", metavar="STREAM.jsonl", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate(stream_path: Path, as_json: bool) -> None:
    """Replay a recorded stream through the placement gate (exit 3 if it fails)."""
    try:
        events = stream.read_numbered(stream_path)
    except StreamError as exc:
        if as_json:
            click.echo(json.dumps({"ok": False, "error": str(exc), "line": exc.line}))
            raise click.exceptions.Exit(EXIT_ERROR) from None
        _fail(str(exc))
    _report(replay(events), as_json)


def _serve(
    config: HostConfig, plugins: PluginHost, model: str, texts: Sequence[str], timeout: float
) -> tuple[Hello | None, str]:
    """Run :func:`_run` to completion; a Synapse error comes out unwrapped."""
    try:
        return anyio.run(_run, config, plugins, model, texts, timeout)
    except BaseException as exc:
        error = unwrap(exc)  # a host's task group can wrap the error in a group
        if not isinstance(error, SynapseError):
            raise
        raise error from None


async def _run(
    config: HostConfig, plugins: PluginHost, model: str, texts: Sequence[str], timeout: float
) -> tuple[Hello | None, str]:
    """Embed ``texts`` (or only start the worker when there are none)."""
    async with open_host(config, plugins=plugins) as host:
        deadline = Deadline.after(timeout)
        space = ""
        if texts:
            space = (await host.embed(model, texts, deadline=deadline)).identity
        else:
            await host.load(model, deadline=deadline)
        worker = host.worker(model)
        return (worker.hello if worker else None), space


@click.command("record")
@catalog_option
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Stream file to write.",
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Deadline of the call, in seconds.",
)
@click.argument("model")
@click.argument("texts", metavar="TEXT...", nargs=-1, required=True)
def record(
    catalog: Path | None, out: Path, timeout: float, model: str, texts: tuple[str, ...]
) -> None:
    """Embed TEXTs with MODEL under certify_observation, record the stream, run the gate."""
    try:
        config = attrs.evolve(load_config(catalog), certify_observation=True)
        with Recorder(out, keep=False) as recorder:
            hello, space = _serve(config, _plugins(recorder), model, texts, timeout)
        # Validate what was written, not what was seen: the file is the record.
        events = stream.read_numbered(out)
    except SynapseError as exc:
        _fail(str(exc))
    click.echo(f"recorded {len(events)} events to {out}")
    if hello is not None:
        click.echo(f"worker: {hello.implementation} {hello.version}; vector space: {space}")
    _report(replay(events), as_json=False)


def _policy(items: Sequence[str]) -> dict[str, str]:
    policy: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--policy")
        policy[key] = value
    return policy


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@click.command("identity")
@click.option("--checkpoint", metavar="SHA256", help="SHA-256 of the model checkpoint.")
@click.option(
    "--checkpoint-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Hash this checkpoint file instead.",
)
@click.option(
    "--policy", multiple=True, metavar="KEY=VALUE", help="A conversion policy option (repeatable)."
)
@click.option(
    "--worker", metavar="IMPLEMENTATION==VERSION", help="The worker build, as its hello reports it."
)
@click.option("--model", help="Start this model's worker and read its implementation and version.")
@catalog_option
@click.option("--os-build", help="Override the OS build (default: this machine's).")
@click.option("--json", "as_json", is_flag=True, help="Print every part as JSON.")
def identity(
    checkpoint: str | None,
    checkpoint_file: Path | None,
    policy: tuple[str, ...],
    worker: str | None,
    model: str | None,
    catalog: Path | None,
    os_build: str | None,
    as_json: bool,
) -> None:
    """Print the certified identity of the installed core and plugins."""
    if (checkpoint is None) == (checkpoint_file is None):
        raise click.UsageError("give exactly one of --checkpoint and --checkpoint-file")
    if (worker is None) == (model is None):
        raise click.UsageError("give exactly one of --worker and --model")
    options = _policy(policy)
    plugins = _plugins()
    if worker is not None:
        implementation, sep, version = worker.partition("==")
        if not sep or not implementation or not version:
            raise click.BadParameter(
                f"expected IMPLEMENTATION==VERSION, got {worker!r}", param_hint="--worker"
            )
    else:
        assert model is not None
        try:
            hello, _ = _serve(load_config(catalog), plugins, model, (), 60.0)
        except SynapseError as exc:
            _fail(str(exc))
        if hello is None:
            _fail(f"model {model!r} started no worker")
        implementation, version = hello.implementation, hello.version
    if checkpoint_file is not None:
        checkpoint = _sha256_file(checkpoint_file)
    assert checkpoint is not None
    try:
        ident = installed_identity(
            checkpoint_sha256=checkpoint,
            worker_implementation=implementation,
            worker_version=version,
            conversion_policy=options,
            plugins=plugins,
            build=os_build,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint") from None
    if as_json:
        click.echo(json.dumps(ident.to_dict(), indent=2))
        return
    click.echo(ident.digest)
    click.echo(f"  core {ident.core_version}")
    for name, plugin_version in ident.plugins:
        click.echo(f"  plugin {name} {plugin_version}")
    click.echo(f"  worker {ident.worker_implementation} {ident.worker_version}")
    click.echo(f"  checkpoint {ident.checkpoint_sha256}")
    for key, value in ident.conversion_policy:
        click.echo(f"  policy {key}={value}")
    click.echo(f"  os {ident.os_build}")
