"""Several outputs from one request: dense + sparse + ColBERT vectors of a
bge-m3-style folder in one ``Host.embed_outputs`` call (one forward pass per
request) against three calls (``embed``, ``embed_sparse``, ``embed_all``:
three passes), as a ratio of their times in the same run.

The folder is the tests' tiny bge-m3 layout (``tiny-models-2/m3-multi``: an
XLM-R body of hidden size 32 with bge-m3's ``sparse_linear`` and
``colbert_linear`` heads) on onnxruntime, one thread: its forward pass is
cheap, so the figure weighs a request's whole cost (tokenising, the
exchange, the heads), not a big model's matrix products.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import anyio

from synapse_core.host import Host
from synapse_core.kinds import Kind
from synapse_core.opening import open_host
from synapse_core.testing import host_config, model_entry

from .harness import Figure, Mode, Series, Target, skipped

NAME = "m3-multi"
#: texts per request, and requests per side per repetition
TEXTS, CALLS = 32, 20
ALL = (Kind.DENSE, Kind.SPARSE, Kind.MULTI)
SENTENCE = "a man is eating food while the stock market fell sharply today"


def available() -> str:
    """Why the group cannot run here ("" when it can)."""
    for module in ("synapse_cpu", "synapse_models", "onnxruntime"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return ""


def measure(mode: Mode) -> list[Figure]:
    if skipped("outputs group", available()):
        return []
    series: Series = anyio.run(_measure, mode)
    return [
        Figure(
            "outputs_combined_ratio_vs_separate",
            "ratio",
            f"time of one embed_outputs call for dense + sparse + ColBERT vectors of {TEXTS} "
            "texts / embed + embed_sparse + embed_all of the same texts, one after another "
            "(tiny bge-m3-style folder, onnxruntime, one thread)",
            series.ratio("combined_ms", "separate_ms"),
            Target("<=", 0.6),
            series.medians("combined_ms", "separate_ms"),
        )
    ]


async def _measure(mode: Mode) -> Series:
    import synapse_cpu.plugin
    from synapse_models.testing import DATA

    folder = DATA / "tiny-models-2" / NAME
    entry = model_entry(
        NAME, transport="cpu", model_dir=str(folder), runtime="onnxruntime", threads=1
    )
    texts = _texts()
    series = Series()
    async with open_host(host_config(entry), plugins=[synapse_cpu.plugin]) as host:
        await _combined(host, texts)
        await _separate(host, texts)  # warm: the graph built, the shapes admitted
        calls = 2 if mode.name == "smoke" else CALLS
        for _ in range(mode.repetitions):
            combined = separate = 0.0
            for _ in range(calls):
                combined += await _timed(_combined(host, texts))
                separate += await _timed(_separate(host, texts))
            series.add(combined_ms=combined / calls * 1e3, separate_ms=separate / calls * 1e3)
    return series


def _texts() -> list[str]:
    words = SENTENCE.split()
    return [" ".join(words[(i * 3) % len(words) :] + words[: i % 7]) for i in range(TEXTS)]


async def _timed(call: Any) -> float:
    start = time.perf_counter()
    await call
    return time.perf_counter() - start


async def _combined(host: Host, texts: list[str]) -> None:
    await host.embed_outputs(NAME, texts, ALL, truncate=True)


async def _separate(host: Host, texts: list[str]) -> None:
    await host.embed(NAME, texts, truncate=True)
    await host.embed_sparse(NAME, texts, truncate=True)
    await host.embed_all(NAME, texts, truncate=True)
