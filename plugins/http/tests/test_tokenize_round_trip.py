"""``/tokenize``'s ids fed back to ``/embed`` give the text's vector: with
the special tokens (its default, as TEI's) or without. In-process, both
anyio backends."""

from __future__ import annotations

import httpx
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

TEXTS = ["Hello, world", "a second text, a little longer than the first"]


async def test_tokenize_then_embed_gives_the_texts_vectors() -> None:
    config = host_config(model("e"))
    async with synapse.open_host(config, plugins=[transport_plugin(InProcessTransport())]) as host:
        app = create_app(host, ServeSettings())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            wanted = (await http.post("/embed", json={"inputs": TEXTS})).json()
            for special in (True, False, None):  # None: the default, true
                body: dict[str, object] = {"inputs": TEXTS}
                if special is not None:
                    body["add_special_tokens"] = special
                tokens = (await http.post("/tokenize", json=body)).json()
                assert any(t["special"] for t in tokens[0]) is (special is not False)
                ids = [[t["id"] for t in text] for text in tokens]
                got = await http.post("/embed", json={"inputs": ids})
                assert got.status_code == 200, got.text
                assert got.json() == wanted, special
                one = await http.post("/embed", json={"inputs": ids[0]})  # bare ids
                assert one.json() == wanted[:1]
