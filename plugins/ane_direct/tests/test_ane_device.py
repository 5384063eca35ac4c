"""The simulated device, the hardware device's refusals, and the worker logic."""

from __future__ import annotations

import math
import sys

import pytest

from synapse_ane_direct.device import (
    SIMULATED_MODEL,
    DeviceError,
    DeviceUnavailable,
    RefusingDevice,
    SimulatedDevice,
)
from synapse_ane_direct.hardware import HardwareDevice
from synapse_ane_direct.inprocess import InProcessAneWorker
from synapse_ane_direct.options import AneOptions
from synapse_ane_direct.worker import AneWorker, device_kind, open_device
from synapse_core.plugin import LaunchSpec, Reply, Shape, Stop, WorkerLogic
from synapse_core.wire import (
    Admit,
    Admitted,
    Evict,
    Evicted,
    Failure,
    Infer,
    Inventory,
    InventoryRequest,
    Output,
    Shutdown,
    unpack_rows,
)
from synapse_core.worker import build_logic

S16 = Shape(16, 2)


def test_simulated_compile_is_cold_once_and_sleeps_the_delay() -> None:
    slept: list[float] = []
    device = SimulatedDevice(8, compile_delay_s=0.25, sleep=slept.append)
    assert device.compile(S16) is True
    assert device.compile(S16) is False
    assert slept == [0.25]
    device.evict(S16)
    assert device.compile(S16) is True
    assert device.compiles == 2


def test_simulated_outputs_are_deterministic_and_normalised() -> None:
    device = SimulatedDevice(16)
    device.compile(S16)
    rows = device.run(S16, "embed", [[5, 6, 7], [9]], None)
    assert rows == [SIMULATED_MODEL.embed([5, 6, 7], 16), SIMULATED_MODEL.embed([9], 16)]
    assert all(math.isclose(sum(v * v for v in row), 1.0) for row in rows)
    scores = device.run(S16, "rerank", [[5, 6], [7]], [5, 6])
    assert scores == [[score] for score in SIMULATED_MODEL.rerank([5, 6], [[5, 6], [7]], 16)]
    assert math.isclose(scores[0][0], 1.0)


def test_simulated_device_refuses_an_uncompiled_shape() -> None:
    with pytest.raises(DeviceError, match="not compiled"):
        SimulatedDevice(8).run(S16, "embed", [[1]], None)


@pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for non-macOS")
def test_hardware_device_refuses_here_with_the_reason() -> None:
    with pytest.raises(DeviceUnavailable) as info:
        HardwareDevice(8, lane_locked=True)
    assert "macOS" in str(info.value)
    assert info.value.code == "device-unavailable"


@pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for non-macOS")
def test_worker_without_a_usable_device_answers_admissions_with_why() -> None:
    options = AneOptions(buckets=(16,), max_batch=2)
    assert isinstance(open_device("hardware", options, lane_locked=True), RefusingDevice)
    spec = LaunchSpec("m", "p", "m#1", 1, {"buckets": [16], "max_batch": 2})
    logic = build_logic(AneWorker, spec)
    assert "unavailable device" in logic.hello().implementation
    action = logic.handle(Admit(1, S16))
    assert isinstance(action, Reply) and isinstance(action.frame, Failure)
    assert action.frame.code == "device-unavailable"
    assert "macOS" in action.frame.message
    assert logic.handle(InventoryRequest(2)) == Reply(Inventory(2, []))


def test_simulation_can_be_asked_for_but_never_turned_off() -> None:
    hardware, simulated = AneOptions(), AneOptions(device="simulated")
    assert device_kind(hardware, {}) == "hardware"
    assert device_kind(hardware, {"SYNAPSE_ANE_DEVICE": "simulated"}) == "simulated"
    assert device_kind(simulated, {"SYNAPSE_ANE_DEVICE": "hardware"}) == "simulated"


def _logic(trace: list[dict[str, object]] | None = None) -> WorkerLogic:
    options = {"buckets": [32, 16], "dims": 8, "max_batch": 2}
    spec = LaunchSpec("m", "p", "m#3", 3, options)
    sink = None if trace is None else trace.append
    return build_logic(InProcessAneWorker, spec, pid=42, trace_sink=sink)


def test_logic_hello_reports_buckets_dims_batch_and_identity() -> None:
    trace: list[dict[str, object]] = []
    hello = _logic(trace).hello()
    assert (hello.buckets, hello.dims, hello.max_batch) == ([16, 32], 8, 2)
    assert (hello.model, hello.generation, hello.pid) == ("m", 3, 42)
    assert hello.identity == "ane-direct:p:sim-d8:v1"
    assert "simulated" in hello.implementation
    assert trace[0]["frame"] == "hello" and trace[0]["device"] == "simulated"
    assert trace[0]["lane_lock_inherited"] is True


def test_logic_admit_infer_evict_inventory_shutdown() -> None:
    trace: list[dict[str, object]] = []
    logic = _logic(trace)
    first, again = logic.handle(Admit(1, S16)), logic.handle(Admit(2, S16))
    assert isinstance(first, Reply) and first.frame == Admitted(1, S16, True, 32)
    assert isinstance(again, Reply) and again.frame == Admitted(2, S16, False, 32)
    out = logic.handle(Infer(3, S16, "embed", [[4, 5], [6]]))
    assert isinstance(out, Reply) and isinstance(out.frame, Output)
    rows = unpack_rows(out.frame)
    assert rows[0] == pytest.approx(SIMULATED_MODEL.embed([4, 5], 8))
    assert rows[1] == pytest.approx(SIMULATED_MODEL.embed([6], 8))
    scored = logic.handle(Infer(4, S16, "rerank", [[4, 5]], query=[4]))
    assert isinstance(scored, Reply) and isinstance(scored.frame, Output)
    assert (scored.frame.rows, scored.frame.dims) == (1, 1)
    inventory = logic.handle(InventoryRequest(5))
    assert isinstance(inventory, Reply) and inventory.frame == Inventory(5, [S16])
    evicted = logic.handle(Evict(6, S16))
    assert isinstance(evicted, Reply) and evicted.frame == Evicted(6, S16)
    assert isinstance(logic.handle(Shutdown()), Stop)
    assert [r["frame"] for r in trace] == [
        "admit",
        "admit",
        "infer",
        "infer",
        "inventory",
        "evict",
        "shutdown",
    ]
    assert [r.get("cold") for r in trace[:2]] == [True, False]
