"""``synapse classify``: a classifier's labels of texts, or of pairs of texts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..classify import ClassifyInput, ClassifyResult
from ..plan import Truncate
from ..transport import ModelSource
from .calls import serve
from .options import call_options
from .render import Doc, clip, cut_lines, table


def inputs_of(texts: tuple[str, ...], pair: bool) -> list[ClassifyInput]:
    """The command's inputs: each text, or with ``pair`` each two texts."""
    if not pair:
        return list(texts)
    if len(texts) % 2:
        raise click.UsageError(f"--pair takes texts two at a time; {len(texts)} were given")
    return [(texts[i], texts[i + 1]) for i in range(0, len(texts), 2)]


def shown(item: ClassifyInput) -> str:
    return clip(item) if isinstance(item, str) else f"{clip(item[0], 30)} | {clip(item[1], 30)}"


def classify_doc(result: ClassifyResult, inputs: list[ClassifyInput]) -> Doc:
    return {
        "model": result.model,
        "identity": result.identity,
        "inputs": [
            {
                "index": index,
                ("text" if isinstance(item, str) else "pair"): item
                if isinstance(item, str)
                else list(item),
                "labels": [{"label": p.label, "score": p.score} for p in predictions],
            }
            for index, (item, predictions) in enumerate(
                zip(inputs, result.predictions, strict=True)
            )
        ],
        "truncated": list(result.truncated),
    }


def classify_lines(result: ClassifyResult, inputs: list[ClassifyInput]) -> list[str]:
    lines = [f"{result.model}: identity {result.identity}"]
    for index, (item, predictions) in enumerate(zip(inputs, result.predictions, strict=True)):
        lines.append(f"input {index}: {shown(item)}")
        rows = [["", p.label, f"{p.score:.4f}"] for p in predictions]
        lines.extend(table(["", "label", "score"], rows)[1:])
    return [*lines, *cut_lines(result.truncated, "input")]


@click.command("classify")
@click.argument("model", required=False)
@click.argument("texts", nargs=-1)
@click.option(
    "--pair",
    is_flag=True,
    help="Take TEXTS two at a time, each two one input (an NLI model's premise and hypothesis).",
)
@click.option("--raw-scores", is_flag=True, help="Print the logits instead of probabilities.")
@call_options
@click.pass_obj
def classify_command(
    state: Any,
    model: str | None,
    texts: tuple[str, ...],
    pair: bool,
    raw_scores: bool,
    truncate: Truncate,
    deadline: float | None,
    as_json: bool,
    catalog: Path | None,
    models: tuple[ModelSource, ...],
    transport: str,
) -> None:
    """Label TEXTS with the classifier MODEL: per input its labels, best first,
    with their probabilities (softmax, or each label's sigmoid for a
    multi-label model). --json prints them with the model's identity. With
    --model PATH, MODEL is left out: the folder's model is called."""
    from .commands import called_model  # commands is the built-in set: classify joins it in main

    config, model, texts = called_model(state, catalog, models, transport, model, texts)
    if not texts:
        raise click.UsageError("Missing argument 'TEXTS...'.")
    inputs = inputs_of(texts, pair)
    result = serve(
        config,
        state.plugins,
        deadline,
        lambda host, bound: host.classify(
            model, inputs, raw_scores=raw_scores, deadline=bound, truncate=truncate
        ),
    )
    if as_json:
        click.echo(json.dumps(classify_doc(result, inputs)))
        return
    for line in classify_lines(result, inputs):
        click.echo(line)
