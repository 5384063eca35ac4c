"""Simulation test: a hypothesis state machine drives one host through embeds,
bursts of calls arriving in one tick, caller cancellations, deadline expiry,
worker crashes, stale faults, retirement, exit confirmation (including exits
that could not be confirmed in time and are confirmed later) and use after
close, checking the residency invariants after every step.

The host lives in an event loop on a blocking portal's thread; each rule is a
synchronous step that runs to quiescence on that loop. Time is a FakeClock.
The supervisor is watched through what it offers anyone: its observation
events (``synapse_observe``) and a lease watch (``watch_leases``); calls are
told apart by wrapping ``CallRunner.try_begin``, ``start`` and ``run``.
It runs once as configured by default and once with coalescing on, where
the coalescing queues' invariants are checked after every step too.
On failure hypothesis prints the falsifying steps and a reproduction blob.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from concurrent.futures import Future
from contextvars import ContextVar
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import synapse_core as synapse
from synapse_core.call import Coalesced
from synapse_core.hookspecs import hookimpl
from synapse_core.observation import Event, ShapeRefunded
from synapse_core.residency.invariants import ResidencyCheck
from synapse_core.residency.supervisor import Lease, Supervisor
from synapse_core.residency.worker import Phase
from synapse_core.serving import CallRunner
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.wire import Infer

from .call_invariants import ReplicaCheck, coalescing_problems, plan_problems, serving_problems

MODELS = ("a", "b")
DIMS = 4
WORDS = {8: 2, 16: 10, 32: 20}  # words per text that land in each bucket
CAPACITY = 100  # room for a few shapes: 8x2=16, 16x2=32, 32x2=64 units
MAX_CONCURRENT = 2
MAX_WAITING = 3
#: real seconds: a held exit that outlives two of these is unconfirmed
EXIT_GRACE_S = 0.05


def _config(coalesce: bool) -> synapse.HostConfig:
    options = {"buckets": [8, 16, 32], "dims": DIMS, "max_batch": 2}
    models = [
        model_entry(m, transport="fake", package="same", ceiling=64, **options) for m in MODELS
    ]
    models[-1]["workers"] = 2  # a model served by two workers: calls choose between them
    # A request budget of one bucket-8 text: a call's later steps are joined
    # (cut.join_next) unless a small call shares the worker.
    models[0]["max_batch_tokens"] = 8
    return host_config(
        *models,
        exit_grace_s=EXIT_GRACE_S,
        exchange_timeout_s=30.0,
        max_concurrent=MAX_CONCURRENT,
        max_waiting=MAX_WAITING,
        restart_budget={"max_restarts": 1000, "window_s": 1.0},
        lanes={"fake:0": {"capacity": CAPACITY}},
        coalesce=coalesce,
    )


def _expected(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), DIMS)


class Held:
    """Replies held at the worker until a rule lets them go."""

    def __init__(self) -> None:
        self.waiting: list[anyio.Event] = []
        self.hold = True

    async def __call__(self, model: str, frame: Any) -> None:
        if self.hold and isinstance(frame, Infer):
            event = anyio.Event()
            self.waiting.append(event)
            await event.wait()


class RefundWatch:
    """Checks every refund as the supervisor reports it (a ``ShapeRefunded``
    event, emitted as the refund is made)."""

    __name__ = "stateful-refund-watch"

    def __init__(self, machine: ResidencyMachine) -> None:
        self.machine = machine

    @hookimpl
    def synapse_observe(self, event: Event) -> None:
        if not isinstance(event, ShapeRefunded):
            return
        worker = next(
            w
            for sup in self.machine.host.supervisors.values()
            for w in sup.workers.values()
            if w.worker_id == event.worker_id
        )
        process = worker.process
        # A refund while the shape's evict exchange is under way follows the
        # worker's own word; any other refund must follow a confirmed exit.
        said_so = event.shape in worker.busy_shapes
        if not said_so and process is not None and process.returncode is None:
            self.machine.refunds_before_exit.append(f"{event.worker_id} {event.shape}")


class ResidencyMachine(RuleBasedStateMachine):
    backend = "asyncio"
    coalesce = False

    def __init__(self) -> None:
        super().__init__()
        self.portal_cm = start_blocking_portal(self.backend)
        self.portal: BlockingPortal = self.portal_cm.__enter__()
        self.clock = synapse.FakeClock()
        self.transport = InProcessFakeTransport()
        self.transport.hold_exits = True
        self.held = Held()
        self.transport.reply_gate = self.held
        self.host_cm = synapse.open_host(
            _config(self.coalesce),
            plugins=[transport_plugin(self.transport), RefundWatch(self)],
            clock=self.clock,
        )
        self.host_context = self.portal.wrap_async_context_manager(self.host_cm)
        self.host: synapse.Host = self.host_context.__enter__()
        self.calls: list[tuple[Future[Any], list[str]]] = []
        self.retires: list[Future[Any]] = []
        self.refunds_before_exit: list[str] = []
        self.leases_by_call: Counter[int] = Counter()
        self.lease_owner: dict[int, int] = {}
        self.max_leases_per_call = 0
        self.started: list[Any] = []  # every call the head start saw
        self.queue_problems: list[str] = []
        self.overloaded = 0
        self.closed = False
        self.residency = ResidencyCheck()
        self.replicas = ReplicaCheck()
        self._instrument()

    # -- instrumentation -----------------------------------------------------------

    def _instrument(self) -> None:
        machine = self
        # A call's first lease may be granted in the caller's task (the head
        # start) and the rest in its detached task: leases are counted per call.
        serving: ContextVar[int] = ContextVar("serving", default=0)
        original_try_begin = CallRunner.try_begin
        original_start = CallRunner.start
        original_run = CallRunner.run

        def queued() -> int:
            return sum(1 for c in machine.started if c.queued)

        class Leases:
            """Counts each call's leases, told by the supervisor as they come and go."""

            def granted(self, lease: Lease) -> None:
                call = serving.get()
                machine.leases_by_call[call] += 1
                machine.max_leases_per_call = max(
                    machine.max_leases_per_call, machine.leases_by_call[call]
                )
                machine.lease_owner[id(lease)] = call

            def released(self, lease: Lease) -> None:
                machine.leases_by_call[machine.lease_owner.pop(id(lease))] -= 1

        leases = Leases()

        def try_begin(
            runner: CallRunner, plan: Any, deadline: Any, sup: Supervisor, *args: Any
        ) -> Any:
            sup.watch_leases(leases)  # before the call's first lease
            return original_try_begin(runner, plan, deadline, sup, *args)

        def start(runner: CallRunner, call: Any, head: Any) -> None:
            if head is not None:
                # Leased by the head start before the call was made: the call's now.
                machine.leases_by_call[machine.lease_owner[id(head.lease)]] -= 1
                machine.leases_by_call[id(call)] += 1
                machine.lease_owner[id(head.lease)] = id(call)
            try:
                original_start(runner, call, head)
            except synapse.Overloaded:
                machine.overloaded += 1
                # Refused only when max_waiting calls really wait: for a
                # permit, or (holding one) for room on the lane.
                if runner.backlog.waiting < MAX_WAITING:
                    machine.queue_problems.append(
                        f"refused with {runner.backlog.waiting} waiting ({queued()} for a permit)"
                    )
                raise
            machine.started.append(call)
            if queued() > MAX_WAITING:
                machine.queue_problems.append(f"{queued()} calls wait for a permit")

        async def run(runner: CallRunner, call: Any, *args: Any) -> None:
            token = serving.set(id(call))
            try:
                await original_run(runner, call, *args)
            finally:
                serving.reset(token)

        self._patches = [
            (CallRunner, "try_begin", original_try_begin),
            (CallRunner, "start", original_start),
            (CallRunner, "run", original_run),
        ]
        CallRunner.try_begin = try_begin  # type: ignore[method-assign]
        CallRunner.start = start  # type: ignore[method-assign]
        CallRunner.run = run  # type: ignore[method-assign]

    def teardown(self) -> None:
        try:
            self._liveness()
        finally:
            for cls, name, original in self._patches:
                setattr(cls, name, original)
            self.portal.call(self._open_everything)
            try:
                if not self.closed:
                    self.host_context.__exit__(None, None, None)
            finally:
                self.portal_cm.__exit__(None, None, None)

    # -- helpers ---------------------------------------------------------------------------

    def settle(self) -> None:
        """Let the loop run until every task is blocked (on a gate, an exit, ...)."""

        async def idle() -> None:
            await anyio.wait_all_tasks_blocked()

        self.portal.call(idle)

    def worker(self, model: str) -> Any:
        return self.host.worker(model)

    async def _open_everything(self) -> None:
        self.held.hold = False
        self.transport.hold_exits = False
        for event in self.held.waiting:
            event.set()
        for record in self.transport.launches:
            record.process.confirm_exit()

    # -- rules ---------------------------------------------------------------------------

    @rule(
        model=st.sampled_from(MODELS),
        buckets=st.lists(st.sampled_from([8, 16, 32]), min_size=1, max_size=5),
        budget=st.sampled_from([5.0, 50.0, None]),
    )
    def embed(self, model: str, buckets: list[int], budget: float | None) -> None:
        texts = [f"w{i} " * WORDS[b] for i, b in enumerate(buckets)]
        deadline = synapse.Deadline(self.clock() + budget) if budget is not None else None
        if self.closed:
            self._refused_after_close(self.host.embed, model, texts, deadline=deadline)
            return
        future = self.portal.start_task_soon(self._embed, model, texts, deadline)
        self.calls.append((future, texts))
        self.settle()

    @rule(
        model=st.sampled_from(MODELS),
        size=st.integers(2, 3 * (MAX_CONCURRENT + MAX_WAITING)),
        bucket=st.sampled_from([8, 16, 32]),
    )
    def burst(self, model: str, size: int, bucket: int) -> None:
        """Calls that all arrive before any of them runs (one event-loop tick)."""
        if self.closed:
            return
        batch: list[tuple[Future[Any], list[str]]] = []
        for i in range(size):
            future: Future[Any] = Future()
            future.set_running_or_notify_cancel()  # burst callers are never cancelled
            batch.append((future, [f"b{i} " * WORDS[bucket]]))
        self.calls.extend(batch)

        async def one(future: Future[Any], texts: list[str]) -> None:
            future.set_result(await self._embed(model, texts, None))

        async def arrive() -> None:
            # Every call's head start runs before any of them awaits.
            async with anyio.create_task_group() as tg:
                for future, texts in batch:
                    tg.start_soon(one, future, texts)

        refused = self.overloaded
        self.retires.append(self.portal.start_task_soon(arrive))
        self.settle()
        if self.overloaded > refused:
            note_event("a burst was refused in part as overloaded")

    async def _embed(self, model: str, texts: list[str], deadline: Any) -> Any:
        try:
            return await self.host.embed(model, texts, deadline=deadline)
        except synapse.SynapseError as exc:
            return exc

    @rule(pick=st.integers(0, 1000))
    def cancel_a_caller(self, pick: int) -> None:
        pending = [f for f, _ in self.calls if not f.done()]
        if pending:
            pending[pick % len(pending)].cancel()
        self.settle()

    @rule()
    def expire_deadlines(self) -> None:
        self.clock.advance(20.0)

        async def wake() -> None:
            for sup in self.host.supervisors.values():
                sup.lane.notify()
                for w in sup.workers.values():
                    w.notify()

        self.portal.call(wake)
        self.settle()

    @rule(pick=st.integers(0, 1000))
    def release_a_reply(self, pick: int) -> None:
        waiting = [e for e in self.held.waiting if not e.is_set()]
        if waiting:
            event = waiting[pick % len(waiting)]

            async def release() -> None:
                event.set()

            self.portal.call(release)
        self.settle()

    @rule(model=st.sampled_from(MODELS))
    def crash_worker(self, model: str) -> None:
        launched = self.transport.launched(model)
        if launched:
            process = launched[-1].process

            async def kill() -> None:
                process.kill()

            self.portal.call(kill)
        self.settle()

    @rule(model=st.sampled_from(MODELS))
    def stale_fault(self, model: str) -> None:
        worker = self.worker(model)
        if worker is not None and worker.generation > 1:
            sup = self.host.supervisors["fake:0"]
            before = worker.generation

            async def report() -> bool:
                return sup.report_fault(worker, before - 1, "stale")

            assert self.portal.call(report) is False
        self.settle()

    @rule()
    def confirm_exits(self) -> None:
        async def confirm() -> None:
            for record in self.transport.launches:
                if record.process.exited:
                    record.process.confirm_exit()

        self.portal.call(confirm)
        self.settle()

    @rule()
    def let_exit_grace_run_out(self) -> None:
        """Real time passes: an exit held past its grace becomes unconfirmed
        (its worker keeps watching it until a confirm_exits step)."""

        async def wait() -> None:
            await anyio.sleep(5 * EXIT_GRACE_S)

        self.portal.call(wait)
        self.settle()

    @rule(model=st.sampled_from(MODELS))
    def fault_with_a_stuck_exit(self, model: str) -> None:
        """A fault of the current generation whose process will not exit in
        time: its recovery stops at an unconfirmed exit, and resumes once a
        confirm_exits step lets the process go."""
        worker = self.worker(model)
        if self.closed or worker is None or worker.phase is not Phase.READY:
            return
        sup = self.host.supervisors["fake:0"]

        async def report() -> None:
            sup.report_fault(worker, worker.generation, "a fault the machine reports")

        self.portal.call(report)
        self.settle()
        self.let_exit_grace_run_out()

    @rule(model=st.sampled_from(MODELS))
    def retire(self, model: str) -> None:
        if self.closed:
            self._refused_after_close(self.host.retire, model)
            return
        self.retires.append(self.portal.start_task_soon(self.host.retire, model))
        self.settle()

    @rule(model=st.sampled_from(MODELS))
    def load_again(self, model: str) -> None:
        if self.closed:
            self._refused_after_close(self.host.load, model)
            return
        worker = self.worker(model)
        if worker is not None and worker.phase in (Phase.EXITED, Phase.FAILED):
            self.portal.start_task_soon(self._load, model)
        self.settle()

    @precondition(lambda self: len(self.calls) >= 3 and not self.closed)
    @rule()
    def close_host(self) -> None:
        """Close the host (replies and exits let go first, so the close is quick)."""
        self.portal.call(self._open_everything)
        self.host_context.__exit__(None, None, None)
        self.closed = True
        self.settle()

    def _refused_after_close(self, method: Any, *args: Any, **kwargs: Any) -> None:
        """A closed host refuses at once, with HostClosed, and changes nothing."""
        before = self.host.snapshot()

        async def attempt() -> BaseException | None:
            with anyio.fail_after(5):
                try:
                    await method(*args, **kwargs)
                except BaseException as exc:
                    return exc
            return None

        error = self.portal.call(attempt)
        assert isinstance(error, synapse.HostClosed), error
        assert self.host.snapshot() == before

    async def _load(self, model: str) -> None:
        with contextlib.suppress(synapse.SynapseError):
            await self.host.load(model)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def reservations_add_up(self) -> None:
        async def check() -> None:
            for sup in self.host.supervisors.values():
                lane = sup.lane
                assert lane.reserved == sum(c.units for c in lane.charges.values())
                assert 0 <= lane.reserved <= lane.capacity
                for w in sup.workers.values():
                    if w.phase is Phase.EXITED:
                        assert not lane.worker_charges(w.worker_id), w.worker_id

        self.portal.call(check)

    @invariant()
    def residency_invariants_hold(self) -> None:
        async def check() -> list[str]:
            return self.residency.violations(self.host.supervisors.values())

        assert self.portal.call(check) == []

    @invariant()
    def note_unconfirmed_exits(self) -> None:
        lingering = [
            w for sup in self.host.supervisors.values() for w in sup.workers.values() if w.lingering
        ]
        if lingering:
            note_event("an exit could not be confirmed in time (confirmed later, at the latest)")
        for w in lingering:
            # Still charged while it may run: nothing refunded, not counted as exited.
            assert w.phase is not Phase.EXITED, w.worker_id

    @invariant()
    def at_most_max_waiting_calls_wait(self) -> None:
        assert self.queue_problems == []

    @invariant()
    def calls_hold_what_their_fields_say(self) -> None:
        async def check() -> list[str]:
            return serving_problems(self.host, self.started)

        assert self.portal.call(check) == []

    @invariant()
    def coalescing_queues_hold_what_their_fields_say(self) -> None:
        async def check() -> list[str]:
            return coalescing_problems(self.host)

        assert self.portal.call(check) == []
        if any(c.running for c in self.host._starts.coalescers.values()):
            note_event("a coalescing queue ran a call")
        if any(isinstance(c, Coalesced) for c in self.started):
            note_event("callers were served in one coalesced call")

    @invariant()
    def replicas_and_plans_hold_what_their_fields_say(self) -> None:
        async def check() -> list[str]:
            return self.replicas.problems(self.host) + plan_problems(self.started)

        assert self.portal.call(check) == []

    @invariant()
    def one_lease_per_call(self) -> None:
        assert self.max_leases_per_call <= 1

    @invariant()
    def no_refund_before_exit(self) -> None:
        assert self.refunds_before_exit == []

    @invariant()
    def each_generation_restarts_at_most_once(self) -> None:
        per_model: dict[str, list[int]] = defaultdict(list)
        for record in self.transport.launches:
            per_model[record.model].append(record.generation)
        for generations in per_model.values():
            assert len(generations) == len(set((g, i) for i, g in enumerate(generations)))
        # Within one worker record generations are strictly increasing by one.
        hellos: dict[tuple[str, int], int] = Counter(
            (f["model"], f["pid"]) for f in self.transport.frames("hello")
        )
        assert all(n == 1 for n in hellos.values())

    @invariant()
    def no_request_inferred_twice(self) -> None:
        ids = [(f["model"], f["request_id"]) for f in self.transport.frames("infer")]
        assert len(ids) == len(set(ids))

    @invariant()
    def results_in_input_order(self) -> None:
        for future, texts in self.calls:
            if future.done() and not future.cancelled():
                result = future.result()
                if isinstance(result, synapse.EmbedResult):
                    for text, vector in zip(texts, result.vectors, strict=True):
                        assert vector == pytest.approx(_expected(text), abs=1e-6)

    # -- liveness ----------------------------------------------------------------------------

    def _liveness(self) -> None:
        """Stop injecting faults, let everything finish, then demand service."""
        self.portal.call(self._open_everything)
        for _ in range(20):
            self.portal.call(self._open_everything)
            self.settle()
            if all(f.done() for f, _ in self.calls) and all(f.done() for f in self.retires):
                break

        async def finish() -> None:
            with anyio.fail_after(20):
                while not (
                    all(f.done() for f, _ in self.calls) and all(f.done() for f in self.retires)
                ):
                    await self._open_everything()
                    await anyio.sleep(0.001)

        self.portal.call(finish)

        async def confirmed() -> None:
            # Exits that could not be confirmed in time are confirmed once gone.
            with anyio.fail_after(20):
                while any(
                    w.phase is Phase.EXIT_UNCONFIRMED or w.lingering is not None
                    for sup in self.host.supervisors.values()
                    for w in sup.workers.values()
                ):
                    await self._open_everything()
                    await anyio.sleep(0.001)

        self.portal.call(confirmed)
        self.reservations_add_up()
        if self.closed:
            # Everything was retired by the close and every exit confirmed.
            for sup in self.host.supervisors.values():
                assert sup.lane.reserved == 0
                assert all(w.phase is Phase.EXITED for w in sup.workers.values())
            return

        async def serve_again() -> None:
            with anyio.fail_after(20):
                for model in MODELS:
                    await self.host.load(model)
                    result = await self.host.embed(model, ["alive again"])
                    assert result.vectors[0] == pytest.approx(_expected("alive again"), abs=1e-6)

        self.portal.call(serve_again)


class AsyncioMachine(ResidencyMachine):
    backend = "asyncio"


class TrioMachine(ResidencyMachine):
    backend = "trio"


class CoalescingAsyncioMachine(ResidencyMachine):
    backend = "asyncio"
    coalesce = True


class CoalescingTrioMachine(ResidencyMachine):
    backend = "trio"
    coalesce = True


_settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
TestResidencyAsyncio = AsyncioMachine.TestCase
TestResidencyAsyncio.settings = _settings
TestResidencyTrio = TrioMachine.TestCase
TestResidencyTrio.settings = _settings
# Fewer runs: the coalescing queue adds to the same paths, not new ones.
_coalescing_settings = settings(_settings, max_examples=15)
TestCoalescingAsyncio = CoalescingAsyncioMachine.TestCase
TestCoalescingAsyncio.settings = _coalescing_settings
TestCoalescingTrio = CoalescingTrioMachine.TestCase
TestCoalescingTrio.settings = _coalescing_settings
