"""``synapse pull MODEL``: download a hub model (a cpu model with
``options.hf``, or a hub id as ``--model`` takes it) into the local Hugging
Face cache, the one download Synapse makes, and only when asked."""

from __future__ import annotations

from pathlib import Path

import click

from synapse_core.cli import catalog_option, load_config
from synapse_core.plugin import ModelSpec
from synapse_models.hub import pull


@click.command("pull")
@click.argument("model")
@catalog_option
def pull_command(model: str, catalog: Path | None) -> None:
    """Download MODEL's weights from the Hugging Face hub: a cpu model of the
    catalog with options.hf, or a hub id (ORG/NAME) for --model."""
    config = load_config(catalog)
    spec = next((m for m in config.models if m.name == model), None)
    if spec is None and "/" in model:
        spec = ModelSpec(model, "embed", "cpu", model, 1, {"hf": model})  # what --model makes
    if spec is None:
        raise click.UsageError(
            f"model {model!r} is not in the catalog ({config.source}), nor a hub id (ORG/NAME)"
        )
    repo_id = spec.options.get("hf")
    if spec.transport != "cpu" or not isinstance(repo_id, str):
        raise click.UsageError(
            f"model {model!r} names no hub id: pull is for cpu models with options.hf"
        )
    revision = spec.options.get("revision")
    try:
        folder = pull(repo_id, revision if isinstance(revision, str) else None)
    except Exception as exc:  # offline, unknown repository, network: say so, no traceback
        raise click.ClickException(f"cannot pull {repo_id}: {exc}") from None
    click.echo(f"{model}: {repo_id} in {folder}")
