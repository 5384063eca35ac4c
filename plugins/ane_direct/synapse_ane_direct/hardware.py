"""The Neural Engine device: generated MIL programs compiled and run through
Apple's private framework.

NEVER RUN ON A MAC. Synapse's direct-ANE transport was written on Linux:
:class:`HardwareDevice` has never opened, and :class:`AneExecutor` has only
run against a stand-in runtime that records its calls (the plugin's
``test_ane_hardware_path.py``). The programs it compiles are verified
off-hardware by the MIL interpreter (:mod:`.mil.interpreter`); the framework
calls follow the public
reverse-engineering projects (maderix/ANE above all; see :mod:`.framework`
for every signature and where it is declared). ``synapse ane selftest`` is
the first thing to run on a Mac; ``docs/ane-direct.md`` says what it checks.

The path, per bucket (after maderix/ANE's in-memory model flow):

1. ``_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:``
   with the program text and its weight file under
   ``@model_path/weights/weight.bin``;
2. ``_ANEInMemoryModel inMemoryModelWithDescriptor:``; the text and weights
   are also written to ``NSTemporaryDirectory()/<hexStringIdentifier>/``,
   where the compiler looks for them (hence ``TMPDIR`` removed for workers);
3. ``compileWithQoS:options:error:`` then ``loadWithQoS:options:error:``;
4. one IOSurface per input and for the output, fp16, the ``[1, C, 1, S]``
   tensor as one contiguous byte row, wrapped by ``_ANEIOSurfaceObject
   objectWithIOSurface:`` into an ``_ANERequest``;
5. per sequence: write the inputs, ``evaluateWithQoS:options:request:error:``,
   read the output;
6. on eviction: ``unloadWithQoS:error:``, release the surfaces, remove the
   directory.

Errors: a framework that cannot be opened, or that refuses to compile or
load a program, is :class:`~.device.DeviceUnavailable` carrying the NSError's
domain, code and description. A failed evaluation leaves the device in an
unknown state, so it is a fault of the worker generation: the worker says why
on stderr and exits, and the supervisor starts the next generation.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import attrs
import numpy as np

from .availability import FRAMEWORK as FRAMEWORK
from .availability import probe as probe
from .device import DeviceError, DeviceUnavailable
from .mil.program import WEIGHTS_PATH, Program, TensorSpec
from .programs import DEFAULT_COMPILE_CAP, EXIT_COMPILE_CAP, Array, ExecutorFault, ProgramDevice

ENV_COMPILE_CAP = "SYNAPSE_ANE_COMPILE_CAP"
#: Exit status of a worker whose evaluation failed (EX_SOFTWARE).
EXIT_DEVICE_FAULT = 70


def compile_cap_from_env(env: Mapping[str, str] = os.environ) -> int:
    """The per-process compile cap: ``$SYNAPSE_ANE_COMPILE_CAP``, default 64."""
    raw = env.get(ENV_COMPILE_CAP, "")
    if not raw:
        return DEFAULT_COMPILE_CAP
    if not raw.isdigit() or int(raw) <= 0:
        raise DeviceUnavailable(f"{ENV_COMPILE_CAP}={raw!r} is not a positive whole number")
    return int(raw)


@attrs.define
class _Surface:
    ref: int  # IOSurfaceRef, owned (CFRelease)
    spec: TensorSpec


@attrs.define
class _Loaded:
    """One bucket's program; filled in step by step, so a failure part-way
    releases exactly what was made."""

    model: int  # _ANEInMemoryModel, retained
    workdir: Path
    bucket: int
    on_engine: bool = False  # loadWithQoS succeeded
    surfaces: list[_Surface] = attrs.Factory(list)  # the inputs, then the output
    request: int = 0  # _ANERequest, retained


class AneExecutor:
    """Compiles, loads, evaluates and unloads programs on the Neural Engine."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt  # a framework.Runtime
        self.name = f"ane-macos{platform.mac_ver()[0] or 'unknown'}"

    def _error(self, what: str, bucket: int, error: ctypes.c_void_p) -> DeviceUnavailable:
        info = self.rt.error_info(error.value)
        return DeviceUnavailable(f"the Neural Engine {what} bucket {bucket}'s program: {info}")

    def load(self, program: Program, weights: bytes) -> object:
        from .framework import QOS, AutoreleasePool

        rt, bucket = self.rt, program.bucket
        with AutoreleasePool(rt):
            entry = rt.dictionary(
                [(rt.string("offset"), rt.number(0)), (rt.string("data"), rt.data(weights))]
            )
            weight_dict = rt.dictionary([(rt.string(WEIGHTS_PATH), entry)])
            descriptor = rt.send(
                rt.classes["_ANEInMemoryModelDescriptor"],
                "modelWithMILText:weights:optionsPlist:",
                rt.data(program.text.encode()),
                weight_dict,
                None,
            )
            if not descriptor:
                raise DeviceUnavailable(
                    f"the Neural Engine framework refused bucket {bucket}'s program text "
                    "(modelWithMILText:weights:optionsPlist: returned nil)"
                )
            model = rt.send(
                rt.classes["_ANEInMemoryModel"], "inMemoryModelWithDescriptor:", descriptor
            )
            if not model:
                raise DeviceUnavailable(
                    f"inMemoryModelWithDescriptor: returned nil for bucket {bucket}"
                )
            model = rt.retain(model)
            ident = rt.text(rt.send(model, "hexStringIdentifier"))
            if not ident or not ident.isalnum():
                rt.release(model)
                # Never build (and later remove) a directory from a missing name.
                raise DeviceUnavailable(
                    f"the model of bucket {bucket} has no usable hexStringIdentifier ({ident!r})"
                )
            workdir = Path(rt.text(rt.fn("NSTemporaryDirectory")())) / ident
            loaded = _Loaded(model, workdir, bucket)
            try:
                (workdir / "weights").mkdir(parents=True, exist_ok=True)
                (workdir / "model.mil").write_text(program.text, "utf-8")
                (workdir / "weights" / "weight.bin").write_bytes(weights)
                error = ctypes.c_void_p()
                if not rt.send(
                    model,
                    "compileWithQoS:options:error:",
                    QOS,
                    rt.dictionary([]),
                    ctypes.byref(error),
                ):
                    raise self._error("compiler refused", bucket, error)
                if not rt.send(
                    model, "loadWithQoS:options:error:", QOS, rt.dictionary([]), ctypes.byref(error)
                ):
                    raise self._error("could not load", bucket, error)
                loaded.on_engine = True
                for spec in (*program.inputs, program.output):
                    loaded.surfaces.append(self._surface(spec))
                loaded.request = self._request(loaded)
                return loaded
            except BaseException:
                self.unload(loaded)
                raise

    def _surface(self, spec: TensorSpec) -> _Surface:
        rt = self.rt
        size = spec.nbytes
        props = [
            ("kIOSurfaceWidth", size),
            ("kIOSurfaceHeight", 1),
            ("kIOSurfaceBytesPerElement", 1),
            ("kIOSurfaceBytesPerRow", size),
            ("kIOSurfaceAllocSize", size),
            ("kIOSurfacePixelFormat", 0),
        ]
        ref = rt.fn("IOSurfaceCreate")(
            rt.dictionary([(rt.keys[k], rt.number(v)) for k, v in props])
        )
        if not ref:
            raise DeviceUnavailable(f"IOSurfaceCreate failed for {spec.name} ({size} bytes)")
        return _Surface(int(ref), spec)

    def _request(self, loaded: _Loaded) -> int:
        rt = self.rt
        wrap = rt.classes["_ANEIOSurfaceObject"]
        *ins, out = loaded.surfaces
        inputs = [rt.send(wrap, "objectWithIOSurface:", s.ref) for s in ins]
        outputs = [rt.send(wrap, "objectWithIOSurface:", out.ref)]
        request = rt.send(
            rt.classes["_ANERequest"],
            "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
            rt.array(inputs),
            rt.array([rt.number(i) for i in range(len(inputs))]),
            rt.array(outputs),
            rt.array([rt.number(0)]),
            None,
            None,
            rt.number(0),
        )
        if not request:
            raise DeviceUnavailable(f"_ANERequest could not be built for bucket {loaded.bucket}")
        return int(rt.retain(request))

    def evaluate(self, handle: object, inputs: dict[str, Array]) -> Array:
        from .framework import LOCK_READ_ONLY, QOS, AutoreleasePool

        assert isinstance(handle, _Loaded)
        rt = self.rt
        lock, unlock, base = (
            rt.fn("IOSurfaceLock"),
            rt.fn("IOSurfaceUnlock"),
            rt.fn("IOSurfaceGetBaseAddress"),
        )
        *ins, out = handle.surfaces
        for surface in ins:
            data = np.ascontiguousarray(inputs[surface.spec.name], dtype="<f2").tobytes()
            if len(data) != surface.spec.nbytes:
                raise DeviceError(
                    f"input {surface.spec.name}: {len(data)} bytes, not {surface.spec.nbytes}"
                )
            lock(surface.ref, 0, None)
            try:
                ctypes.memmove(base(surface.ref), data, len(data))
            finally:
                unlock(surface.ref, 0, None)
        with AutoreleasePool(rt):
            error = ctypes.c_void_p()
            ok = rt.send(
                handle.model,
                "evaluateWithQoS:options:request:error:",
                QOS,
                rt.dictionary([]),
                handle.request,
                ctypes.byref(error),
            )
            if not ok:
                info = rt.error_info(error.value)
                raise ExecutorFault(f"evaluating bucket {handle.bucket}'s program failed: {info}")
        lock(out.ref, LOCK_READ_ONLY, None)
        try:
            raw = ctypes.string_at(base(out.ref), out.spec.nbytes)
        finally:
            unlock(out.ref, LOCK_READ_ONLY, None)
        return np.frombuffer(raw, dtype="<f2").reshape(out.spec.shape)

    def unload(self, handle: object) -> None:
        """Release whatever of ``handle`` exists (also after a failed load)."""
        from .framework import QOS, AutoreleasePool

        assert isinstance(handle, _Loaded)
        rt = self.rt
        if handle.on_engine:
            with AutoreleasePool(rt):
                error = ctypes.c_void_p()
                if not rt.send(handle.model, "unloadWithQoS:error:", QOS, ctypes.byref(error)):
                    # The program is gone from this process either way; say so, go on.
                    info = rt.error_info(error.value)
                    print(
                        f"ane-direct worker: unloading bucket {handle.bucket}: {info}",
                        file=sys.stderr,
                    )
            handle.on_engine = False
        rt.release(handle.request)
        handle.request = 0
        while handle.surfaces:
            rt.fn("CFRelease")(handle.surfaces.pop().ref)
        rt.release(handle.model)
        handle.model = 0
        shutil.rmtree(handle.workdir, ignore_errors=True)

    def close(self) -> None:
        pass


def open_runtime() -> Any:
    """Load the framework and check the engine answers, or :class:`DeviceUnavailable`."""
    from .framework import FrameworkMissing, Runtime

    try:
        rt = Runtime.open()
    except FrameworkMissing as exc:
        raise DeviceUnavailable(str(exc)) from None
    if not rt.send(rt.classes["_ANEDeviceInfo"], "hasANE"):
        raise DeviceUnavailable("this Mac reports no Neural Engine (_ANEDeviceInfo hasANE)")
    if not rt.send(rt.classes["_ANEClient"], "sharedConnection"):
        raise DeviceUnavailable("could not connect to the Neural Engine service (aned)")
    return rt


def end_worker(device: ProgramDevice, message: str, status: int) -> NoReturn:
    """End this worker generation: unload everything, say why on stderr, exit.

    The exit closes the worker's channel, so the supervisor counts a fault of
    this generation and starts the next one: a fresh process with a fresh
    device and compile budget. The caller of the exchange in flight is told
    its outcome is unknown, or to retry an admission.
    """
    try:
        device.close()
    finally:
        print(f"ane-direct worker: {message} (exit {status})", file=sys.stderr, flush=True)
        raise SystemExit(status)


def _retire_at_cap(device: ProgramDevice, message: str) -> NoReturn:
    end_worker(device, message, EXIT_COMPILE_CAP)


def _end_after_fault(device: ProgramDevice, message: str) -> NoReturn:
    end_worker(device, message, EXIT_DEVICE_FAULT)


class HardwareDevice(ProgramDevice):
    """The Neural Engine of this Mac running MiniLM, one program per bucket.

    Opening it refuses with :class:`~.device.DeviceUnavailable` wherever it
    cannot run (not macOS on Apple silicon, no framework, no lane lock, no
    model files).
    """

    def __init__(
        self,
        dims: int,
        *,
        lane_locked: bool,
        model_dir: Path | None = None,
        compile_cap: int | None = None,
    ) -> None:
        reason = probe()
        if reason:
            raise DeviceUnavailable(reason)
        if not lane_locked:
            raise DeviceUnavailable(
                "this worker does not hold the ane:0 lane lock; hardware workers are started "
                "by a Synapse host, which takes the lock and hands it to them"
            )
        from .model_files import load_minilm

        cap = compile_cap if compile_cap is not None else compile_cap_from_env()
        rt = open_runtime()
        super().__init__(
            load_minilm(model_dir),
            AneExecutor(rt),
            kind="hardware",
            dims=dims,
            dtype="fp16",
            compile_cap=cap,
            on_cap=_retire_at_cap,
            on_fault=_end_after_fault,
        )
