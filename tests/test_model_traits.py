"""``Transport.traits``: prompts from a model's files become prompt names, and a
cross-encoder's logits become sigmoid scores with the logits beside them."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.plugin import ModelSpec, ModelTraits
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio

model = functools.partial(
    model_entry, ceiling=16, defaults={"buckets": [8, 16], "dims": 8, "max_batch": 4}
)


class WithTraits(InProcessTransport):
    """The mock, whose rerank model says it is a cross-encoder and whose embed
    model's files carry prompts (the mock's scores stand in for logits)."""

    def traits(self, model: ModelSpec) -> ModelTraits:
        if model.name == "broken":
            raise RuntimeError("cannot read the files")
        if model.task == "rerank":
            return ModelTraits(scorer="cross-encoder")
        if model.name == "e":
            return ModelTraits(prompts={"query": "query: ", "doc": "from the files: "})
        return ModelTraits()


def config(*extra: dict[str, Any]) -> synapse.HostConfig:
    entry = model("e") | {"prompts": {"doc": "from the catalog: "}}
    return host_config(entry, model("r", task="rerank"), model("plain"), *extra)


def host(cfg: synapse.HostConfig, transport: InProcessTransport | None = None) -> Any:
    return synapse.open_host(cfg, plugins=[transport_plugin(transport or WithTraits())])


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


async def test_a_cross_encoders_scores_are_the_sigmoid_of_its_logits() -> None:
    docs = ["one two", "three", "two one four"]
    async with host(config()) as with_traits, host(config(), InProcessTransport()) as plain:
        crossed = await with_traits.rerank("r", "one two", docs)
        as_is = await plain.rerank("r", "one two", docs)
    assert crossed.raw_scores == as_is.scores  # the worker's own outputs
    assert crossed.scores == pytest.approx([sigmoid(x) for x in as_is.scores], abs=1e-12)
    assert as_is.raw_scores == as_is.scores  # no scorer said: scores as returned
    assert with_traits.catalog.entries["r"].traits.scorer == "cross-encoder"


async def test_prompts_of_the_files_are_prompt_names_and_the_catalogs_win() -> None:
    async with host(config()) as h:
        spec = h.catalog.entries["e"].spec
        assert spec.prompts == {"query": "query: ", "doc": "from the catalog: "}
        prompted = await h.embed("e", ["hello", "world"], prompt_name="query")
        spelled = await h.embed("e", ["query: hello", "query: world"])
        assert prompted.vectors == spelled.vectors
        doc = await h.embed("e", ["hello"], prompt_name="doc")
        assert doc.vectors == (await h.embed("e", ["from the catalog: hello"])).vectors
        # A text without tokens gets no prompt: it is still refused as empty.
        with pytest.raises(synapse.Refused) as blank:
            await h.embed("e", ["hello", "   "], prompt_name="query")
        assert (blank.value.code, blank.value.index) == ("empty-sequence", 1)


async def test_an_unknown_prompt_or_ids_with_a_prompt_are_refused() -> None:
    async with host(config()) as h:
        with pytest.raises(synapse.Refused) as unknown:
            await h.embed("e", ["hello"], prompt_name="passage")
        with pytest.raises(synapse.Refused) as ids:
            await h.embed("e", ["hello", [5, 6]], prompt_name="query")
        with pytest.raises(synapse.Refused) as none:
            await h.embed("plain", ["hello"], prompt_name="query")
    assert unknown.value.code == "unknown-prompt"
    assert "its prompts: 'doc', 'query'" in unknown.value.message
    assert (ids.value.code, ids.value.index) == ("invalid-text", 1)
    assert none.value.code == "unknown-prompt" and "its prompts: none" in none.value.message


async def test_traits_that_fail_count_as_none_and_the_model_still_serves() -> None:
    async with host(config(model("broken"))) as h:
        entry = h.catalog.entries["broken"]
        assert entry.traits == ModelTraits() and entry.spec.prompts == {}
        assert len((await h.embed("broken", ["hello"])).vectors) == 1


async def test_a_long_prompt_name_is_cut_in_the_refusal() -> None:
    async with host(config()) as h:
        with pytest.raises(synapse.Refused) as unknown:
            await h.embed("e", ["hello"], prompt_name="p" * 10_000)
    assert unknown.value.code == "unknown-prompt"
    assert f"no prompt '{'p' * 200}…' (10000 characters)" in unknown.value.message
    assert len(unknown.value.message) < 400
