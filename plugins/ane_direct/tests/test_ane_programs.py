"""The program device over the interpreter, its compile cap, and the hardware
device's fault and retirement paths (with a stand-in executor: the framework
itself cannot run here)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from synapse_ane_direct.device import DeviceError, DeviceUnavailable
from synapse_ane_direct.hardware import (
    EXIT_DEVICE_FAULT,
    compile_cap_from_env,
    end_worker,
)
from synapse_ane_direct.mil.program import Program
from synapse_ane_direct.model_files import MiniLM
from synapse_ane_direct.programs import (
    DEFAULT_COMPILE_CAP,
    EXIT_COMPILE_CAP,
    CompileCapReached,
    ExecutorFault,
    InterpreterExecutor,
    ProgramDevice,
    simulated_program_device,
)
from synapse_core.plugin import Shape


class CountingExecutor(InterpreterExecutor):
    def __init__(self, fail_evaluate: bool = False) -> None:
        self.loaded: list[int] = []
        self.unloaded: list[int] = []
        self.closed = False
        self.fail_evaluate = fail_evaluate

    def load(self, program: Program, weights: bytes) -> object:
        self.loaded.append(program.bucket)
        return (program.bucket, super().load(program, weights))

    def evaluate(self, handle: object, inputs: dict[str, Any]) -> Any:
        assert isinstance(handle, tuple)
        if self.fail_evaluate:
            raise ExecutorFault("evaluating failed: stand-in NSError (test code 7)")
        return super().evaluate(handle[1], inputs)

    def unload(self, handle: object) -> None:
        assert isinstance(handle, tuple)
        self.unloaded.append(handle[0])

    def close(self) -> None:
        self.closed = True


def _device(model: MiniLM, **kw: Any) -> tuple[ProgramDevice, CountingExecutor]:
    executor = CountingExecutor()
    return ProgramDevice(model, executor, kind="simulated", dims=8, dtype="fp32", **kw), executor


def test_a_bucket_compiles_once_for_all_its_shapes(tiny_model: MiniLM) -> None:
    device, executor = _device(tiny_model)
    assert device.compile(Shape(8, 2)) is True
    assert device.compile(Shape(8, 2)) is False
    assert device.compile(Shape(8, 1)) is False  # same program
    assert device.compile(Shape(16, 1)) is True
    assert executor.loaded == [8, 16] and device.compiles == 2
    device.evict(Shape(8, 2))
    assert executor.unloaded == []  # Shape(8, 1) still uses the program
    device.evict(Shape(8, 1))
    assert executor.unloaded == [8]
    device.close()
    assert executor.unloaded == [8, 16] and executor.closed


def test_rows_are_unit_vectors_of_the_wrapped_sequence(tiny_model: MiniLM) -> None:
    device, _ = _device(tiny_model)
    device.compile(Shape(8, 2))
    rows = device.run(Shape(8, 2), "embed", [[5, 6], [7]], None)
    assert len(rows) == 2 and all(len(r) == 8 for r in rows)
    assert np.isclose(np.linalg.norm(rows[0]), 1.0)
    # [CLS] 5 6 [SEP] is what the program saw
    assert np.allclose(rows[0], device.embed(8, [1, 5, 6, 2]), atol=1e-6)
    scores = device.run(Shape(8, 2), "rerank", [[5, 6], [7]], [5, 6])
    assert scores[0][0] == pytest.approx(1.0, abs=1e-5)
    assert scores[1][0] == pytest.approx(
        float(np.dot(device.embed(8, [1, 5, 6, 2]), rows[1])), abs=1e-5
    )


def test_refusals_are_device_errors(tiny_model: MiniLM) -> None:
    device, _ = _device(tiny_model)
    with pytest.raises(DeviceError, match="not compiled"):
        device.run(Shape(8, 1), "embed", [[5]], None)
    device.compile(Shape(8, 1))
    with pytest.raises(DeviceError, match="does not fit bucket 8"):
        device.run(Shape(8, 1), "embed", [list(range(3, 10))], None)  # 7 + 2 positions
    with pytest.raises(DeviceError, match="outside the vocabulary"):
        device.run(Shape(8, 1), "embed", [[10_000]], None)
    with pytest.raises(DeviceError, match="not 384"):
        ProgramDevice(tiny_model, InterpreterExecutor(), kind="simulated", dims=384)


def test_the_compile_cap_counts_every_compile_and_then_refuses(tiny_model: MiniLM) -> None:
    device, _ = _device(tiny_model, compile_cap=2)
    device.compile(Shape(4, 1))
    device.compile(Shape(8, 1))
    device.evict(Shape(4, 1))  # unloading gives no compile back
    assert device.compile(Shape(8, 1)) is False  # a warm shape is still fine
    with pytest.raises(CompileCapReached, match="compiled 2 programs, its cap"):
        device.compile(Shape(4, 1))
    assert not isinstance(CompileCapReached("x"), DeviceError)


def test_at_the_cap_the_hardware_worker_retires_by_exiting(tiny_model: MiniLM) -> None:
    from synapse_ane_direct.hardware import _retire_at_cap

    device, executor = _device(tiny_model, compile_cap=1, on_cap=_retire_at_cap)
    device.compile(Shape(4, 1))
    with pytest.raises(SystemExit) as info:
        device.compile(Shape(8, 1))
    assert info.value.code == EXIT_COMPILE_CAP
    assert executor.unloaded == [4] and executor.closed  # unloaded before exiting


def test_a_failed_evaluation_ends_the_worker_generation(
    tiny_model: MiniLM, capsys: pytest.CaptureFixture[str]
) -> None:
    from synapse_ane_direct.hardware import _end_after_fault

    executor = CountingExecutor(fail_evaluate=True)
    # HardwareDevice's own wiring; the framework itself cannot open here.
    device = ProgramDevice(
        tiny_model, executor, kind="hardware", dims=8, dtype="fp32", on_fault=_end_after_fault
    )
    device.compile(Shape(8, 1))
    with pytest.raises(SystemExit) as info:
        device.run(Shape(8, 1), "embed", [[5]], None)
    assert info.value.code == EXIT_DEVICE_FAULT
    assert executor.closed and executor.unloaded == [8]
    assert "stand-in NSError (test code 7)" in capsys.readouterr().err


def test_a_failed_evaluation_without_a_fault_handler_is_a_device_error(
    tiny_model: MiniLM,
) -> None:
    device = ProgramDevice(
        tiny_model, CountingExecutor(fail_evaluate=True), kind="simulated", dims=8, dtype="fp32"
    )
    device.compile(Shape(8, 1))
    with pytest.raises(DeviceError, match="stand-in NSError"):
        device.run(Shape(8, 1), "embed", [[5]], None)


def test_end_worker_says_why_even_if_closing_fails(
    tiny_model: MiniLM, capsys: pytest.CaptureFixture[str]
) -> None:
    device, executor = _device(tiny_model)

    def broken_close() -> None:
        raise RuntimeError("unload failed")

    executor.close = broken_close  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        end_worker(device, "bye", 9)
    assert "bye (exit 9)" in capsys.readouterr().err


def test_compile_cap_comes_from_the_environment() -> None:
    assert compile_cap_from_env({}) == DEFAULT_COMPILE_CAP == 64
    assert compile_cap_from_env({"SYNAPSE_ANE_COMPILE_CAP": "5"}) == 5
    for bad in ("0", "-1", "many"):
        with pytest.raises(DeviceUnavailable, match="SYNAPSE_ANE_COMPILE_CAP"):
            compile_cap_from_env({"SYNAPSE_ANE_COMPILE_CAP": bad})


def test_simulated_program_device_is_fp16_and_named(tiny_model: MiniLM) -> None:
    device = simulated_program_device(tiny_model, 8)
    assert (device.kind, device.dtype) == ("simulated", "fp16")
    assert device.identity == "mil-interpreter-fp16-minilm-unverified"


@pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for non-macOS")
def test_the_framework_bindings_import_here_and_load_nothing() -> None:
    from synapse_ane_direct import framework

    # every prototype names where it is declared
    assert all(sig.declared for sig in framework.SIGNATURES.values())
    assert "compileWithQoS:options:error:" in framework.SIGNATURES
    with pytest.raises(framework.FrameworkMissing, match="cannot load"):
        framework.Runtime.open()
