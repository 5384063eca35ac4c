"""A worker that fails to start (a truncated weights file, say) is not
started again by every call: each failed start counts toward the restart
budget and backs off, and calls meanwhile get its reason at once, starting no
process. Driven by a fake clock, in-process, on both anyio backends."""

from __future__ import annotations

from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.transport import Launched, LaunchRequest

pytestmark = pytest.mark.anyio

#: the first backoff (``lifecycle.START_BACKOFF_S``), doubled for each failure
START_BACKOFF_S = 1.0


class Truncated(InProcessFakeTransport):
    """Model ``m``'s worker fails to load its weights until ``fixed``."""

    def __init__(self) -> None:
        super().__init__()
        self.fixed = False
        self.starts = 0

    async def launch(self, request: LaunchRequest) -> Launched:
        if request.model.name == "m":
            self.starts += 1
            if not self.fixed:
                raise RuntimeError("model.safetensors is truncated: 1024 of 90868376 bytes")
        return await super().launch(request)


async def refused(host: synapse.Host, match: str = "truncated") -> str:
    with pytest.raises(synapse.WorkerFault, match=match) as caught:
        await host.embed("m", ["x"])
    return str(caught.value)


async def test_failed_starts_back_off_and_count_toward_the_restart_budget(
    make_model: Any, make_config: Any
) -> None:
    clock = synapse.FakeClock()
    transport = Truncated()
    budget = {"max_restarts": 3, "window_s": 60.0}
    config = make_config(make_model("m"), make_model("ok"), restart_budget=budget)
    plugins = [transport_plugin(transport)]
    async with synapse.open_host(config, plugins=plugins, clock=clock) as host:
        for _ in range(20):
            await refused(host)
        assert transport.starts == 1  # not one process per request
        assert "next start is tried in 1.0 s" in await refused(host)

        clock.advance(START_BACKOFF_S)  # the backoff passed: the next call tries again
        await refused(host)
        assert transport.starts == 2
        clock.advance(START_BACKOFF_S)  # doubled: not yet
        await refused(host)
        assert transport.starts == 2
        clock.advance(START_BACKOFF_S)
        await refused(host)
        assert transport.starts == 3

        clock.advance(30.0)  # past any backoff, but three failures within the window
        message = await refused(host)
        assert "restart budget" in message and transport.starts == 3

        # other models serve meanwhile
        assert len((await host.embed("ok", ["x"])).vectors) == 1

        clock.advance(60.0)  # the failures are older than the window
        transport.fixed = True
        assert len((await host.embed("m", ["x"])).vectors) == 1
        assert transport.starts == 4
    from synapse_core.residency import lifecycle

    assert lifecycle.START_BACKOFF_S == START_BACKOFF_S


async def test_a_load_starts_a_failed_worker_at_once(make_model: Any, make_config: Any) -> None:
    """An explicit load is the operator's say-so: no backoff."""
    clock = synapse.FakeClock()
    transport = Truncated()
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(transport)], clock=clock
    ) as host:
        await refused(host)
        transport.fixed = True
        await host.load("m")
        assert transport.starts == 2
        assert len((await host.embed("m", ["x"])).vectors) == 1
