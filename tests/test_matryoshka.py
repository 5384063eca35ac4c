"""Matryoshka dimensions: ``Host.embed(..., dimensions=N)`` cuts each vector
to its first N values and normalises it again, for a model whose catalog
entry (or files) lists N; the model's own size is always accepted, and any
other size is refused (``unsupported-dimensions``) leaving the host serving.
In-process, on both anyio backends."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

import synapse_core as synapse
from synapse_core.matryoshka import applied
from synapse_core.testing import catalog_toml, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.tracing import NO_TRACE, Tracer

pytestmark = pytest.mark.anyio

#: the fake model's vectors have four values (conftest's ``dims``)
DIMS = 4


class Counting(Tracer):
    """Counts the calls that start (the route asks its tracer first)."""

    def __init__(self) -> None:
        self.started = 0

    def call(self, model: str, task: Any) -> Any:
        self.started += 1
        return NO_TRACE


def unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def host_of(make_model: Any, make_config: Any, **entry: Any) -> Any:
    config = make_config({**make_model("m"), **entry}, make_model("plain"))
    return synapse.open_host(config, plugins=[transport_plugin(InProcessFakeTransport())])


async def test_a_listed_size_cuts_and_normalises_each_vector(
    make_model: Any, make_config: Any
) -> None:
    async with host_of(make_model, make_config, matryoshka_dims=[2]) as host:
        whole = await host.embed("m", ["alpha", "beta gamma"])
        cut = await host.embed("m", ["alpha", "beta gamma"], dimensions=2)
        assert len(cut.vectors) == 2
        for full, short in zip(whole.vectors, cut.vectors, strict=True):
            assert short == pytest.approx(unit(full[:2]), abs=1e-12)
            assert math.fsum(v * v for v in short) == pytest.approx(1.0)
        # Another vector space: a client comparing identities sees it.
        assert cut.identity == f"{whole.identity};dims=2"


async def test_the_models_own_size_is_always_accepted_and_changes_nothing(
    make_model: Any, make_config: Any
) -> None:
    async with host_of(make_model, make_config) as host:
        whole = await host.embed("plain", ["alpha"])
        same = await host.embed("plain", ["alpha"], dimensions=DIMS)
        assert same.vectors == whole.vectors and same.identity == whole.identity


@pytest.mark.parametrize("loaded", [True, False], ids=["size-known", "size-unknown"])
async def test_an_unlisted_size_is_refused_and_the_host_goes_on(
    make_model: Any, make_config: Any, loaded: bool
) -> None:
    async with host_of(make_model, make_config, matryoshka_dims=[2]) as host:
        if loaded:  # the worker said its size: refused before the call
            await host.load("m")
        host.tracer = calls = Counting()
        with pytest.raises(synapse.Refused) as refused:
            await host.embed("m", ["alpha"], dimensions=3)
        # Known, the size is refused before the call starts; unknown, after its rows.
        assert calls.started == (0 if loaded else 1)
        assert refused.value.code == "unsupported-dimensions"
        assert "model 'm' gives 4-dimensional vectors and it may be cut to 2" in str(refused.value)
        with pytest.raises(synapse.Refused, match="was not trained to be cut"):
            await host.embed("plain", ["alpha"], dimensions=2)
        assert len((await host.embed("m", ["alpha"], dimensions=2)).vectors[0]) == 2


async def test_a_listed_size_past_the_models_own_is_refused(
    make_model: Any, make_config: Any
) -> None:
    async with host_of(make_model, make_config, matryoshka_dims=[2, 8]) as host:
        with pytest.raises(synapse.Refused, match="dimensions 8 is not supported"):
            await host.embed("m", ["alpha"], dimensions=8)


def entry_of(normalized: bool | None) -> Any:
    """What ``applied`` reads of a catalog entry."""
    traits = SimpleNamespace(matryoshka_dims=(), normalized=normalized)
    return SimpleNamespace(spec=SimpleNamespace(name="m", matryoshka_dims=[2]), traits=traits)


def test_a_zero_vector_cut_stays_zero_rather_than_dividing_by_zero() -> None:
    rows = [[0.0, 0.0, 1.0], [3.0, 4.0, 5.0]]
    assert applied(entry_of(None), 2, rows) == [[0.0, 0.0], [0.6, 0.8]]


def test_a_model_whose_vectors_are_not_unit_length_has_them_cut_only() -> None:
    rows = [[3.0, 4.0, 5.0]]
    assert applied(entry_of(False), 2, rows) == [[3.0, 4.0]]
    assert applied(entry_of(True), 2, rows) == [[0.6, 0.8]]


def test_only_an_embed_models_vectors_are_cut(make_model: Any) -> None:
    toml = catalog_toml({**make_model("r", task="rerank"), "matryoshka_dims": [2]})
    with pytest.raises(synapse.ConfigError) as error:
        synapse.HostConfig.from_toml_text(toml, source="catalog.toml")
    assert error.value.problems == [
        "models[0].matryoshka_dims: only an embed model's vectors are cut, not a rerank model's"
    ]


def test_a_bad_size_in_the_catalog_is_refused_naming_its_path(make_model: Any) -> None:
    toml = catalog_toml({**make_model("m"), "matryoshka_dims": [64, 0]})
    with pytest.raises(synapse.ConfigError) as error:
        synapse.HostConfig.from_toml_text(toml, source="catalog.toml")
    assert error.value.problems == [
        "models[0].matryoshka_dims[1]: must be a vector size greater than 0, got 0"
    ]
