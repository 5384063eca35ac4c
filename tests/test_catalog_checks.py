"""Catalog values that used to fail only once a worker started or answered
are refused when the catalog is read, each naming its field's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from synapse_core import HostConfig
from synapse_core.catalog import MAX_OPTIONS_BYTES, NAMES_SHOWN, Catalog
from synapse_core.errors import ConfigError, Refused
from synapse_core.plugins import PluginHost
from synapse_core.testing import model_entry, transport_plugin
from synapse_core.wire import MAX_BATCH
from synapse_core.worker.options import MAX_BUCKETS
from synapse_mock_transport.transport import MockTransport


def catalog(*models: dict[str, Any], **settings: Any) -> Catalog:
    config = HostConfig.from_dict({"models": list(models), **settings}, source="c.toml")
    return Catalog(config, PluginHost([transport_plugin(MockTransport())]))


def problems(*models: dict[str, Any], **settings: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        catalog(*models, **settings)
    return info.value.problems


def test_an_empty_model_name_is_refused_naming_the_field() -> None:
    for name in ("", "   "):
        with pytest.raises(ConfigError) as info:
            HostConfig.from_dict({"models": [model_entry(name)]}, source="c.toml")
        (problem,) = info.value.problems
        assert problem.startswith("models[0].name: a model needs a name")


def test_vectors_too_big_for_a_frame_are_refused_naming_dims() -> None:
    (problem,) = problems(model_entry("m", dims=100_000_000))
    assert problem.startswith("models[0].options.dims: one vector of 100000000 floats")
    assert "frame limit of 67108864 bytes (max_frame_bytes)" in problem


def test_a_full_batch_too_big_for_a_frame_is_refused_naming_max_batch() -> None:
    (problem,) = problems(model_entry("m", dims=1024, max_batch=64), max_frame_bytes=65536)
    assert problem.startswith("models[0].options.max_batch: 64 vectors of 1024 floats")


def test_what_fits_a_frame_is_accepted() -> None:
    entries = catalog(model_entry("m", dims=1024, max_batch=16), max_frame_bytes=65536).entries
    assert entries["m"].available


def test_an_absurd_number_of_buckets_is_refused_naming_buckets() -> None:
    (problem,) = problems(model_entry("m", buckets=list(range(1, 200_001))))
    assert problem == (
        f"models[0].options.buckets: 200000 buckets is more than the {MAX_BUCKETS} "
        "a worker may have"
    )


def test_options_too_long_for_a_command_line_are_refused(tmp_path: Path) -> None:
    trace = f"{tmp_path}/{'x' * MAX_OPTIONS_BYTES}"  # a valid option, only too long
    (problem,) = problems(model_entry("m", trace=trace))
    assert problem.startswith("models[0].options: ")
    assert f"over the {MAX_OPTIONS_BYTES} a worker can be started with" in problem


def test_a_max_batch_over_what_a_hello_may_report_is_refused_naming_the_model() -> None:
    (problem,) = problems(model_entry("big", dims=4, max_batch=MAX_BATCH + 1))
    assert problem == (
        f"models[0].options.max_batch: model 'big' sets max_batch {MAX_BATCH + 1}, over the "
        f"{MAX_BATCH} inputs a host sends a worker at once; lower max_batch"
    )
    assert catalog(model_entry("m", dims=4, max_batch=MAX_BATCH)).entries["m"].available


def test_a_refused_model_name_lists_at_most_names_shown_of_those_that_can_run() -> None:
    names = [f"m{i:02d}" for i in range(NAMES_SHOWN + 3)]
    entries = catalog(*(model_entry(name) for name in names))
    with pytest.raises(Refused) as info:
        entries.entry("nope", "embed")
    shown = ", ".join(names[:NAMES_SHOWN])
    assert info.value.message.endswith(f"models that can run here: {shown} and 3 more")
    with pytest.raises(Refused) as info:
        entries.entry("m00", "rerank")
    assert info.value.message.endswith("embed with it, or rerank with one of: none")
