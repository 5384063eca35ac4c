"""Turning the bodies' inputs into what the host takes, and its rows into bodies."""

from __future__ import annotations

import base64
import math
import sys
from array import array
from collections.abc import Sequence
from itertools import repeat
from operator import truediv
from typing import Literal, cast

from synapse_core import Deadline, EmbedResult, Host, Refused

from .errors import invalid
from .schemas import Inputs

#: a body's ``dimensions`` (``None``: the model's own size), and its field's path
Dims = tuple[int | None, str]
#: the host's ``truncate``: refuse (``False``), or cut at the end (``True``) or that end
Cut = bool | Literal["start", "end"]


def truncation(truncate: bool | None, direction: str) -> Cut:
    """TEI's ``truncate`` and ``truncation_direction`` as the host's ``truncate``:
    ``Left`` cuts tokens at the start of a text (keeping its end)."""
    if not truncate:
        return False
    return "start" if direction.lower() == "left" else "end"


def inputs_of(value: Inputs, field: str) -> list[str | list[int]]:
    """One text, a list of texts, one list of token ids, or a list of them.

    A flat list of integers is one input (as OpenAI and TEI read it); texts
    and token-id lists may be mixed, bare integers and lists may not.
    """
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(v, int) for v in value):
        return [cast(list[int], value)]
    out: list[str | list[int]] = []
    for i, v in enumerate(value):
        if isinstance(v, int):
            raise invalid(
                f"{field}[{i}] is a bare token id in a list of inputs; give each input "
                "as a text or as a list of token ids",
                f"{field}[{i}]",
            )
        out.append(v)
    return out


async def embedded(
    host: Host,
    model: str,
    inputs: Sequence[str | Sequence[int]],
    dims: Dims,
    *,
    deadline: Deadline,
    truncate: Cut,
    prompt_name: str | None = None,
) -> EmbedResult:
    """``host.embed`` of ``inputs``, with ``dims`` (a body's size, and that
    field's path) asked for as ``dimensions``: a size the model may not be
    cut to is refused naming the field (``unsupported-dimensions``)."""
    dimensions, field = dims
    try:
        return await host.embed(
            model,
            inputs,
            deadline=deadline,
            truncate=truncate,
            prompt_name=prompt_name,
            dimensions=dimensions,
        )
    except Refused as exc:
        if exc.code != "unsupported-dimensions":
            raise
        raise invalid(exc.message, field, exc.code) from None


def normalized(vectors: list[list[float]]) -> list[list[float]]:
    out = []
    for vector in vectors:
        # hypot sums in C (and without overflow): a Python generator over
        # every element cost more than the rest of the route's own work
        norm = math.hypot(*vector)
        # map divides in C: a comprehension's loop cost more than the division
        out.append(list(map(truediv, vector, repeat(norm))) if norm > 0 else vector)
    return out


def as_base64(vector: Sequence[float]) -> str:
    """Little-endian float32 bytes, base64-encoded: what OpenAI sends."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def sigmoid(score: float) -> float:
    if score >= 0:
        return 1.0 / (1.0 + math.exp(-score))
    e = math.exp(score)
    return e / (1.0 + e)
