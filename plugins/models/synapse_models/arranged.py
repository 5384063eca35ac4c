"""A folder's weights arranged for its family, and what follows the body."""

from __future__ import annotations

from typing import Any

import attrs

from .families.protocol import Family
from .heads import Ending
from .token_heads import M3Heads, SpladeHead


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
    #: the heads that read every token (SPLADE's, or bge-m3's sparse and
    #: ColBERT heads), when the folder has them
    tokens: SpladeHead | M3Heads | None = None

    @property
    def token_end(self) -> str:
        """The token heads the graph ends in too, for its cached file's name
        (``""``, ``"-splade"``, ``"-m3s"``, ``"-m3c"``, ``"-m3sc"``)."""
        if isinstance(self.tokens, SpladeHead):
            return "-splade"
        if isinstance(self.tokens, M3Heads):
            sparse = "s" if self.tokens.sparse_w is not None else ""
            return f"-m3{sparse}{'c' if self.tokens.colbert_w is not None else ''}"
        return ""
