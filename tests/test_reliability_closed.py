"""A host used after it was closed refuses with HostClosed, changes nothing
and never hangs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio
HANG_GUARD_S = 10  # turns a hang into a failure; not a timing assertion


async def test_every_method_of_a_closed_host_raises_host_closed_and_changes_nothing(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"), make_model("r", task="rerank"), make_model("idle"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["x"])
    before = host.snapshot()
    launches = len(transport.launches)
    with anyio.fail_after(HANG_GUARD_S):
        for attempt in (
            lambda: host.load("idle"),
            lambda: host.load("m"),
            lambda: host.embed("m", ["x"]),
            lambda: host.rerank("r", "q", ["d"]),
            lambda: host.retire("m"),
            lambda: host.retire("idle"),
        ):
            with pytest.raises(synapse.HostClosed, match="host is closed") as caught:
                await attempt()
            assert caught.value.code == "host-closed"
            assert isinstance(caught.value, synapse.SynapseError)
        await host.aclose()  # closing again is harmless
    assert host.snapshot() == before
    assert len(transport.launches) == launches
    assert host.worker("idle") is None


async def test_a_closed_host_refuses_before_checking_the_call(
    make_model: Any, make_config: Any
) -> None:
    """Even a call the catalog would refuse gets HostClosed: the host is the problem."""
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        pass
    with pytest.raises(synapse.HostClosed):
        await host.embed("unknown", ["x"])
