"""GPU memory accounting on the simulated device: each worker's weights once,
each admitted shape its measured (else estimated) MiB; a full GPU waits and
refuses at the deadline, never evicts; refunds only after a worker's exit is
confirmed; a killed worker restarts once and loses no accounting."""

from __future__ import annotations

import functools
import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

import synapse_core as synapse
import synapse_cuda.plugin
from synapse_core.plugin import Shape
from synapse_core.policy import Wait
from synapse_core.testing import eventually
from synapse_cuda import costs
from synapse_cuda.device import simulated_mib

from .conftest import DEADLINE_S, REFERENCE, TINY, config, deadline, host, simulated_only, tiny

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

NAME = "bert-cls"
WEIGHTS = TINY / NAME / "model.safetensors"
BUCKETS = [32, 64]
BATCH = 4
OPTIONS = {"buckets": BUCKETS, "max_batch": BATCH}


def weights_estimate(precision: str = "fp16") -> int:
    return costs.estimate_weights(WEIGHTS.stat().st_size, precision)


def shape_estimate(bucket: int, precision: str = "fp16") -> int:
    config = json.loads((TINY / NAME / "config.json").read_text(encoding="utf-8"))
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    return costs.estimate_shape(Shape(bucket, BATCH), 16_384, hidden, heads, precision)


def table(precision: str = "fp16") -> Path:
    device = synapse_cuda.plugin.TRANSPORT.device(0)
    return costs.table_path(device.name, WEIGHTS, precision)


def measured_charge() -> int:
    """One worker's charge with one 32-token shape, as its worker measured it."""
    measured = costs.read_table(table())
    assert measured.weights is not None
    return measured.weights + measured.shapes["32x4"]


def reserved(h: synapse.Host, lane: str = "cuda:0") -> int:
    return h.snapshot().lanes[lane].reserved


@simulated_only
@asyncio_only
async def test_weights_once_per_worker_and_each_shape_measured_by_the_worker() -> None:
    ref = REFERENCE[NAME]
    short, long = ref["texts"][0], " ".join(ref["texts"])
    async with host(config(tiny(NAME, **OPTIONS), tiny(NAME, **OPTIONS) | {"name": "b"})) as h:
        await h.embed(NAME, [short], deadline=deadline())
        first = weights_estimate() + shape_estimate(32)
        assert reserved(h) == first
        await h.embed(NAME, [long], deadline=deadline(), truncate=True)
        assert reserved(h) == first + shape_estimate(64)
        await h.embed("b", [short], deadline=deadline())  # a second worker: its own weights
        assert reserved(h) == 2 * first + shape_estimate(64)
        lane = h.snapshot().lanes["cuda:0"]
        assert lane.capacity == costs.capacity_mib(simulated_mib())
    # What the workers measured (the simulated device's estimate) is on record.
    measured = costs.read_table(table())
    assert measured.weights == weights_estimate()
    assert measured.shapes == {"32x4": shape_estimate(32), "64x4": shape_estimate(64)}


@simulated_only
@asyncio_only
async def test_what_was_measured_is_charged_instead_of_the_estimate() -> None:
    target = table()
    costs.record(target, 100)  # as workers on this kind of GPU measured before
    costs.record(target, 7, Shape(32, BATCH))
    assert shape_estimate(32) != 7
    async with host(config(tiny(NAME, **OPTIONS))) as h:
        await h.embed(NAME, [REFERENCE[NAME]["texts"][0]], deadline=deadline())
        # The worker measured its own weights as it loaded, before its first
        # admission: that is charged, with the shape's earlier measurement.
        assert reserved(h) == weights_estimate() + 7
    assert costs.read_table(target).weights == weights_estimate()


@simulated_only
@asyncio_only
async def test_a_float32_model_is_charged_for_float32() -> None:
    async with host(config(tiny(NAME, precision="fp32", **OPTIONS))) as h:
        await h.embed(NAME, ["hello"], deadline=deadline())
        assert reserved(h) == weights_estimate("fp32") + shape_estimate(32, "fp32")
    gib = 1 << 30
    assert costs.estimate_weights(gib, "fp32") == costs.estimate_weights(gib, "fp16") + 512


@asyncio_only
async def test_more_than_the_gpu_holds_is_refused_at_once() -> None:
    cfg = config(tiny(NAME, **OPTIONS), lanes={"cuda:0": {"capacity": 64}})
    async with host(cfg) as h:
        with pytest.raises(synapse.CapacityExhausted, match=r"needs \d+ units; lane cuda:0"):
            await h.embed(NAME, ["hello"], deadline=deadline())
        assert reserved(h) == 0


@simulated_only
@asyncio_only
async def test_a_full_gpu_waits_for_a_refund_and_never_evicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decisions: list[object] = []
    policy = synapse_cuda.plugin.synapse_lane_full

    @functools.wraps(policy)
    def spied(request: Any, lane: Any) -> Any:
        decisions.append(decision := policy(request, lane))
        return decision

    monkeypatch.setattr(synapse_cuda.plugin, "synapse_lane_full", spied)
    one = weights_estimate() + shape_estimate(32)
    b = tiny(NAME, **OPTIONS) | {"name": "b"}
    cfg = config(tiny(NAME, **OPTIONS), b, lanes={"cuda:0": {"capacity": one + 1}})
    async with host(cfg) as h:
        await h.embed(NAME, ["hello"], deadline=deadline())
        assert reserved(h) == one
        served: list[synapse.EmbedResult] = []

        async def embed_b() -> None:
            served.append(await h.embed("b", ["hello"], deadline=deadline()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(embed_b)
            # b's worker does not fit: the policy waits; the first worker's idle
            # shape is not evicted (that would free nothing on the GPU).
            await eventually(lambda: bool(decisions), timeout=DEADLINE_S)
            assert decisions == [Wait()] and not served and reserved(h) == one
            # Retiring the first model confirms its worker's exit and refunds it: b fits.
            await h.retire(NAME)
        assert len(served) == 1 and reserved(h) == one


@asyncio_only
async def test_a_killed_worker_restarts_once_and_loses_no_accounting() -> None:
    async with host(config(tiny(NAME, **OPTIONS))) as h:
        first = await h.embed(NAME, ["hello world"], deadline=deadline())
        worker = h.snapshot().lanes["cuda:0"].workers[0]
        assert worker.pid is not None
        assert reserved(h) == measured_charge() > 0
        os.kill(worker.pid, signal.SIGKILL)
        # The dead generation's reservation is refunded once its exit is
        # confirmed, and only then; the next call charges the new one's.
        await eventually(lambda: h.snapshot().lanes["cuda:0"].workers[0].pid != worker.pid)
        await eventually(lambda: reserved(h) == 0)
        again = await h.embed(NAME, ["hello world"], deadline=deadline())
        lane = h.snapshot().lanes["cuda:0"]
        assert lane.workers[0].restarts == 1 and lane.workers[0].generation == 2
        # the new generation's own measurement (the simulated device's is the same)
        assert reserved(h) == measured_charge()
    assert first.vectors == again.vectors
