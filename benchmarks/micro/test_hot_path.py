"""Micro-benchmarks of the serving path's synchronous pieces (pytest-benchmark).

The figures Synapse reports come from ``python -m benchmarks``; these time
the pieces one call is made of, so a change to one of them can be compared
before and after::

    python -m pytest benchmarks/micro -p no:xdist --benchmark-only --benchmark-autosave
    # change something, then
    python -m pytest benchmarks/micro -p no:xdist --benchmark-only --benchmark-compare

In the test suite they run once each, untimed (pytest-benchmark turns
timing off under xdist), which keeps them working.

Timed alone, the pieces run with warm caches; inside a real call, after the
host has slept through the worker's compute, the same work takes several
times as long (see docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import rig
from synapse_core import defaults
from synapse_core.catalog import Catalog, Entry
from synapse_core.cut import group_by_bucket
from synapse_core.plan import Item, plan_call
from synapse_core.plugins import PluginHost
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.wire import (
    Codec,
    HostFrame,
    Infer,
    Output,
    Shape,
    WorkerFrame,
    check_rows,
    rows_of,
)

BUCKETS = rig.BUCKETS
DIMS = rig.DIMS
BATCH = rig.MAX_BATCH
SHORT_TEXT = rig.SHORT_TEXT


@pytest.fixture(scope="module")
def entry() -> Entry:
    return Catalog(rig.config(), PluginHost(rig.plugins())).entry(rig.MODEL, "embed")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return rig.skewed_texts(1024)


def output(rows: int) -> Output:
    data = bytes(range(1, 5)) * (rows * DIMS)  # finite float32 values
    return Output(7, Shape(16, BATCH), rows, DIMS, data)


def test_plan_one_text(benchmark: Any, entry: Entry) -> None:
    plan = benchmark(plan_call, entry, [SHORT_TEXT])
    assert plan.items[0].length == 4


def test_plan_1024_skewed_texts(benchmark: Any, entry: Entry, texts: list[str]) -> None:
    plan = benchmark(plan_call, entry, texts)
    assert len(plan.items) == 1024


def test_group_1024_items_by_bucket(benchmark: Any, entry: Entry, texts: list[str]) -> None:
    items = plan_call(entry, texts).items
    select = PluginHost().bucket_selector(BUCKETS, entry.spec)
    groups = benchmark(group_by_bucket, items, select, BATCH)
    assert sum(len(g.items) for g in groups) == 1024


def test_tokenizer_encode_short(benchmark: Any) -> None:
    assert len(benchmark(BasicTokenizer().encode, SHORT_TEXT)) == 2


def test_tokenizer_count_1024(benchmark: Any, texts: list[str]) -> None:
    count = BasicTokenizer().count
    counts = benchmark(lambda: [count(t) for t in texts])
    assert len(counts) == 1024


def test_encode_short_request(benchmark: Any) -> None:
    codec = Codec(HostFrame)
    frame = Infer(1, Shape(16, BATCH), "embed", [[101, 202]])
    assert benchmark(codec.encode, frame)


def test_decode_one_row_reply(benchmark: Any) -> None:
    codec = Codec(WorkerFrame)
    body = codec.encode(output(1))[4:]
    assert isinstance(benchmark(codec.decode, body), Output)


@pytest.mark.parametrize("rows", [1, BATCH])
def test_check_and_unpack_rows(benchmark: Any, rows: int) -> None:
    reply = output(rows)

    def check_and_unpack() -> list[list[float]]:
        check_rows(reply)
        return rows_of(reply)

    assert len(benchmark(check_and_unpack)) == rows


def test_bucket_choice_through_pluggy(benchmark: Any, entry: Entry) -> None:
    select = PluginHost().bucket_selector(BUCKETS, entry.spec)
    assert benchmark(select, 100) == 128


def test_first_fit_bucket_choice(benchmark: Any, entry: Entry) -> None:
    assert benchmark(defaults.synapse_select_bucket, 100, BUCKETS, entry.spec) == 128


def test_item_record(benchmark: Any) -> None:
    assert benchmark(Item, 0, SHORT_TEXT, 2, 4).length == 4
