from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from synapse_core import HostConfig
from synapse_core.config import ModelSpec
from synapse_core.testing import host_config, model_entry
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import FakeWorker
from synapse_core.tokenizer import VOCAB, BasicTokenizer, Tokenizer
from synapse_core.transport import Launched, LaunchRequest

#: a fake-transport catalog entry; ``options`` override three buckets, four
#: dims and batches of two
model = functools.partial(
    model_entry,
    transport="fake",
    ceiling=200,
    defaults={"buckets": [8, 16, 32], "dims": 4, "max_batch": 2},
)
#: a host configuration with short bounds, so a broken test fails quickly
config = functools.partial(
    host_config, source="test catalog", exit_grace_s=5.0, exchange_timeout_s=10.0
)


@pytest.fixture
def make_model() -> Callable[..., dict[str, Any]]:
    return model


@pytest.fixture
def make_config() -> Callable[..., HostConfig]:
    return config


class Gate:
    """Holds worker replies of chosen frames until opened; records arrivals."""

    def __init__(self) -> None:
        self.arrived = anyio.Event()
        self.release = anyio.Event()
        self.holding = 0
        self.armed: Callable[[str, Any], bool] = lambda model, frame: False

    async def __call__(self, model: str, frame: Any) -> None:
        if self.armed(model, frame):
            self.holding += 1
            self.arrived.set()
            await self.release.wait()
            self.holding -= 1


@pytest.fixture
def gate() -> Gate:
    return Gate()


class VocabWorker(FakeWorker):
    """Fails a request holding a token id past its vocabulary, as a real worker
    does (an embedding table lookup out of range): the host passes token ids
    on unchecked."""

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        if any(token >= VOCAB for seq in batch for token in seq):
            raise IndexError("token id out of the vocabulary")
        return super().embed(batch)


class OversizedTokenizer(BasicTokenizer):
    """Claims more ids than :class:`VocabWorker`'s table has (a tokenizer paired
    with another model's worker): the host passes ids past ``VOCAB`` on."""

    def vocab_size(self) -> int:
        return 2 * VOCAB


class VocabTransport(InProcessFakeTransport):
    """The in-process fake transport, running :class:`VocabWorker`."""

    def tokenizer(self, model: ModelSpec) -> Tokenizer:
        return OversizedTokenizer()

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, VocabWorker, 6_100_000)


@pytest.fixture
def vocab_transport() -> type[InProcessFakeTransport]:
    return VocabTransport
