"""The Neural Engine executor's sequence of framework calls, against a stand-in runtime.

The framework cannot run here. :class:`FakeRuntime` answers the same methods
as :class:`synapse_ane_direct.framework.Runtime` and records every message, so
these tests check what :class:`AneExecutor` sends, in which order, with which
arguments, what it does with an NSError, and that it releases what it made.
The IOSurfaces are real memory, so input and output bytes are checked too.
"""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_ane_direct.device import DeviceUnavailable
from synapse_ane_direct.framework import QOS, NSErrorInfo
from synapse_ane_direct.hardware import AneExecutor
from synapse_ane_direct.mil.generator import generate, weight_file
from synapse_ane_direct.mil.program import WEIGHTS_PATH, Program
from synapse_ane_direct.model_files import MiniLM
from synapse_ane_direct.programs import ExecutorFault, program_inputs

ERROR = 999


class FakeRuntime:
    def __init__(self, tmp: Path, fail: str = "") -> None:
        self.fail = fail  # a selector that answers NO (and sets an NSError) or nil
        self._ids = itertools.count(100)
        self.objects: dict[int, Any] = {}
        self.sent: list[tuple[str, tuple[Any, ...]]] = []
        self.released: list[int] = []
        self.surfaces: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.freed: list[int] = []
        self.locks = 0
        self.tmp = tmp
        self.classes = {
            name: self._new(name)
            for name in ("_ANEInMemoryModelDescriptor", "_ANEInMemoryModel", "_ANERequest")
        }
        self.classes["_ANEIOSurfaceObject"] = self._new("_ANEIOSurfaceObject")
        self.keys = {k: self._new(k) for k in ("kIOSurfaceWidth", "kIOSurfaceHeight")}
        for k in ("BytesPerElement", "BytesPerRow", "AllocSize", "PixelFormat"):
            self.keys[f"kIOSurface{k}"] = self._new(f"kIOSurface{k}")

    def _new(self, value: Any) -> int:
        ident = next(self._ids)
        self.objects[ident] = value
        return ident

    # Foundation helpers, as Runtime has them
    def string(self, text: str) -> int:
        return self._new(text)

    def text(self, ident: int) -> str:
        return str(self.objects[ident])

    def data(self, payload: bytes) -> int:
        return self._new(bytes(payload))

    def number(self, value: int) -> int:
        return self._new(value)

    def array(self, items: list[int]) -> int:
        return self._new([self.objects[i] for i in items])

    def dictionary(self, pairs: list[tuple[int, int]]) -> int:
        return self._new({self.objects[k]: self.objects[v] for k, v in pairs})

    def retain(self, ident: int) -> int:
        return ident

    def release(self, ident: int) -> None:
        if ident:
            self.released.append(ident)

    def error_info(self, ident: int | None) -> NSErrorInfo:
        assert ident == ERROR
        return NSErrorInfo("com.apple.appleneuralengine", 7, "stand-in refusal")

    def fn(self, name: str) -> Any:
        def create(props: int) -> int:
            size = self.objects[props]["kIOSurfaceAllocSize"]
            ident = self._new(("surface", size))
            self.surfaces[ident] = ctypes.create_string_buffer(size)
            return ident

        def lock(ref: int, options: int, seed: None) -> int:
            self.locks += 1
            return 0

        table = {
            "NSTemporaryDirectory": lambda: self._new(str(self.tmp)),
            "IOSurfaceCreate": create,
            "IOSurfaceLock": lock,
            "IOSurfaceUnlock": lambda ref, options, seed: 0,
            "IOSurfaceGetBaseAddress": lambda ref: ctypes.addressof(self.surfaces[ref]),
            "CFRelease": self.freed.append,
            "objc_autoreleasePoolPush": lambda: 1,
            "objc_autoreleasePoolPop": lambda token: None,
        }
        return table[name]

    def send(self, receiver: int, selector: str, *args: Any) -> Any:
        self.sent.append((selector, args))
        if selector == self.fail:
            if args and isinstance(args[-1], type(ctypes.byref(ctypes.c_void_p()))):
                args[-1]._obj.value = ERROR  # the NSError ** out-argument
            return 0
        if selector == "modelWithMILText:weights:optionsPlist:":
            return self._new(("descriptor", args))
        if selector == "inMemoryModelWithDescriptor:":
            return self._new("model")
        if selector == "hexStringIdentifier":
            return self._new("0123abcd")
        if selector == "objectWithIOSurface:":
            return self._new(("wrapped", args[0]))
        if selector.startswith("requestWithInputs:"):
            return self._new(("request", args))
        if selector == "evaluateWithQoS:options:request:error:":
            self._evaluate(self.objects[args[2]][1])
        return True

    def _evaluate(self, request_args: tuple[Any, ...]) -> None:
        # The "engine": output = 2 * the first 384 values of x (fp16 bytes).
        (x_ref, _), (out_ref,) = (
            [w[1] for w in self.objects[request_args[0]]],
            [w[1] for w in self.objects[request_args[2]]],
        )
        x = np.frombuffer(self.surfaces[x_ref].raw, dtype="<f2")
        out = (2 * x[: len(self.surfaces[out_ref].raw) // 2]).astype("<f2").tobytes()
        ctypes.memmove(self.surfaces[out_ref], out, len(out))


def _program(model: MiniLM) -> tuple[Program, bytes]:
    program = generate(8, "fp16", model.config)
    return program, weight_file(program, model.weights)


def test_load_evaluate_unload_send_the_framework_calls_in_order(
    tiny_model: MiniLM, tmp_path: Path
) -> None:
    rt = FakeRuntime(tmp_path)
    executor = AneExecutor(rt)
    program, weights = _program(tiny_model)
    handle = executor.load(program, weights)
    sent = [s for s, _ in rt.sent]
    assert sent == [
        "modelWithMILText:weights:optionsPlist:",
        "inMemoryModelWithDescriptor:",
        "hexStringIdentifier",
        "compileWithQoS:options:error:",
        "loadWithQoS:options:error:",
        "objectWithIOSurface:",
        "objectWithIOSurface:",
        "objectWithIOSurface:",
        "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
    ]
    text, weight_dict, options = rt.sent[0][1]
    assert rt.objects[text] == program.text.encode() and options is None
    assert rt.objects[weight_dict] == {WEIGHTS_PATH: {"offset": 0, "data": weights}}
    assert rt.sent[3][1][0] == QOS == rt.sent[4][1][0]
    # the compiler's files, where NSTemporaryDirectory() says
    assert (tmp_path / "0123abcd" / "model.mil").read_text("utf-8") == program.text
    assert (tmp_path / "0123abcd" / "weights" / "weight.bin").read_bytes() == weights
    # surfaces: x, mask, output, each one contiguous row of its fp16 bytes
    sizes = [rt.objects[ref][1] for ref in rt.surfaces]
    assert sizes == [8 * 8 * 2, 8 * 2, 8 * 2]
    request = rt.objects[rt.sent[-1][1][0]]
    assert request == [("wrapped", ref) for ref in list(rt.surfaces)[:2]]
    assert rt.objects[rt.sent[-1][1][1]] == [0, 1]  # input indices in signature order

    inputs = program_inputs(tiny_model, [1, 5, 2], 8, "fp16")
    out = executor.evaluate(handle, inputs)
    assert out.shape == (1, 1, 1, 8) and out.dtype == np.float16
    assert np.array_equal(out.reshape(-1), 2 * inputs["x"].reshape(-1)[:8])
    assert rt.locks == 3  # two inputs written, one output read

    executor.unload(handle)
    assert rt.sent[-1][0] == "unloadWithQoS:error:"
    assert len(rt.freed) == 3 and len(rt.released) == 2  # surfaces; request and model
    assert not (tmp_path / "0123abcd").exists()


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("compileWithQoS:options:error:", "compiler refused bucket 8's program"),
        ("loadWithQoS:options:error:", "could not load bucket 8's program"),
        ("modelWithMILText:weights:optionsPlist:", "refused bucket 8's program text"),
    ],
)
def test_a_refused_program_is_device_unavailable_with_the_nserror(
    tiny_model: MiniLM, tmp_path: Path, selector: str, message: str
) -> None:
    rt = FakeRuntime(tmp_path, fail=selector)
    program, weights = _program(tiny_model)
    with pytest.raises(DeviceUnavailable, match=message) as info:
        AneExecutor(rt).load(program, weights)
    if selector != "modelWithMILText:weights:optionsPlist:":
        assert "stand-in refusal (com.apple.appleneuralengine code 7)" in str(info.value)
        assert "unloadWithQoS:error:" not in [s for s, _ in rt.sent]  # never loaded
        assert rt.released  # the model was released
    assert not (tmp_path / "0123abcd").exists()
    assert rt.freed == []


def test_a_failed_evaluation_is_an_executor_fault(tiny_model: MiniLM, tmp_path: Path) -> None:
    rt = FakeRuntime(tmp_path, fail="evaluateWithQoS:options:request:error:")
    executor = AneExecutor(rt)
    program, weights = _program(tiny_model)
    handle = executor.load(program, weights)
    with pytest.raises(ExecutorFault, match="stand-in refusal"):
        executor.evaluate(handle, program_inputs(tiny_model, [1, 2], 8, "fp16"))


def test_a_model_without_an_identifier_never_touches_the_temporary_directory(
    tiny_model: MiniLM, tmp_path: Path
) -> None:
    rt = FakeRuntime(tmp_path, fail="hexStringIdentifier")
    rt.objects[0] = ""  # what text() of nil gives
    program, weights = _program(tiny_model)
    (tmp_path / "keep").write_text("user file")
    with pytest.raises(DeviceUnavailable, match="no usable hexStringIdentifier"):
        AneExecutor(rt).load(program, weights)
    assert (tmp_path / "keep").exists() and rt.released
