"""The shortcuts group's whole-call pairs, run once on both backends.

``python -m benchmarks --only shortcuts`` times ``host.embed`` with each
speed shortcut switched off and on (see :mod:`benchmarks.shortcuts`); its
figures are the ones docs/performance.md reports. The one shortcut left,
the head start, has no piece of its own to time in a tight loop: what it
buys shows only against a worker in another process.
"""

from __future__ import annotations

import attrs
import pytest

from benchmarks import shortcuts
from benchmarks.harness import SMOKE
from benchmarks.shortcut_switches import CONTROL, SHORTCUTS


@pytest.mark.anyio
@pytest.mark.subprocess
async def test_whole_calls_with_and_without_each_shortcut(anyio_backend: str) -> None:
    """Runs the shortcuts group's whole-call pairs (timed by ``python -m
    benchmarks --only shortcuts``), so they keep working on both backends."""
    pytest.importorskip("synapse_mock_transport")
    found = await shortcuts.call_pairs(
        attrs.evolve(SMOKE, repetitions=1), [CONTROL, *SHORTCUTS], anyio_backend
    )
    assert sorted(found) == sorted([CONTROL, *SHORTCUTS])
    for series in found.values():
        assert all(v > 0 for v in series["on_p50_us"] + series["off_p50_us"])
