"""The CPU lane's forward pass as a reference for other lanes' self-tests.

Published in the entry-point group ``synapse.references`` under the name of
the model it computes (``all-MiniLM-L6-v2``), so a plugin that checks its own
device's vectors (``synapse ane selftest``) finds it when synapse-cpu is
installed, without importing this package. An entry point there names a
function of no arguments that loads the model and returns an object with
``name`` (what the report calls it) and ``embed(positions)``: rows for token
id sequences that include the special tokens, as one ``[n, dims]`` array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from . import runtime


@attrs.frozen
class Reference:
    name: str
    embed: Callable[[Sequence[Sequence[int]]], runtime.Vectors]


def minilm() -> Reference:
    """all-MiniLM-L6-v2 from the model wheel, on the numpy backend."""
    model = runtime.load()

    def embed(positions: Sequence[Sequence[int]]) -> runtime.Vectors:
        # The CPU lane adds [CLS] and [SEP] itself.
        return model.embed([seq[1:-1] for seq in positions])

    return Reference("the CPU lane's numpy forward pass (synapse-cpu)", embed)
