"""Large calls (over ``OFFLOAD_CHARS`` of text), planned in a worker thread.

Planning there does what it does on the event loop: a tokenizer that counts
only counts, and the ids are encoded chunk by chunk while earlier requests
run; one that cannot count encodes each text once (in batches where it
can), and the plan keeps the ids. Either way every input is checked before
anything is sent.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.bounds import OFFLOAD_CHARS, characters
from synapse_core.plan import BATCH_CHARS, BATCH_TEXTS
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.wire import Infer

pytestmark = pytest.mark.anyio

BOUND_S = 30.0  # bounds a broken test; not a timing claim


class Recording(BasicTokenizer):
    """The default tokenizer, recording each text it counts and encodes."""

    def __init__(self) -> None:
        self.counted: list[str] = []
        self.encoded: list[str] = []

    def count(self, text: str) -> int:
        self.counted.append(text)
        return super().count(text)

    def encode(self, text: str) -> list[int]:
        self.encoded.append(text)
        return super().encode(text)


class EncodeOnly:
    """A tokenizer with only the required methods, recording each text it encodes."""

    def __init__(self) -> None:
        self.basic = BasicTokenizer()
        self.encoded: list[str] = []
        self.batches: list[list[str]] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(text)
        return self.basic.encode(text)

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self.basic.sequence_length(ids, pair)


class Batching(EncodeOnly):
    """A tokenizer that cannot count but encodes many texts at once (as the
    CPU lane's does), recording each batch's size too."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.batches.append(list(texts))
        self.encoded += texts
        return [self.basic.encode(text) for text in texts]


class TokenizerTransport(InProcessFakeTransport):
    """The in-process fake transport, with the tokenizer it is given."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__()
        self.given = tokenizer

    def tokenizer(self, model: Any) -> Any:
        return self.given


def large_texts(count: int = 24, letters: int = 40) -> list[str]:
    """Distinct texts of 20 words (22 positions: the 32 bucket), over
    ``OFFLOAD_CHARS`` together."""
    texts = [f"t{i} " + " ".join([f"{'x' * letters}{i}"] * 19) for i in range(count)]
    assert characters(texts) > OFFLOAD_CHARS
    return texts


def expected_vector(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), 4)


async def test_a_counted_large_call_sends_its_first_request_before_its_later_texts_are_encoded(
    make_model: Any, make_config: Any, gate: Any
) -> None:
    tokenizer = Recording()
    transport = TokenizerTransport(tokenizer)
    transport.reply_gate = gate
    texts = large_texts()
    cfg = make_config(make_model("m"))  # batches of two: twelve requests
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["warm up"])
        tokenizer.counted.clear()
        tokenizer.encoded.clear()
        gate.armed = lambda model, frame: isinstance(frame, Infer)
        results: list[synapse.EmbedResult] = []

        async def call() -> None:
            results.append(await host.embed("m", texts))

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await gate.arrived.wait()
                # The first request is at the worker: every text was counted
                # (and checked), only the first requests' texts are encoded.
                assert sorted(tokenizer.counted) == sorted(texts)
                assert 2 <= len(tokenizer.encoded) <= 4
                assert set(tokenizer.encoded) <= set(texts[:4])
                gate.armed = lambda model, frame: False
                gate.release.set()
    (result,) = results
    assert result.vectors == [pytest.approx(expected_vector(t), abs=1e-6) for t in texts]
    assert Counter(tokenizer.encoded) == Counter(texts)  # each encoded once


@pytest.mark.parametrize("texts", [large_texts(), large_texts()[:12]], ids=["large", "small"])
async def test_a_tokenizer_that_cannot_count_encodes_each_text_once_in_batches(
    make_model: Any, make_config: Any, texts: list[str]
) -> None:
    tokenizer = Batching()
    transport = TokenizerTransport(tokenizer)
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        await host.embed("m", ["warm up"])
        tokenizer.encoded.clear()
        result = await host.embed("m", texts)
    assert result.vectors == [pytest.approx(expected_vector(t), abs=1e-6) for t in texts]
    assert Counter(tokenizer.encoded) == Counter(texts)
    assert tokenizer.batches == [texts]


@pytest.mark.parametrize("letters", [5, 45])  # batches of BATCH_TEXTS; of BATCH_CHARS
async def test_a_large_call_is_encoded_a_batch_at_a_time_up_to_its_first_refusal(
    make_model: Any, make_config: Any, letters: int
) -> None:
    tokenizer = Batching()
    transport = TokenizerTransport(tokenizer)
    texts = large_texts(3 * BATCH_TEXTS, letters)
    # At least the first batch's texts: no more than this many fit its bound.
    most = min(BATCH_TEXTS, BATCH_CHARS // min(map(len, texts)) + 1)
    bad = most + 1  # in the second batch
    texts[bad] = ""
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.Refused) as refused:
            await host.embed("m", texts)
    assert refused.value.index == bad
    # Two batches in order, the second holding the refused text; the rest never read.
    first, second = tokenizer.batches
    assert first + second == texts[: len(first) + len(second)]
    assert len(first) <= bad < len(first) + len(second) < len(texts)
    for batch in (first, second):  # each ends at BATCH_TEXTS or past BATCH_CHARS
        assert len(batch) == BATCH_TEXTS or characters(batch) >= BATCH_CHARS
        assert characters(batch[:-1]) < BATCH_CHARS
    assert (len(first) == BATCH_TEXTS) == (letters == 5)
    assert transport.frames("infer") == []


#: a bad last text and the refusal it gets
BAD = {
    "empty": ("", "empty-sequence"),
    "over-ceiling": ("w " * 40, "over-ceiling"),
    "lone-surrogate": ("bad \ud800 text", "invalid-text"),
    "not-text": (None, "invalid-text"),
}


@pytest.mark.parametrize("tokenizer", [Recording, Batching, EncodeOnly])
@pytest.mark.parametrize("bad", sorted(BAD))
async def test_a_bad_text_at_the_end_of_a_large_call_is_refused_before_anything_is_sent(
    make_model: Any, make_config: Any, tokenizer: type[Any], bad: str
) -> None:
    transport = TokenizerTransport(tokenizer())
    text, kind = BAD[bad]
    texts: list[Any] = [*large_texts(), text]
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.Refused) as refused:
            await host.embed("m", texts)
        assert (refused.value.code, refused.value.index) == (kind, len(texts) - 1)
        assert transport.frames("infer") == []
        # The host keeps serving.
        fine = await host.embed("m", texts[:-1])
    assert fine.vectors == [pytest.approx(expected_vector(t), abs=1e-6) for t in texts[:-1]]
