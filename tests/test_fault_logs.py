"""A worker that exits in the middle of an exchange is logged with its exit
status, not only as the channel it closed. In-process, both anyio backends."""

from __future__ import annotations

from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio


async def test_a_worker_that_exits_mid_exchange_is_logged_with_its_status(
    make_model: Any, make_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="synapse.workers")
    config = make_config(make_model("c", faults={"crash_on_infer": 1, "only_generation": 1}))
    async with synapse.open_host(
        config, plugins=[transport_plugin(InProcessFakeTransport())]
    ) as host:
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("c", ["x"])
        worker = host.worker("c")
        assert worker is not None
        while worker.generation < 2 or worker.state != "ready":  # the restart is logged by then
            await worker.changed()
        assert len((await host.embed("c", ["x"])).vectors) == 1
    facts = [r.synapse for r in caplog.records if hasattr(r, "synapse")]
    fault = next(f for f in facts if f["event"] == "fault")
    assert fault["cause"].startswith("worker exited with status "), fault
    restart = next(f for f in facts if f["event"] == "restart")
    assert "worker exited with status" in restart["cause"]
