"""One model that cannot serve does not take the server down: ``/health``
reflects the server and names nothing; ``/v1/models`` and ``/info`` (behind
the key) show that model unavailable with its reason, its paths shortened,
and the other models keep serving. In-process, both anyio backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import synapse_core as synapse
from synapse_core.plugin import Launched, LaunchRequest
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

KEY = "k-123"
AUTH = {"Authorization": f"Bearer {KEY}"}


class BrokenFolder(InProcessTransport):
    """Model ``broken``'s worker cannot start: its tokenizer file (named by
    its absolute path, as a loader's error does) does not match its weights."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    async def launch(self, request: LaunchRequest) -> Launched:
        if request.model.name == "broken":
            raise RuntimeError(
                f"{self.folder / 'tokenizer.json'} has 30522 tokens, the weights 250002"
            )
        return await super().launch(request)


def card(listing: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in listing["data"] if c["id"] == name)


async def test_a_model_that_cannot_start_leaves_health_alone_and_shows_unavailable(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "models" / "broken"
    config = host_config(model("e"), model("broken"))
    plugins = [transport_plugin(BrokenFolder(folder))]
    async with synapse.open_host(config, plugins=plugins) as host:
        app = create_app(host, ServeSettings(api_key=KEY))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            before = (await http.get("/v1/models", headers=AUTH)).json()
            assert card(before, "broken")["available"] is True
            failed = await http.post(
                "/embed", json={"inputs": "x"}, params={"model": "broken"}, headers=AUTH
            )
            assert failed.status_code == 503, failed.text
            assert str(tmp_path) not in failed.text

            health = await http.get("/health")  # no key: what a load balancer sees
            assert health.status_code == 200, health.text
            assert "tokenizer" not in health.text and str(tmp_path) not in health.text

            listing = (await http.get("/v1/models", headers=AUTH)).json()
            broken = card(listing, "broken")
            assert broken["available"] is False
            assert "tokenizer.json has 30522 tokens" in broken["reason"]
            assert card(listing, "e")["available"] is True and "reason" not in card(listing, "e")
            info = (await http.get("/info", params={"model": "broken"}, headers=AUTH)).json()
            assert info["available"] is False and "tokenizer.json" in info["reason"]
            for answer in (listing, info):
                assert str(tmp_path) not in str(answer)

            served = await http.post("/embed", json={"inputs": "x"}, headers=AUTH)
            assert served.status_code == 200, served.text


async def test_a_worker_failed_for_good_leaves_health_at_200() -> None:
    """A worker whose restart budget is spent: unavailable, the server healthy."""
    crashing = model("c", faults={"crash_on_infer": 1})
    config = host_config(model("e"), crashing, restart_budget={"max_restarts": 0})
    async with synapse.open_host(config, plugins=[transport_plugin(InProcessTransport())]) as host:
        app = create_app(host, ServeSettings())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            crashed = await http.post("/embed", json={"inputs": "x"}, params={"model": "c"})
            assert crashed.status_code == 503
            worker = host.worker("c")
            assert worker is not None
            while worker.state != "failed":  # the recovery gives up at once (budget 0)
                await worker.changed()
            assert (await http.get("/health")).status_code == 200
            listing = (await http.get("/v1/models")).json()
            assert card(listing, "c")["available"] is False
            assert "giving up" in card(listing, "c")["reason"]
            served = await http.post("/embed", json={"inputs": "x"}, params={"model": "e"})
            assert served.status_code == 200
