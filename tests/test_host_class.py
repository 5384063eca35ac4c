"""``open_host(host_class=...)`` opens a subclass of Host, constructed as Host is."""

from __future__ import annotations

from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin

pytestmark = pytest.mark.anyio


class Counting(synapse.Host):
    """Sees every embed call before the host does."""

    seen: list[str]

    async def embed(self, model: str, *args: Any, **kwargs: Any) -> synapse.EmbedResult:
        self.seen = [*getattr(self, "seen", []), model]
        return await super().embed(model, *args, **kwargs)


async def test_open_host_opens_the_subclass_given() -> None:
    with pytest.raises(synapse.Refused):
        async with synapse.open_host(
            synapse.HostConfig(), plugins=[transport_plugin()], host_class=Counting
        ) as host:
            assert isinstance(host, Counting)
            try:
                await host.embed("nope", ["x"])
            finally:
                assert host.seen == ["nope"]
