"""``open_host(host_class=...)`` opens a subclass of Host, constructed as Host is;
``open_host(around_call=...)`` runs a hook around every embed and rerank call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

pytestmark = pytest.mark.anyio

R = TypeVar("R")


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


class Around:
    """An around-call hook that records what it saw and starts each call ``runs`` times."""

    def __init__(self, runs: int = 1) -> None:
        self.runs = runs
        self.seen: list[str] = []

    async def __call__(self, model: str, call: Callable[[], Awaitable[R]]) -> R:
        self.seen.append(model)
        for _ in range(self.runs - 1):
            await call()
        return await call()


async def test_around_call_runs_around_embed_and_rerank(make_model: Any, make_config: Any) -> None:
    transport = InProcessFakeTransport()
    config = make_config(make_model("e"), make_model("r", task="rerank"))
    around = Around(runs=2)
    async with synapse.open_host(
        config, plugins=[transport_plugin(transport)], around_call=around
    ) as host:
        embedded = await host.embed("e", ["one text"])
        ranked = await host.rerank("r", "a query", ["a doc", "another"])
    assert around.seen == ["e", "r"]
    assert len(embedded.vectors) == 1 and len(ranked.scores) == 2
    # ``call`` starts the call anew each time: each ran twice on its worker.
    assert len(transport.frames("infer")) == 4


@pytest.mark.parametrize(("model", "code"), [("nope", "unknown-model"), ("r", "wrong-task")])
async def test_a_call_the_catalog_refuses_never_reaches_the_hook(
    make_model: Any, make_config: Any, model: str, code: str
) -> None:
    around = Around()
    config = make_config(make_model("r", task="rerank"))
    async with synapse.open_host(config, plugins=[transport_plugin()], around_call=around) as host:
        with pytest.raises(synapse.Refused) as caught:
            await host.embed(model, ["x"])
    assert caught.value.code == code
    assert around.seen == []
