"""A device that runs generated MIL programs: one per sequence bucket.

:class:`ProgramDevice` implements :class:`~.device.Device` over an
:class:`Executor`, the thing that compiles, runs and unloads one program. The
Neural Engine is one executor (:mod:`.hardware`); the numpy MIL interpreter is
another (:class:`InterpreterExecutor`), so the simulated device can run the
very programs the hardware would. Each bucket's program embeds one sequence:
a batch is run row by row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol

import numpy as np
import numpy.typing as npt

from synapse_core.plugin import Shape, Task

from .device import DeviceError
from .mil.generator import generate, weight_file
from .mil.interpreter import Interpreter, InterpreterError
from .mil.program import WEIGHTS_PATH, DType, Program
from .model_files import MiniLM

Array = npt.NDArray[Any]
#: Programs one worker process compiles before it retires (public Neural
#: Engine projects report a process leaking after about 119 compiles).
DEFAULT_COMPILE_CAP = 64
#: Exit status of a worker that retired at its compile cap (EX_TEMPFAIL).
EXIT_COMPILE_CAP = 75
_NUMPY: dict[DType, type[np.floating[Any]]] = {"fp16": np.float16, "fp32": np.float32}


class CompileCapReached(Exception):
    """This process compiled its cap of programs; it must retire, not compile more.

    Deliberately not a :class:`~.device.DeviceError`: it is not an answer to
    one admission but the end of the worker generation.
    """


class ExecutorFault(Exception):
    """An executor failed in a way that leaves its device in an unknown state."""


class Executor(Protocol):
    """Compiles, runs and unloads programs on one device."""

    #: names the executor in the device identity, e.g. ``mil-interpreter``
    name: str

    def load(self, program: Program, weights: bytes) -> object:
        """Compile and load ``program`` with its weight file; return its handle."""
        ...

    def evaluate(self, handle: object, inputs: dict[str, Array]) -> Array:
        """Run a loaded program on inputs of its declared types; return its output."""
        ...

    def unload(self, handle: object) -> None: ...

    def close(self) -> None: ...


class InterpreterExecutor:
    """Programs run by the numpy MIL interpreter (:mod:`.mil.interpreter`)."""

    name = "mil-interpreter"

    def load(self, program: Program, weights: bytes) -> object:
        try:
            return Interpreter(program.text, {WEIGHTS_PATH: weights})
        except InterpreterError as exc:
            raise DeviceError(f"bucket {program.bucket}: {exc}") from None

    def evaluate(self, handle: object, inputs: dict[str, Array]) -> Array:
        assert isinstance(handle, Interpreter)
        try:
            (output,) = handle.run(inputs).values()
        except InterpreterError as exc:
            raise DeviceError(str(exc)) from None
        return output

    def unload(self, handle: object) -> None:
        pass

    def close(self) -> None:
        pass


def program_inputs(
    model: MiniLM, ids: Sequence[int], bucket: int, dtype: DType
) -> dict[str, Array]:
    """A sequence's ``x`` (word embeddings, channels first) and ``mask``, padded to ``bucket``."""
    if not 0 < len(ids) <= bucket:
        raise DeviceError(f"a sequence of {len(ids)} tokens does not fit bucket {bucket}")
    try:
        words = model.embed_tokens(list(ids))
    except ValueError as exc:
        raise DeviceError(str(exc)) from None
    x = np.zeros((1, model.config.hidden, 1, bucket), dtype=_NUMPY[dtype])
    x[0, :, 0, : len(ids)] = words.T
    mask = np.zeros((1, 1, 1, bucket), dtype=_NUMPY[dtype])
    mask[..., : len(ids)] = 1
    return {"x": x, "mask": mask}


class ProgramDevice:
    """A :class:`~.device.Device` whose shapes are generated MiniLM programs.

    A shape's program is its bucket's (shapes of one bucket share it).
    ``compile_cap`` programs at most are compiled in this process's life
    (evictions do not give any back); the next compile calls ``on_cap``
    (default: raise :class:`CompileCapReached`). An :class:`ExecutorFault`
    while running calls ``on_fault`` (default: a :class:`~.device.DeviceError`).
    """

    def __init__(
        self,
        model: MiniLM,
        executor: Executor,
        *,
        kind: str,
        dims: int,
        dtype: DType = "fp16",
        compile_cap: int = DEFAULT_COMPILE_CAP,
        on_cap: Callable[[ProgramDevice, str], NoReturn] | None = None,
        on_fault: Callable[[ProgramDevice, str], NoReturn] | None = None,
    ) -> None:
        if dims != model.config.hidden:
            raise DeviceError(f"the model's vectors have {model.config.hidden} dims, not {dims}")
        if compile_cap <= 0:
            raise ValueError(f"compile cap must be positive, got {compile_cap}")
        self.model = model
        self.executor = executor
        self.kind = kind
        self.dims = dims
        self.dtype = dtype
        self.identity = f"{executor.name}-{dtype}-minilm-{model.sha256[:8] or 'unverified'}"
        self.compile_cap = compile_cap
        self._on_cap = on_cap
        self._on_fault = on_fault
        self.compiles = 0
        self.loaded: dict[int, object] = {}  # bucket -> executor handle
        self.shapes: set[Shape] = set()

    def compile(self, shape: Shape) -> bool:
        cold = shape.bucket not in self.loaded
        if cold:
            if self.compiles >= self.compile_cap:
                message = (
                    f"this worker has compiled {self.compiles} programs, its cap; it retires so "
                    "that a fresh worker process compiles the rest"
                )
                if self._on_cap is not None:
                    self._on_cap(self, message)
                raise CompileCapReached(message)
            program = generate(shape.bucket, self.dtype, self.model.config)
            handle = self.executor.load(program, weight_file(program, self.model.weights))
            self.compiles += 1
            self.loaded[shape.bucket] = handle
        self.shapes.add(shape)
        return cold

    def embed(self, bucket: int, ids: Sequence[int]) -> Array:
        """The unit vector (float32) of one sequence's positions, special tokens
        included, from ``bucket``'s program."""
        handle = self.loaded.get(bucket)
        if handle is None:
            raise DeviceError(f"no program is loaded for bucket {bucket}")
        inputs = program_inputs(self.model, ids, bucket, self.dtype)
        try:
            output = self.executor.evaluate(handle, inputs)
        except ExecutorFault as exc:
            if self._on_fault is not None:
                self._on_fault(self, str(exc))
            raise DeviceError(str(exc)) from None
        return np.asarray(output, dtype=np.float32).reshape(-1)

    def run(
        self,
        shape: Shape,
        task: Task,
        sequences: Sequence[Sequence[int]],
        query: Sequence[int] | None,
    ) -> list[list[float]]:
        if shape not in self.shapes:
            raise DeviceError(f"shape {shape} is not compiled")
        # Sequences arrive without special tokens (as the host's tokenizer
        # counts them); the encoder sees [CLS] ids [SEP].
        wrap = self.model.positions
        vectors = [self.embed(shape.bucket, wrap(list(seq))) for seq in sequences]
        if task == "rerank":
            # A bi-encoder score: cosine of unit vectors (not a cross-encoder).
            q = self.embed(shape.bucket, wrap(list(query or [])))
            return [[float(q @ v)] for v in vectors]
        return [v.tolist() for v in vectors]

    def evict(self, shape: Shape) -> None:
        self.shapes.discard(shape)
        if not any(s.bucket == shape.bucket for s in self.shapes):
            handle = self.loaded.pop(shape.bucket, None)
            if handle is not None:
                self.executor.unload(handle)

    def close(self) -> None:
        for bucket in sorted(self.loaded):
            self.executor.unload(self.loaded.pop(bucket))
        self.shapes.clear()
        self.executor.close()


def simulated_program_device(
    model: MiniLM, dims: int, *, dtype: DType = "fp16", compile_cap: int = DEFAULT_COMPILE_CAP
) -> ProgramDevice:
    """The simulated device running the generated programs in the MIL interpreter."""
    return ProgramDevice(
        model,
        InterpreterExecutor(),
        kind="simulated",
        dims=dims,
        dtype=dtype,
        compile_cap=compile_cap,
    )
