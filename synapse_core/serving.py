"""Running a composed call in a detached task that owns all of its resources.

The task, not the caller, holds the execution permit, the catalog guard
(in-flight count), and one lease at a time. A cancelled caller abandons the
call: the current exchange's reply is drained, ownership is released, and no
later group starts. A healthy worker is never restarted for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import attrs

from .deadline import Clock, Deadline
from .errors import DeadlineExceeded, OutcomeUnknown, SynapseError, WorkerFault
from .plan import Group, Item, Plan, chunks, group_by_bucket, over_ceiling
from .plugins import PluginHost
from .residency.supervisor import Backlog, Fault, Lease, Supervisor, wait_bounded
from .residency.worker import Worker
from .wire import Failure, Frame, Infer, Output, Shape, WireError, unpack_rows


@attrs.frozen
class EmbedResult:
    model: str
    #: one row per input, in input order
    vectors: list[list[float]]
    #: vector-space identity of the worker that produced the rows
    identity: str


@attrs.frozen
class RerankResult:
    model: str
    #: one score per document, in input order
    scores: list[float]
    identity: str


class InternalError(SynapseError):
    code = "internal-error"


@attrs.define(eq=False)
class Call:
    plan: Plan
    deadline: Deadline
    rows: list[list[float] | None]
    done: anyio.Event = attrs.field(factory=anyio.Event)
    error: SynapseError | None = None
    identity: str = ""
    #: the caller is gone (cancelled or past its deadline): start nothing new
    abandoned: bool = False
    #: what the wait under way ends in at the deadline (default DeadlineExceeded)
    expiry: SynapseError | None = None

    @classmethod
    def new(cls, plan: Plan, deadline: Deadline) -> Call:
        return cls(plan, deadline, [None] * len(plan.items))

    def note_expiry(self, error: SynapseError | None) -> None:
        self.expiry = error

    def fail(self, error: SynapseError) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class CallRunner:
    """Executes calls for one host; see the module docstring."""

    def __init__(
        self,
        plugins: PluginHost,
        clock: Clock,
        permits: anyio.CapacityLimiter,
        backlog: Backlog,
        exchange_timeout_s: float,
    ) -> None:
        self.plugins = plugins
        self.clock = clock
        self.permits = permits
        self.backlog = backlog
        self.exchange_timeout_s = exchange_timeout_s

    async def wait(self, call: Call) -> None:
        """The caller's side: wait for the result within the deadline."""
        try:
            await wait_bounded(
                call.done.wait,
                call.deadline,
                self.clock,
                DeadlineExceeded(f"deadline passed before {call.plan.model!r} answered"),
            )
        except DeadlineExceeded as exc:
            call.abandoned = True  # the detached task drains and releases
            raise (call.error or call.expiry or exc) from None
        except BaseException:
            call.abandoned = True
            raise

    async def run(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        """The detached task. Never raises: every outcome ends in ``call``."""
        entered = False
        try:
            async with self._permit(call):
                worker.enter()
                entered = True
                await self._serve(call, supervisor, worker)
        except SynapseError as exc:
            call.fail(exc)
        except Exception as exc:  # a bug must not take the host's task group down
            call.fail(InternalError(f"internal error serving {call.plan.model!r}: {exc!r}"))
        finally:
            if entered:
                worker.leave()
            call.done.set()

    def _permit(self, call: Call) -> _Permit:
        return _Permit(self, call)

    async def _serve(self, call: Call, supervisor: Supervisor, worker: Worker) -> None:
        plan = call.plan
        await supervisor.wait_ready(worker, call.deadline)
        hello = worker.hello
        assert hello is not None
        longest = plan.longest
        if longest.length > worker.ceiling:
            raise over_ceiling(plan.model, longest, worker.ceiling, pair=plan.query is not None)
        spec = worker.spec
        buckets = worker.buckets
        groups = group_by_bucket(
            plan.items, buckets, lambda n: self.plugins.select_bucket(n, buckets, spec)
        )
        for group in groups:
            if call.abandoned:
                return
            self._check_deadline(call, "before the next group started")
            shape = Shape(group.bucket, hello.max_batch)
            lease = await supervisor.lease(worker, shape, call.deadline, call.note_expiry)
            fault = None
            try:
                self._check_deadline(call, "during admission; no inference was sent")
                if not call.abandoned:
                    fault = await self._run_group(call, supervisor, lease, group)
            finally:
                supervisor.release(lease)
            if fault is not None:
                # Recovery starts only now that the lease is released.
                supervisor.report_fault(worker, fault.generation, fault.reason)
                if fault.written:
                    raise OutcomeUnknown(
                        f"worker for {plan.model!r} failed after receiving the request "
                        f"({fault.reason}); it may have run and is not replayed"
                    )
                raise WorkerFault(
                    f"worker for {plan.model!r} failed: {fault.reason}; retry the call"
                )
        call.identity = hello.identity
        call.done.set()

    def _check_deadline(self, call: Call, when: str) -> None:
        if call.deadline.expired(self.clock):
            raise DeadlineExceeded(f"deadline passed {when}")

    async def _run_group(
        self, call: Call, supervisor: Supervisor, lease: Lease, group: Group
    ) -> Fault | None:
        """Every chunk of one group under one lease; a fault is returned, not raised."""
        plan = call.plan
        hello = lease.worker.hello
        assert hello is not None
        width = hello.dims if plan.task == "embed" else 1
        for chunk in chunks(group.items, lease.shape.batch):
            request = Infer(
                supervisor.next_request_id(),
                lease.shape,
                plan.task,  # type: ignore[arg-type]
                [item.tokens for item in chunk],
                plan.query,
            )
            try:
                reply = await supervisor.infer(lease, request)
                rows = self._validate(reply, request, chunk, width)
            except Fault as fault:
                return fault
            except WireError as exc:
                return Fault(lease.generation, f"malformed reply: {exc}", written=True)
            # A reply that arrives after the deadline is drained but discarded.
            self._check_deadline(call, "while the worker was answering; its reply was discarded")
            for item, row in zip(chunk, rows, strict=True):
                call.rows[item.index] = row
            if call.abandoned:
                break
        return None

    def _validate(
        self, reply: Frame, request: Infer, chunk: Sequence[Item], width: int
    ) -> list[list[float]]:
        if isinstance(reply, Failure) and reply.request_id == request.request_id:
            raise WorkerFault(f"worker rejected the request: {reply.code}: {reply.message}")
        if not isinstance(reply, Output):
            raise WireError(f"expected output, got {type(reply).__name__}")
        if reply.request_id != request.request_id:
            raise WireError(
                f"reply is for request {reply.request_id}, expected {request.request_id}"
            )
        if reply.shape != request.shape:
            raise WireError(f"reply shape {reply.shape} differs from request shape {request.shape}")
        if reply.rows != len(chunk) or reply.dims != width:
            raise WireError(
                f"reply has {reply.rows}x{reply.dims} values, expected {len(chunk)}x{width}"
            )
        return unpack_rows(reply)


class _Permit:
    """The module-wide execution permit, waited for within the deadline."""

    def __init__(self, runner: CallRunner, call: Call) -> None:
        self.runner = runner
        self.call = call

    async def __aenter__(self) -> None:
        runner, call = self.runner, self.call
        try:
            runner.permits.acquire_on_behalf_of_nowait(call)
            return
        except anyio.WouldBlock:
            pass
        runner.backlog.waiting += 1
        try:
            await wait_bounded(
                lambda: runner.permits.acquire_on_behalf_of(call),
                call.deadline,
                runner.clock,
                DeadlineExceeded("deadline passed waiting for an execution permit"),
            )
        finally:
            runner.backlog.waiting -= 1

    async def __aexit__(self, *exc: object) -> None:
        self.runner.permits.release_on_behalf_of(self.call)
