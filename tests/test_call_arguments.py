"""Bad arguments to embed/rerank: refused with a code and index, or a clear TypeError.

Data the caller passes (an item that is not text, a missing query) is a
``Refused`` with its own code and the offending index, like any other bad
input; the wrong kind of container or deadline is a programming error and
raises a ``TypeError`` that says what to pass. Either way nothing starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.tokenizer import VOCAB, BasicTokenizer

pytestmark = pytest.mark.anyio

Call = Callable[[synapse.Host], Awaitable[Any]]


async def outcome(make_model: Any, make_config: Any, call: Call) -> BaseException:
    """What ``call`` raised, after checking that nothing was launched."""
    transport = InProcessFakeTransport()
    cfg = make_config(make_model("m"), make_model("r", task="rerank"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(Exception) as info:
            await call(host)
        assert transport.launches == []
        assert host.snapshot().lanes == {}
    return info.value


async def test_rerank_without_a_query_is_refused_before_anything_starts(
    make_model: Any, make_config: Any
) -> None:
    error = await outcome(
        make_model, make_config, lambda h: h.rerank("r", query=None, documents=["d"])
    )
    assert isinstance(error, synapse.Refused)
    assert (error.code, error.index, error.model) == ("missing-query", None, "r")
    assert "no query given" in str(error)


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (None, "input 1 is None, not text"),
        (5, "input 1 is of type int, not text"),
        (1.5, "input 1 is of type float, not text"),
        (b"bytes", "input 1 is of type bytes, not text"),
        ("caf\udce9", "input 1 holds a lone surrogate (U+DCE9) at character 3"),
        ("\ud800", "input 1 holds a lone surrogate (U+D800) at character 0"),
    ],
)
async def test_an_item_that_is_not_text_is_refused_with_its_index(
    make_model: Any, make_config: Any, item: object, says: str
) -> None:
    error = await outcome(make_model, make_config, lambda h: h.embed("m", ["fine", item, "x"]))
    assert isinstance(error, synapse.Refused), repr(error)
    assert (error.code, error.index) == ("invalid-text", 1)
    assert says in str(error)

    # The same for a rerank document, named as a document.
    error = await outcome(
        make_model, make_config, lambda h: h.rerank("r", query="q", documents=["d", item])
    )
    assert isinstance(error, synapse.Refused), repr(error)
    assert (error.code, error.index) == ("invalid-text", 1)
    assert says.replace("input", "document") in str(error)


async def test_the_first_bad_input_is_the_one_reported(make_model: Any, make_config: Any) -> None:
    error = await outcome(make_model, make_config, lambda h: h.embed("m", ["ok", "", None]))
    assert isinstance(error, synapse.Refused)
    assert (error.code, error.index) == ("empty-sequence", 1)


@pytest.mark.parametrize(("query", "says"), [(7, "of type int"), ("q\udcff", "lone surrogate")])
async def test_a_query_that_is_not_text_is_refused(
    make_model: Any, make_config: Any, query: object, says: str
) -> None:
    error = await outcome(
        make_model, make_config, lambda h: h.rerank("r", query=query, documents=["d"])
    )
    assert isinstance(error, synapse.Refused), repr(error)
    assert (error.code, error.index) == ("invalid-text", None)
    assert f"the query {'is ' if 'type' in says else 'holds a '}{says}" in str(error)


@pytest.mark.parametrize(
    ("texts", "says"),
    [
        (5, "texts must be a list of strings, got int"),
        (None, "texts must be a list of strings, got NoneType"),
        (b"abc", "texts must be a list of strings, got bytes"),
        ({"a", "b"}, "texts must be a list of strings, got set"),
        ((t for t in ["a"]), "got generator; pass list(...) of it"),
        (iter(["a"]), "got list_iterator; pass list(...) of it"),
    ],
)
async def test_texts_that_are_not_a_sequence_raise_a_clear_type_error(
    make_model: Any, make_config: Any, texts: object, says: str
) -> None:
    error = await outcome(make_model, make_config, lambda h: h.embed("m", texts))
    assert type(error) is TypeError
    assert says in str(error)


async def test_documents_that_are_not_a_sequence_raise_a_clear_type_error(
    make_model: Any, make_config: Any
) -> None:
    error = await outcome(make_model, make_config, lambda h: h.rerank("r", "q", 3))
    assert type(error) is TypeError
    assert "documents must be a list of strings, got int" in str(error)


@pytest.mark.parametrize(
    ("deadline", "says"),
    [
        (5.0, "got float (for 5.0 seconds from now, pass Deadline.after(5.0))"),
        (5, "got int (for 5 seconds from now, pass Deadline.after(5))"),
        ("soon", "deadline must be a Deadline or None, got str"),
    ],
)
async def test_a_deadline_that_is_not_a_deadline_raises_a_clear_type_error(
    make_model: Any, make_config: Any, deadline: object, says: str
) -> None:
    for call in (
        lambda h: h.embed("m", ["a"], deadline=deadline),
        lambda h: h.rerank("r", "q", ["d"], deadline=deadline),
        lambda h: h.load("m", deadline=deadline),
    ):
        error = await outcome(make_model, make_config, call)
        assert type(error) is TypeError
        assert says in str(error)


async def test_a_single_string_is_still_one_text(make_model: Any, make_config: Any) -> None:
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(InProcessFakeTransport())]) as host:
        assert len((await host.embed("m", "one text")).vectors) == 1
        assert len((await host.embed("m", ("a", "b"))).vectors) == 2


@pytest.mark.parametrize(
    ("ids", "says"),
    [
        ([5, VOCAB], f"token id {VOCAB} at position 1 is past the vocabulary of model"),
        ([5, 6, -1], "token id -1 at position 2 is negative"),
        ([2**40], f"token id {2**40} at position 0 is past the vocabulary"),
        ([3, 2.0], "token id 2.0 at position 1 is of type float, not an integer"),
        ([None], "token id None at position 0 is None, not an integer"),
        ([True], "token id True at position 0 is of type bool, not an integer"),
    ],
)
async def test_a_token_id_outside_the_vocabulary_is_refused_before_any_worker_sees_it(
    make_model: Any, make_config: Any, ids: list[object], says: str
) -> None:
    error = await outcome(make_model, make_config, lambda h: h.embed("m", ["fine", ids]))
    assert isinstance(error, synapse.Refused), repr(error)
    assert (error.code, error.index) == ("invalid-token", 1)
    assert f"input 1: {says}" in str(error)

    # The same for a rerank document, named as a document.
    error = await outcome(
        make_model, make_config, lambda h: h.rerank("r", query="q", documents=[ids])
    )
    assert isinstance(error, synapse.Refused), repr(error)
    assert (error.code, error.index) == ("invalid-token", 0)
    assert f"document 0: {says}" in str(error)


class Unsized(BasicTokenizer):
    """A tokenizer that cannot tell its vocabulary's size."""

    vocab_size = None  # type: ignore[assignment]


async def test_without_a_vocabulary_size_ids_past_32_bits_are_still_refused(
    make_model: Any, make_config: Any
) -> None:
    class UnsizedTransport(InProcessFakeTransport):
        def tokenizer(self, model: Any) -> Any:
            return Unsized()

    transport = UnsizedTransport()
    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        for bad in ([2**31], [2**70], [-5]):
            with pytest.raises(synapse.Refused) as refused:
                await host.embed("m", ["fine", bad])
            assert (refused.value.code, refused.value.index) == ("invalid-token", 1), bad
        assert "is not a 32-bit integer" in str(await _refusal(host, [2**31]))
        assert transport.launches == []
        # Inside the bounds the ids pass (the worker takes them).
        result = await host.embed("m", [[VOCAB + 5, 2**31 - 1]])
        assert len(result.vectors) == 1


async def _refusal(host: synapse.Host, ids: list[int]) -> synapse.Refused:
    with pytest.raises(synapse.Refused) as refused:
        await host.embed("m", [ids])
    return refused.value


async def test_a_tokenizer_that_fails_to_size_its_vocabulary_is_a_plugin_error(
    make_model: Any, make_config: Any
) -> None:
    class Broken(BasicTokenizer):
        def vocab_size(self) -> int:
            raise RuntimeError("no vocabulary file")

    class BrokenTransport(InProcessFakeTransport):
        def tokenizer(self, model: Any) -> Any:
            return Broken()

    cfg = make_config(make_model("m"))
    async with synapse.open_host(cfg, plugins=[transport_plugin(BrokenTransport())]) as host:
        with pytest.raises(synapse.PluginError, match=r"vocabulary size.*no vocabulary file"):
            await host.embed("m", [[5]])
        assert (await host.embed("m", ["text still works"])).vectors
