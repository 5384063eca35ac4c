"""An exit confirmed late is recorded as such, and the placement gate's
replay of the stream accepts it: unconfirmed, then confirmed, then refunded."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_certify.gate import check
from synapse_core.hookspecs import hookimpl
from synapse_core.observation import ShapeRefunded, WorkerExited
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio
HANG_GUARD_S = 20  # turns a hang into a failure; not a timing assertion


class Events:
    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def synapse_observe(self, event: Any) -> None:
        self.events.append(event)


async def test_an_exit_confirmed_late_is_recorded_and_passes_the_placement_gate(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True
    sink = Events()
    cfg = make_config(make_model("m"), exit_grace_s=0.02, certify_observation=True)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport), sink]) as host:
            await host.embed("m", ["x"])
            await host.retire("m")
            assert host.snapshot().worker("m").state == "exit_unconfirmed"
            transport.launches[0].process.confirm_exit()
            await eventually(lambda: host.snapshot().worker("m").state == "exited")
    kinds = [
        (type(e).__name__, getattr(e, "confirmed", None))
        for e in sink.events
        if isinstance(e, WorkerExited | ShapeRefunded)
    ]
    assert kinds == [("WorkerExited", False), ("WorkerExited", True), ("ShapeRefunded", None)]
    report = check(sink.events)
    assert report.ok, report.summary()
