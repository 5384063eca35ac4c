"""End to end through real fake worker subprocesses: each fault knob, one recovery."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.residency.supervisor import Supervisor
from synapse_core.testing import eventually, pid_exists, transport_plugin
from synapse_core.testing.fake import FakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]


def expected_vector(text: str, dims: int) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), dims)


def open_host(cfg: synapse.HostConfig) -> Any:
    """A host serving through the fake transport's real worker subprocesses."""
    return synapse.open_host(cfg, plugins=[transport_plugin(FakeTransport())])


#: The exchange timeout where a test waits a hang out. It also bounds each
#: generation's hello: a fake worker's start takes ~0.6 s with both cores busy,
#: and 0.5 s bounds failed under load, so this keeps a wide margin.
HANG_BOUND_S = 5.0


def exchange_bound(knob: str) -> float:
    """The exchange timeout for a fault test: short only where the test waits it
    out (a hang), since it also bounds a worker's start on a loaded machine."""
    return HANG_BOUND_S if knob == "hang_on_infer" else 30.0


def trace_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    ("knob", "error"),
    [
        ("crash_on_infer", synapse.OutcomeUnknown),
        ("malformed_on_infer", synapse.OutcomeUnknown),
        ("hang_on_infer", synapse.OutcomeUnknown),
    ],
)
async def test_inference_fault_is_not_replayed_and_recovers(
    tmp_path: Path, make_model: Any, make_config: Any, knob: str, error: type[Exception]
) -> None:
    trace = tmp_path / "trace.jsonl"
    faults = {knob: 1, "only_generation": 1}
    cfg = make_config(
        make_model("m", faults=faults, trace=str(trace)),
        exchange_timeout_s=exchange_bound(knob),
        exit_grace_s=2.0,
    )
    async with open_host(cfg) as host:
        with pytest.raises(error):
            await host.embed("m", ["the first call"])
        await host.load("m")
        result = await host.embed("m", ["the second call"])
        assert len(result.vectors) == 1
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.state, snap.restarts) == (2, "ready", 1)
        served_by = snap.pid
    assert served_by is not None and served_by != os.getpid()
    lines = trace_lines(trace)
    hellos = [line for line in lines if line["frame"] == "hello"]
    assert [h["generation"] for h in hellos] == [1, 2]
    assert not any(pid_exists(h["pid"]) for h in hellos)
    infers = [line for line in lines if line["frame"] == "infer"]
    # One infer per generation: the one that may have run was never replayed.
    assert [i["generation"] for i in infers] == [1, 2]
    assert len({i["request_id"] for i in infers}) == 2


@pytest.mark.parametrize("knob", ["crash_on_infer", "malformed_on_infer", "hang_on_infer"])
async def test_fault_of_a_request_begun_by_the_caller_is_not_replayed(
    tmp_path: Path, make_model: Any, make_config: Any, knob: str, monkeypatch: Any
) -> None:
    """A warm call's request leaves from the caller's task (the head start);
    its fault is handled by the detached task exactly like any other."""
    begun: list[bool] = []
    original = Supervisor.begin_now

    def spy(sup: Supervisor, worker: Any, shape: Any, request: Any) -> Any:
        started = original(sup, worker, shape, request)
        begun.append(started is not None and started[1].written)
        return started

    monkeypatch.setattr(Supervisor, "begin_now", spy)
    trace = tmp_path / "trace.jsonl"
    faults = {knob: 2, "only_generation": 1}
    cfg = make_config(
        make_model("m", faults=faults, trace=str(trace)),
        exchange_timeout_s=exchange_bound(knob),
        exit_grace_s=2.0,
    )
    async with open_host(cfg) as host:
        await host.embed("m", ["the first call admits the shape"])
        with pytest.raises(synapse.OutcomeUnknown, match="not replayed"):
            await host.embed("m", ["the second call"])
        assert begun == [True]  # written by the caller, not by the detached task
        await host.load("m")
        assert (await host.embed("m", ["the third call"])).vectors
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.state, snap.restarts, snap.inflight) == (2, "ready", 1, 0)
    infers = [line for line in trace_lines(trace) if line["frame"] == "infer"]
    assert [i["generation"] for i in infers] == [1, 1, 2]
    assert len({i["request_id"] for i in infers}) == 3


async def test_a_request_the_caller_wrote_is_drained_when_the_caller_is_cancelled_at_once(
    make_model: Any, make_config: Any
) -> None:
    """Cancelled before its detached task ever ran: the request the caller
    wrote is still that task's to drain, so the next call gets its own reply."""
    cfg = make_config(make_model("m"))
    async with open_host(cfg) as host:
        await host.embed("m", ["warm up"])
        with anyio.CancelScope() as scope:
            scope.cancel()
            await host.embed("m", ["cancelled at once"])
        assert scope.cancelled_caught
        worker = host.worker("m")
        assert worker is not None
        await eventually(lambda: worker.inflight == 0)
        result = await host.embed("m", ["next"])
        assert result.vectors[0] == pytest.approx(expected_vector("next", 4), abs=1e-6)
        snap = host.snapshot().worker("m")
        assert (snap.generation, snap.state, snap.restarts) == (1, "ready", 0)


async def test_ignore_sigterm_worker_is_killed_and_confirmed(
    tmp_path: Path, make_model: Any, make_config: Any
) -> None:
    trace = tmp_path / "trace.jsonl"
    cfg = make_config(
        make_model("m", faults={"ignore_sigterm": True, "hang_on_infer": 1}, trace=str(trace)),
        exchange_timeout_s=HANG_BOUND_S,
        exit_grace_s=0.5,
        restart_budget={"max_restarts": 0, "window_s": 60.0},
    )
    async with open_host(cfg) as host:
        with pytest.raises(synapse.OutcomeUnknown):
            await host.embed("m", ["hangs"])
        worker = host.worker("m")
        assert worker is not None
        while worker.state == "recovering":
            await worker.changed()
        snap = host.snapshot().worker("m")
        # SIGTERM was ignored, SIGKILL reaped it; the budget of 0 restarts stops there.
        assert snap.state == "failed" and "giving up" in snap.reason
        assert host.snapshot().lanes["fake:0"].reserved == 0
    (hello,) = [line for line in trace_lines(trace) if line["frame"] == "hello"]
    assert not pid_exists(hello["pid"])


async def test_crash_on_admit_restarts_once_then_serves(
    tmp_path: Path, make_model: Any, make_config: Any
) -> None:
    trace = tmp_path / "trace.jsonl"
    cfg = make_config(
        make_model("m", faults={"crash_on_admit": 1, "only_generation": 1}, trace=str(trace))
    )
    async with open_host(cfg) as host:
        with pytest.raises(synapse.WorkerFault, match="retry"):
            await host.embed("m", ["x"])
        await host.load("m")
        assert (await host.embed("m", ["x"])).vectors
    frames = [(line["frame"], line["generation"]) for line in trace_lines(trace)]
    assert frames[:2] == [("hello", 1), ("admit", 1)]
    assert ("infer", 1) not in frames and ("infer", 2) in frames
