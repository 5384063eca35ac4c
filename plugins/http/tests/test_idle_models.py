"""``/metrics`` and ``/info`` show which models are resident, also once a
model idle past its ``idle_unload_s`` has let its worker go; its next request
is served. A fake clock drives it, in-process, on both anyio backends."""

from __future__ import annotations

import httpx
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio


async def test_metrics_and_info_show_resident_models() -> None:
    clock = synapse.FakeClock()
    config = host_config({**model("e"), "idle_unload_s": 30.0}, model("f"))
    plugins = [transport_plugin(InProcessTransport())]
    async with synapse.open_host(config, plugins=plugins, clock=clock) as host:
        app = create_app(host, ServeSettings())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:

            async def resident() -> tuple[str, bool]:
                metrics = (await http.get("/metrics")).text
                info = (await http.get("/info", params={"model": "e"})).json()
                line = next(
                    line
                    for line in metrics.splitlines()
                    if line.startswith('synapse_model_resident{model="e"}')
                )
                return line.rpartition(" ")[2], info["resident"]

            assert await resident() == ("0.0", False)  # never called
            assert (await http.post("/embed", json={"inputs": "x"})).status_code == 200
            assert await resident() == ("1.0", True)
            clock.advance(30.0)
            assert await host.unload_idle() == ["e"]
            assert await resident() == ("0.0", False)
            assert (await http.post("/embed", json={"inputs": "x"})).status_code == 200
            assert await resident() == ("1.0", True)
