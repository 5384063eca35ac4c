"""Each speed shortcut of the serving path, timed with and without itself.

Cases come in pairs (``with``/``without``) in one pytest-benchmark group per
shortcut and backend, so a timed run shows what each shortcut buys::

    python -m pytest benchmarks/micro/test_shortcuts.py -p no:xdist --benchmark-only

The same pieces, alternated call by call, and whole ``host.embed`` calls
with each shortcut switched off and on, are the ``shortcuts`` group of
``python -m benchmarks`` (see :mod:`benchmarks.shortcuts`); its figures are
the ones docs/performance.md reports.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from benchmarks import shortcut_pieces as pieces
from benchmarks import shortcuts
from benchmarks.harness import SMOKE
from benchmarks.shortcut_switches import CONTROL, SHORTCUTS, through_pluggy
from synapse_core.cut import selection_of


@pytest.mark.parametrize("variant", ["with", "without"])
def test_direct_bucket_hook(benchmark: Any, variant: str) -> None:
    runner, worker, call = pieces.steps_rig()
    selection = selection_of(worker, runner.plugins)
    benchmark.group = "direct_bucket_hook"
    length = call.plan.longest.length
    select = selection.select
    if variant == "without":
        select = through_pluggy(selection, runner.plugins, worker.spec).select
    assert benchmark(select, length) == 16


@pytest.mark.anyio
@pytest.mark.subprocess
async def test_whole_calls_with_and_without_each_shortcut(anyio_backend: str) -> None:
    """Runs the shortcuts group's whole-call pairs (timed by ``python -m
    benchmarks --only shortcuts``), so they keep working on both backends."""
    pytest.importorskip("synapse_mock_transport")
    found = await shortcuts.call_pairs(
        attrs.evolve(SMOKE, repetitions=1), [CONTROL, *SHORTCUTS], anyio_backend
    )
    for series in found.values():
        assert all(v > 0 for v in series["on_p50_us"] + series["off_p50_us"])
