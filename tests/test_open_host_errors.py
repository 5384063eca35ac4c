"""Errors raised inside ``async with open_host()`` leave it unwrapped."""

from __future__ import annotations

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin

pytestmark = pytest.mark.anyio


async def test_error_in_the_block_is_not_wrapped_in_a_group() -> None:
    with pytest.raises(synapse.Refused) as info:
        async with synapse.open_host(synapse.HostConfig(), plugins=[transport_plugin()]) as host:
            await host.embed("nope", ["x"])
    assert info.value.code == "unknown-model"
