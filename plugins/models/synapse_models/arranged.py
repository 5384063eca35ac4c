"""A folder's weights arranged for its family, and what follows the body."""

from __future__ import annotations

from typing import Any

import attrs

from .families.protocol import Family
from .heads import Ending


@attrs.frozen
class Weights:
    """A folder's arranged weights: its family's body and what follows it."""

    family: Family
    body: Any
    ending: Ending
    #: the output's size: a vector's dimensions, or a head's labels
    dims: int
    #: what the graph ends in (``Layout.graph_end``), in its cached file's name
    end: str = "mean-norm"
