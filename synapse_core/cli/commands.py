"""The built-in commands: ``plugins``, ``catalog``, ``embed`` and ``rerank``."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import attrs
import click

from ..catalog import Catalog
from ..config import HostConfig
from ..deadline import Deadline
from ..errors import ConfigError
from ..host import Host
from ..kinds import Kind
from ..plan import Truncate
from ..plugins import PluginHost, selected_names
from ..transport import ModelSource
from . import catalog_view, render
from .calls import (
    EmbedAsk,
    OnBatch,
    embed_all,
    outputs_all,
    rerank_all,
    serve,
    show_progress,
    spans,
)
from .inputs import Field, Inputs, from_arguments, read_jsonl
from .models import model_options
from .options import call_options, catalog_option, json_option, load_config
from .report import EXIT_FAILED, EXIT_OK, PROG

_R = TypeVar("_R")


@attrs.define
class AppState:
    """What every command invocation shares; ``ctx.obj`` of the ``synapse`` group."""

    plugins: PluginHost


def emit(doc: render.Doc, as_json: bool, lines: Callable[[], list[str]]) -> None:
    if as_json:
        click.echo(json.dumps(doc))
        return
    for line in lines():
        click.echo(line)


def gather(arguments: tuple[str, ...], file: BinaryIO | None, field: Field) -> Inputs:
    if file is None:
        return from_arguments(arguments)
    if arguments:
        raise click.UsageError(f"give {field}s as arguments or with --file, not both")
    # Standard input read as bytes may have no name at all (click's test runner).
    return read_jsonl(file, str(getattr(file, "name", "<stdin>")), field)


@contextmanager
def progress(total: int, verb: str, noun: str) -> Iterator[OnBatch]:
    """A progress bar on stderr (never stdout) for inputs sent in several batches."""
    batches = len(spans(total))
    hidden = not show_progress(batches, sys.stderr.isatty())
    label = f"{PROG}: {verb} {total} {noun} in {batches} batches"
    with click.progressbar(length=total, label=label, file=sys.stderr, hidden=hidden) as bar:
        yield bar.update


def in_batches(
    state: AppState,
    config: HostConfig,
    deadline_s: float | None,
    inputs: Inputs,
    what: tuple[str, str],
    work: Callable[[Host, Deadline, OnBatch], Awaitable[_R]],
) -> _R:
    """``work`` in a host opened for the command, told of each batch done
    (a progress bar of ``what``, say ``("embedding", "texts")``, on stderr)."""
    with progress(len(inputs.items), *what) as on_batch:
        return serve(
            config, state.plugins, deadline_s, lambda host, bound: work(host, bound, on_batch)
        )


def called_model(
    state: AppState,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
    model: str | None,
    arguments: tuple[str, ...],
) -> tuple[HostConfig, str, tuple[str, ...]]:
    """The configuration, the model to call and the rest of the arguments.

    With ``--model`` the model called is the one it gives and MODEL is left
    out: every argument (``model`` included, which click filled first) is
    an input."""
    if models:
        if len(models) > 1:
            raise click.UsageError("give --model once: this command calls one model")
        config = load_config(catalog, models, transport=transport, plugins=state.plugins)
        rest = arguments if model is None else (model, *arguments)
        return config, models[0].name, rest
    if model is None:
        raise click.UsageError("Missing argument 'MODEL'.")
    return load_config(catalog), model, arguments


def file_option(field: Field) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--file",
        "file",
        type=click.File("rb"),
        default=None,
        help=f'JSON Lines input, one {{"{field}": "..."}} object per line ("-" reads stdin).',
    )


@click.command("plugins")
@catalog_option
@json_option
@click.pass_obj
def plugins_command(state: AppState, catalog: Path | None, as_json: bool) -> int:
    """List installed plugins, the hooks they implement, and their transports.

    Exits 1 when it lists a problem (a plugin that failed to load, a hook
    that failed, a broken catalog), as ``pip check`` does, so a CI step or a
    nox session stops on a broken plugin."""
    # A diagnostic command: a broken catalog is one more problem to list.
    try:
        config, problem = load_config(catalog), ""
    except ConfigError as exc:
        config, problem = HostConfig(), str(exc)
    doc = render.plugins_doc(state.plugins, config, selected_names())
    if problem:
        doc["problems"].append(problem)
    emit(doc, as_json, lambda: render.plugins_lines(doc))
    broken = doc["problems"] or any(p["error"] for p in doc["plugins"])
    return EXIT_FAILED if broken else EXIT_OK


@click.command("catalog")
@catalog_option
@model_options()
@json_option
@click.pass_obj
def catalog_command(
    state: AppState,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
    as_json: bool,
) -> None:
    """List the catalog's models and whether each can run here (spawns nothing)."""
    config = load_config(catalog, models, transport=transport, plugins=state.plugins)
    doc = catalog_view.catalog_doc(Catalog(config, state.plugins))
    emit(doc, as_json, lambda: catalog_view.catalog_lines(doc))


def _output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--sparse`` and ``--all``: an output other than dense vectors."""
    sparse = click.option(
        "--sparse",
        "output",
        flag_value="sparse",
        help="Sparse vectors (a SPLADE or bge-m3 model's) in place of dense ones.",
    )
    every = click.option(
        "--all",
        "output",
        flag_value="multi",
        help="Every token's vector (a ColBERT head's, else the last hidden state).",
    )
    return sparse(every(command))


@click.command("embed")
@click.argument("model", required=False)
@click.argument("texts", nargs=-1)
@file_option("text")
@click.option(
    "--prompt",
    "prompt_name",
    metavar="NAME",
    help="Put the model's prompt NAME in front of each text (synapse catalog lists them).",
)
@click.option(
    "--dimensions",
    type=click.IntRange(min=1),
    metavar="N",
    help="Cut each vector to its first N values, normalised again (a model trained to be "
    "cut so: synapse catalog lists its sizes).",
)
@_output_options
@call_options
@click.pass_obj
def embed_command(
    state: AppState,
    model: str | None,
    texts: tuple[str, ...],
    file: BinaryIO | None,
    prompt_name: str | None,
    dimensions: int | None,
    output: str | None,
    truncate: Truncate,
    deadline: float | None,
    as_json: bool,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
) -> None:
    """Embed TEXTS (or the texts of --file) with MODEL.

    Prints each vector's index, dimensions, norm and first values; --json
    prints every vector in input order with the model's vector-space identity.
    --sparse prints each sparse vector's size and heaviest weights (--json:
    ``{indices, values}``), --all each text's count of token vectors.
    With --model PATH, MODEL is left out: the folder's model is called.
    """
    if prompt_name is not None and truncate == "start":
        # Cut at its start, a long text would lose the prompt put in front of it.
        raise click.UsageError("--truncate start would cut off the prompt; use --truncate end")
    if output is not None and dimensions is not None:
        raise click.UsageError("--dimensions cuts dense vectors; not with --sparse or --all")
    config, model, texts = called_model(state, catalog, models, transport, model, texts)
    inputs = gather(texts, file, "text")
    ask = EmbedAsk(prompt_name, truncate, dimensions)
    called = (state, config, model, deadline)
    _embed_texts(called, inputs, ask, None if output is None else Kind(output), as_json)


def _embed_texts(
    called: tuple[AppState, HostConfig, str, float | None],
    inputs: Inputs,
    ask: EmbedAsk,
    kind: Kind | None,
    as_json: bool,
) -> None:
    """``embed``'s call and what it prints: dense vectors, or the ``kind`` of
    output asked for (``--sparse``, ``--all``)."""
    state, config, model, deadline = called
    what = ("embedding", "texts")
    if kind is not None:
        outputs = in_batches(
            state,
            config,
            deadline,
            inputs,
            what,
            lambda host, bound, done: outputs_all(host, model, inputs, bound, done, kind, ask),
        )
        emit(render.outputs_doc(outputs), as_json, lambda: render.outputs_lines(outputs, inputs))
        return
    result = in_batches(
        state,
        config,
        deadline,
        inputs,
        what,
        lambda host, bound, done: embed_all(host, model, inputs, bound, done, ask),
    )
    emit(render.embed_doc(result), as_json, lambda: render.embed_lines(result, inputs))


@click.command("rerank")
@click.argument("model", required=False)
@click.argument("documents", nargs=-1)
@click.option("--query", "-q", required=True, help="The query to score the documents against.")
@file_option("document")
@call_options
@click.pass_obj
def rerank_command(
    state: AppState,
    model: str | None,
    documents: tuple[str, ...],
    query: str,
    file: BinaryIO | None,
    truncate: Truncate,
    deadline: float | None,
    as_json: bool,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
) -> None:
    """Score DOCUMENTS (or the documents of --file) against --query with MODEL.

    Prints documents best first with their input index; --json prints the
    scores in input order with the model's identity. With --model PATH,
    MODEL is left out: the folder's model is called.
    """
    config, model, documents = called_model(state, catalog, models, transport, model, documents)
    inputs = gather(documents, file, "document")
    result = in_batches(
        state,
        config,
        deadline,
        inputs,
        ("reranking", "documents"),
        lambda host, bound, done: rerank_all(host, model, query, inputs, bound, done, truncate),
    )
    emit(
        render.rerank_doc(result, query),
        as_json,
        lambda: render.rerank_lines(result, query, inputs),
    )


@click.command("similarity")
@click.argument("model", required=False)
@click.argument("texts", nargs=-1, metavar="FIRST OTHERS...")
@call_options
@click.pass_obj
def similarity_command(
    state: AppState,
    model: str | None,
    texts: tuple[str, ...],
    truncate: Truncate,
    deadline: float | None,
    as_json: bool,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
) -> None:
    """Embed FIRST and OTHERS with MODEL; print the cosine similarity of FIRST
    with each of OTHERS (1: same direction, 0: unrelated). With --model PATH,
    MODEL is left out: the folder's model is called."""
    config, model, texts = called_model(state, catalog, models, transport, model, texts)
    if len(texts) < 2:
        missing = "FIRST" if not texts else "OTHERS..."
        raise click.UsageError(f"Missing argument '{missing}'.")
    inputs = gather(texts, None, "text")
    ask = EmbedAsk(truncate=truncate)
    result = in_batches(
        state,
        config,
        deadline,
        inputs,
        ("embedding", "texts"),
        lambda host, bound, done: embed_all(host, model, inputs, bound, done, ask),
    )
    emit(
        render.similarity_doc(result, inputs),
        as_json,
        lambda: render.similarity_lines(result, inputs),
    )


BUILTIN: tuple[click.Command, ...] = (
    plugins_command,
    catalog_command,
    embed_command,
    rerank_command,
    similarity_command,
)
