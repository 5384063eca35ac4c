"""``ModelWorker``: the class a transport author subclasses to serve a model.

The author loads the model and computes rows; the kit does everything the
host's protocol needs around that (hello, admit/evict/inventory bookkeeping,
shape checks, failures, shutdown, tracing and fault knobs).

The shape rule, the same for every transport: an inference runs on an
admitted ``(bucket, batch)`` shape with at most ``batch`` sequences, and each
sequence fits the bucket **together with the rerank query**:
``len(query) + len(sequence) <= bucket`` (an embed call has no query). The
host picks buckets from the tokenizer's ``sequence_length(ids, pair=query)``,
which counts both (plus special tokens), so it never sends a request that
breaks this rule; a worker that receives one answers ``bad-request``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..errors import Declined
from ..wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Computed,
    Evict,
    Evicted,
    Failure,
    Frame,
    Hello,
    Infer,
    Inventory,
    InventoryRequest,
    Kind,
    LaunchSpec,
    Output,
    Shape,
    Shutdown,
    all_finite,
    bucket_problem,
)
from .faults import FaultInjector, WorkerOptions
from .loop import Action, Reply, Stop, WorkerLogic
from .outputs import Raised, call_author, guarded, outputs_reply, packed
from .trace import Traced, TraceSink, file_sink

#: What ``embed`` returns: ``len(batch)`` rows of ``dims`` floats, as a
#: sequence of float sequences or a 2-D numpy array.
Rows = Any
#: What ``rerank`` returns: one score per document, as a sequence of floats
#: or a 1-D numpy array.
Scores = Any


class ModelWorker:
    """Serve one model in a worker process: subclass and write ``load`` and ``embed``.

    Example (a complete worker module; the transport launches it with
    ``spawn_worker("my_transport.worker:LengthWorker", request)``)::

        from synapse_core.plugin import ModelWorker, WorkerOptions, worker_main
        import attrs

        @attrs.frozen
        class LengthOptions(WorkerOptions):   # adds the kit's faults/trace options
            buckets: tuple[int, ...] = (16, 64, 256)
            max_batch: int = 8

        class LengthWorker(ModelWorker):
            options_type = LengthOptions
            dims = 2

            def load(self, options: LengthOptions) -> None:
                self.buckets = options.buckets
                self.max_batch = options.max_batch
                self.identity = f"length:{self.package}:v1"

            def embed(self, batch):
                return [[float(len(s)), float(sum(s) % 97)] for s in batch]

        if __name__ == "__main__":
            raise SystemExit(worker_main(LengthWorker))

    What the kit sets before :meth:`load`: ``spec`` (the
    :class:`~synapse_core.wire.LaunchSpec`), ``model``, ``package``,
    ``generation`` and ``pid``. What :meth:`load` (or the class) must set:
    ``buckets`` (sequence lengths the worker runs, in tokens), ``dims`` (width
    of an embedding row; any positive number for a rerank-only model),
    ``max_batch`` and ``identity`` (names the vector space: change it whenever
    the vectors would change). Before each :meth:`embed` or :meth:`rerank`
    call the kit sets ``shape``: the admitted shape the batch runs on
    (fixed-shape devices pad to it).

    A row must not depend on the other sequences of its batch, nor on the
    bucket it runs in: the host batches and buckets as it likes.
    """

    #: structure the catalog options into this class before :meth:`load`
    #: (derive it from :class:`WorkerOptions` for the kit's ``faults`` and
    #: ``trace``); ``None`` passes the raw mapping
    options_type: ClassVar[type[Any] | None] = None
    #: reported in the hello; default: the worker's top-level package name
    implementation: str = ""
    #: reported in the hello
    version: str = "0"

    buckets: Sequence[int] = ()
    dims: int = 0
    max_batch: int = 0
    identity: str = ""
    #: widths of the outputs besides dense and score (sparse: the index
    #: bound, multi: the token vectors' width), set by :meth:`load`
    widths: Mapping[Kind, int] = {}

    def __init__(self, spec: LaunchSpec, *, pid: int | None = None) -> None:
        self.spec = spec
        self.model = spec.model
        self.package = spec.package
        self.generation = spec.generation
        self.pid = os.getpid() if pid is None else pid
        self.shape = Shape(0, 0)

    # -- what an author writes ----------------------------------------------------------

    def load(self, options: Any) -> None:
        """Load the model. ``options`` are the catalog entry's, structured into
        :attr:`options_type` when it is set. Raise ``ValueError`` (or
        ``ConfigError``) for options you cannot use: the worker exits 2 with
        the message."""

    def embed(self, batch: list[list[int]]) -> Rows:
        """One row of :attr:`dims` floats per token sequence, in order."""
        raise Declined(f"{self.model!r} does not embed", "unsupported-task")

    def rerank(self, query: list[int], batch: list[list[int]]) -> Scores:
        """One relevance score per document (token sequence), in order."""
        raise Declined(f"{self.model!r} does not rerank", "unsupported-task")

    def sparse(self, batch: list[list[int]]) -> Any:
        """One sparse vector per sequence, ``(indices, weights)`` (sequences
        or 1-D arrays; each index below ``widths[Kind.SPARSE]``, none twice)."""
        raise Declined(f"{self.model!r} has no sparse output", "unsupported-output")

    def multi(self, batch: list[list[int]]) -> Any:
        """One vector of ``widths[Kind.MULTI]`` floats per token of each
        sequence (a (tokens, width) array or a list of vectors per sequence)."""
        raise Declined(f"{self.model!r} has no multi-vector output", "unsupported-output")

    def outputs(self, batch: list[list[int]], kinds: Sequence[Kind]) -> list[Any]:
        """Several outputs of ``batch``, one per kind in order (never
        ``SCORE``): override to compute them from one forward pass; by
        default each kind's method is called in turn."""
        methods = {Kind.DENSE: self.embed, Kind.SPARSE: self.sparse, Kind.MULTI: self.multi}
        return [methods[kind](batch) for kind in kinds]

    def output_widths(self) -> dict[Kind, int]:
        """The outputs the worker computes, with their widths (``Hello.outputs``):
        ``widths``, and dense rows of ``dims`` where :meth:`embed` is
        written, scores where :meth:`rerank` is."""
        found = dict(self.widths)
        if type(self).embed is not ModelWorker.embed:
            found.setdefault(Kind.DENSE, self.dims)
        if type(self).rerank is not ModelWorker.rerank:
            found.setdefault(Kind.SCORE, 1)
        return found

    def admit(self, shape: Shape) -> None:
        """Make ``shape`` runnable (compile or load a program). Called once per
        cold admission; raise :class:`Declined` if it cannot be."""

    def evict(self, shape: Shape) -> None:
        """Forget ``shape``'s program."""

    def close(self) -> None:
        """Release the device; the worker is about to exit."""

    def trace_facts(self) -> Mapping[str, object]:
        """Extra fields for the trace's hello record (e.g. the device in use)."""
        return {}


def declared_problems(worker: ModelWorker) -> list[str]:
    """What is wrong with what a worker declares for its hello."""
    problems = []
    buckets = bucket_problem(sorted(worker.buckets))
    if buckets:
        problems.append(f"buckets {list(worker.buckets)}: {buckets}")
    if worker.dims <= 0:
        problems.append(f"dims must be greater than 0, got {worker.dims!r}")
    if worker.max_batch <= 0:
        problems.append(f"max_batch must be greater than 0, got {worker.max_batch!r}")
    if not worker.identity:
        problems.append("identity is empty; name the vector space")
    return problems


#: a request that computed this long (s) found the host asleep (its own work
#: after writing a request takes about 0.1 ms): the worker sends a
#: :class:`~synapse_core.wire.Computed` notice before it packs the reply, so
#: the host wakes while it does (about 35 µs of one short text's 2 ms on
#: the CPU lane); after a shorter one the notice would only cost a write
NOTICE_AFTER_S = 0.0005


class ModelLogic:
    """The :class:`~.loop.WorkerLogic` of a :class:`ModelWorker`. ``notify``
    writes a frame to the host at once (a :class:`~synapse_core.wire.Computed`
    notice after a long computation; see :data:`NOTICE_AFTER_S`)."""

    ignore_sigterm = False

    def __init__(
        self, worker: ModelWorker, notify: Callable[[Frame], object] | None = None
    ) -> None:
        problems = declared_problems(worker)
        if problems:
            raise ValueError(f"{type(worker).__name__}: " + "; ".join(problems))
        self.worker = worker
        self.buckets = frozenset(worker.buckets)
        self.dims = worker.dims
        self.max_batch = worker.max_batch
        self.widths = worker.output_widths()
        self.shapes: set[Shape] = set()
        self.closed = False
        self.notify = notify

    def hello(self) -> Hello:
        w = self.worker
        return Hello(
            protocol=PROTOCOL_VERSION,
            implementation=w.implementation or type(w).__module__.split(".")[0],
            version=w.version,
            model=w.model,
            package=w.package,
            generation=w.generation,
            pid=w.pid,
            buckets=sorted(self.buckets),
            dims=self.dims,
            max_batch=self.max_batch,
            identity=w.identity,
            outputs=self.widths,
        )

    def handle(self, frame: Frame) -> Action:
        match frame:
            case Infer():
                return Reply(self._infer(frame))
            case Admit():
                return Reply(self._admit(frame))
            case Evict(request_id=rid, shape=shape):
                if shape in self.shapes:
                    self.shapes.discard(shape)
                    self.worker.evict(shape)
                return Reply(Evicted(rid, shape))
            case InventoryRequest(request_id=rid):
                return Reply(Inventory(rid, sorted(self.shapes, key=lambda s: (s.bucket, s.batch))))
            case Shutdown():
                self.close()
                return Stop()
        return Reply(Failure(-1, "unexpected-frame", f"unexpected {type(frame).__name__}"))

    def _notice(self, rid: int, started: int) -> int:
        """Tell the host request ``rid`` has computed, if it took long enough
        (``started``: ``time.perf_counter_ns()`` before it); how long it took."""
        computed = time.perf_counter_ns() - started
        if self.notify is not None and computed > NOTICE_AFTER_S * 1e9:
            self.notify(Computed(rid))
        return computed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.worker.close()

    def _admit(self, frame: Admit) -> Frame:
        shape, rid = frame.shape, frame.request_id
        if shape.bucket not in self.buckets or not 0 < shape.batch <= self.max_batch:
            return Failure(
                rid, "bad-shape", f"cannot compile {shape}: not a reported bucket and batch"
            )
        cold = shape not in self.shapes
        if cold:
            failure = guarded(rid, self.worker.admit, shape)
            if failure is not None:
                return failure
            self.shapes.add(shape)
        return Admitted(rid, shape, cold, shape.bucket * shape.batch)

    def _infer(self, frame: Infer) -> Frame:
        shape, rid, batch, query = frame.shape, frame.request_id, frame.sequences, frame.query
        problem = None
        if shape not in self.shapes:
            problem = f"shape {shape} is not admitted"
        elif len(batch) > shape.batch:
            problem = f"{len(batch)} sequences exceed batch {shape.batch}"
        elif batch and max(map(len, batch)) > shape.bucket - (len(query) if query else 0):
            problem = (
                f"a sequence exceeds bucket {shape.bucket}"
                if not query
                else f"a document and the {len(query)}-token query exceed bucket {shape.bucket}"
            )
        elif frame.task == "rerank" and query is None:
            problem = "a rerank request carries no query"
        elif frame.outputs:
            return outputs_reply(self.worker, self.widths, frame, self._notice)
        if problem:
            return Failure(rid, "bad-request", problem)
        worker = self.worker
        worker.shape = shape
        started = time.perf_counter_ns()
        if frame.task == "rerank":
            assert query is not None
            out: Any = call_author(worker.rerank, query, batch)
            width = 1
        else:
            out = call_author(worker.embed, batch)
            width = self.dims
        computed = self._notice(rid, started)
        if isinstance(out, Raised):
            return out.failure(rid)
        try:
            data = packed(out, len(batch), width, frame.task)
            if not all_finite(data):  # said here, the worker is not taken for broken
                raise ValueError("returned NaN or infinite values")
        except (TypeError, ValueError) as exc:
            return Failure(rid, "bad-output", f"{type(worker).__name__}.{frame.task}: {exc}")
        return Output(rid, shape, len(batch), width, data, compute_ns=computed)


def build_logic(
    worker_class: type[ModelWorker],
    spec: LaunchSpec,
    *,
    pid: int | None = None,
    trace_sink: TraceSink | None = None,
    options: Any = None,
    notify: Callable[[Frame], object] | None = None,
) -> WorkerLogic:
    """Construct and load ``worker_class`` for ``spec``; wrap it in tracing and
    fault knobs as its options ask. ``options`` (already structured) skips
    structuring ``spec.options``; ``trace_sink`` receives every trace record
    (in-process tests); ``notify`` writes a frame to the host at once
    (:class:`ModelLogic`)."""
    from .options import parse_options

    worker = worker_class(spec, pid=pid)
    if options is None:
        kind = worker_class.options_type
        options = dict(spec.options) if kind is None else parse_options(spec.options, kind)
    worker.load(options)
    logic: WorkerLogic = ModelLogic(worker, notify)
    sinks: list[TraceSink] = []
    if isinstance(options, WorkerOptions):
        if options.faults.active(spec.generation):
            logic = FaultInjector(logic, options.faults)
        if options.trace:
            sinks.append(file_sink(options.trace))
    if trace_sink is not None:
        sinks.append(trace_sink)
    if sinks:
        logic = Traced(
            logic,
            sinks,
            pid=worker.pid,
            model=spec.model,
            generation=spec.generation,
            facts=worker.trace_facts(),
        )
    return logic
