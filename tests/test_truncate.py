"""Truncation only when asked for, and token ids given instead of text."""

from __future__ import annotations

from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer

pytestmark = pytest.mark.anyio


CEILING = 12  # positions: 10 words and the two special tokens


def words(n: int, word: str = "w") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


async def test_over_ceiling_is_refused_unless_truncation_is_asked_for(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING, dims=8))
    texts = ["short", words(30), "also short", words(11)]
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        with pytest.raises(synapse.Refused) as refused:
            await host.embed("m", texts)
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        result = await host.embed("m", texts, truncate=True)
    assert result.truncated == (1, 3)
    ids = BasicTokenizer().encode(words(30))[:10]
    assert result.vectors[1] == pytest.approx(fake_vector(ids, 8))
    # The cut text embeds exactly as its first ten words do.
    assert result.vectors[1] == pytest.approx(fake_vector(BasicTokenizer().encode(words(10)), 8))
    assert result.tokens == 1 + 10 + 2 + 10


async def test_truncate_start_keeps_the_end_of_the_text(make_model: Any, make_config: Any) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING, dims=8))
    texts = ["short", words(30), words(11), words(12)]
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        result = await host.embed("m", texts, truncate="start")
        same = await host.embed("m", texts, truncate="end")
        default = await host.embed("m", texts, truncate=True)
    assert result.truncated == (1, 2, 3) and result.tokens == 1 + 10 + 10 + 10
    # The cut text embeds exactly as its last ten words do.
    last_ten = " ".join(f"w{i}" for i in range(20, 30))
    assert result.vectors[1] == pytest.approx(fake_vector(BasicTokenizer().encode(last_ten), 8))
    assert same.vectors == default.vectors and same.vectors[1] != result.vectors[1]


async def test_a_bad_truncate_value_is_a_clear_error(make_model: Any, make_config: Any) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        with pytest.raises(ValueError, match='truncate must be a bool, "end" or "start"'):
            await host.embed("m", ["x"], truncate="left")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="got 1"):
            await host.embed("m", ["x"], truncate=1)  # type: ignore[arg-type]
        assert (await host.embed("m", ["x"])).vectors


async def test_nothing_is_cut_or_reported_when_everything_fits(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        result = await host.embed("m", ["a b", words(10)], truncate=True)
    assert result.truncated == () and result.tokens == 12


async def test_rerank_truncation_keeps_the_query_and_cuts_the_document(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("r", task="rerank", ceiling=CEILING, dims=8))
    query = "q1 q2 q3"  # 3 tokens: a document keeps 12 - 3 - 3 = 6
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        full = await host.rerank("r", query, [words(20), "d"], truncate=True)
        cut = await host.rerank("r", query, [words(6), "d"])
    assert full.truncated == (0,)
    assert full.scores == pytest.approx(cut.scores)


async def test_a_query_that_fills_the_ceiling_is_still_refused(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("r", task="rerank", ceiling=CEILING))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        with pytest.raises(synapse.Refused) as refused:
            await host.rerank("r", words(9), ["doc"], truncate=True)
    assert refused.value.code == "over-ceiling" and refused.value.index == 0


async def test_token_ids_embed_as_the_text_they_encode(make_model: Any, make_config: Any) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING, dims=8))
    ids = BasicTokenizer().encode("hello there world")
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        by_ids = await host.embed("m", [ids, [5, 6]])
        by_text = await host.embed("m", ["hello there world"])
        with pytest.raises(synapse.Refused) as empty:
            await host.embed("m", [[7], []])
        with pytest.raises(synapse.Refused) as over:
            await host.embed("m", [list(range(3, 20))])
        cut = await host.embed("m", [list(range(3, 20))], truncate=True)
    assert by_ids.vectors[0] == pytest.approx(by_text.vectors[0])
    assert by_ids.tokens == 5
    assert (empty.value.code, empty.value.index) == ("empty-sequence", 1)
    assert (over.value.code, over.value.index) == ("over-ceiling", 0)
    assert cut.truncated == (0,) and cut.vectors[0] == pytest.approx(
        fake_vector(list(range(3, 13)), 8)
    )


async def test_a_large_call_sized_by_counting_is_cut_the_same_way(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING, dims=8))
    texts = [words(3)] * 9 + [words(25)]  # more than EAGER_TEXTS: counted, not encoded
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        result = await host.embed("m", texts, truncate=True)
    assert result.truncated == (9,)
    assert result.vectors[9] == pytest.approx(fake_vector(BasicTokenizer().encode(words(10)), 8))


async def test_only_lists_of_non_negative_ints_pass_as_token_ids(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m", ceiling=CEILING))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        for bad, code in (
            ([1, "2"], "invalid-token"),
            ([1, -2], "invalid-token"),
            ([1.0, 2], "invalid-token"),
            (None, "invalid-text"),
        ):
            with pytest.raises(synapse.Refused) as refused:
                await host.embed("m", ["fine", bad])  # type: ignore[list-item]
            assert (refused.value.code, refused.value.index) == (code, 1), bad
