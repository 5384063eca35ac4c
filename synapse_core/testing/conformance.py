"""The conformance suite: what the host needs from every transport, as tests.

A transport author gets the whole suite, on both anyio backends, by writing
one fixture. In the plugin's tests, e.g. ``tests/test_conformance.py``::

    import pytest
    from synapse_core.testing.conformance import Conformance, Subject

    from my_transport.transport import MyTransport


    class TestMyTransport(Conformance):
        @pytest.fixture
        def subject(self, tmp_path) -> Subject:
            return Subject(
                transport=MyTransport(),
                models=[
                    {"name": "e", "task": "embed", "transport": "mine",
                     "package": "my-embedder", "ceiling": 256, "options": {}},
                    {"name": "r", "task": "rerank", "transport": "mine",
                     "package": "my-reranker", "ceiling": 256, "options": {}},
                ],
            )

The fixture contract (:class:`Subject`):

- ``transport``: the transport as users get it, starting real worker
  processes. A new instance per test (the fixture is function-scoped).
- ``models``: catalog entries, each a dict with the keys of a ``[[models]]``
  table (``name``, ``task``, ``transport`` = the transport's name,
  ``package``, ``ceiling``, ``options``). At least one ``embed`` entry; the
  rerank checks run when there is a ``rerank`` entry and are skipped
  otherwise. Keep models small: every check starts workers.
- ``in_process`` (optional): the same transport's in-process variant (a
  transport built on :class:`~synapse_core.inprocess.InProcessWorkers`);
  then the two variants must agree row for row. Without it that check is
  skipped.
- ``faults`` (default True): the models' options accept the worker kit's
  ``faults`` table (options derived from ``WorkerOptions``); the crash check
  adds ``faults = {crash_on_infer = 1, only_generation = 1}`` to an embed
  model's options. Set False only for a transport that cannot inject faults;
  that check is then skipped.
- ``atol`` (default 1e-5): how far two computations of the same row may
  differ (a text alone vs. in a batch, in a small vs. a large bucket, in
  one variant vs. the other). Rows must not depend on batch mates or bucket.
- ``settings``: host settings for the catalog (e.g. ``exchange_timeout_s``
  for a model that loads slowly).

What is checked (each test's name says it): the hello names the launch and
an identity, dims and buckets are usable; every text gets one row of
``dims`` finite floats and every document one finite score; rows come back
in input order across buckets and do not depend on batch mates or bucket;
admit, evict and inventory round-trip; refusals (unknown model, wrong task,
empty text, over the ceiling) start no worker; a worker that crashes during
a call gives ``OutcomeUnknown`` and the next call is served by generation
+ 1; retiring leaves no worker process behind; the in-process and
subprocess variants agree.

The module is also a pytest plugin (``-p synapse_core.testing.conformance``
or ``pytest_plugins = ["synapse_core.testing.conformance"]`` in the plugin's
top ``conftest.py``): it then provides the shared ``anyio_backend`` fixture to
every test of the plugin. The suite class defines that fixture for itself, so
the suite runs on both backends either way.

Run it like any test file, e.g. ``python -m pytest tests -n auto``; it needs
``pytest``, ``anyio`` and ``trio`` (the core's ``test`` extra:
``pip install "synapse-core[test]"``).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import attrs
import pytest

from ..call import EmbedResult
from ..channel import FramedChannel
from ..config import HostConfig, ModelSpec
from ..errors import OutcomeUnknown, Refused
from ..hookspecs import hookimpl
from ..host import Host, open_host
from ..process import confirm_exit
from ..transport import LaneSession, Launched, LaunchRequest, Transport
from ..wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Codec,
    Evict,
    Evicted,
    Frame,
    Hello,
    Inventory,
    InventoryRequest,
    Shape,
    WorkerFrame,
)
from . import catalog_toml, pid_exists, transport_plugin
from .pytest_plugin import BACKENDS, anyio_backend

__all__ = ["Conformance", "Subject", "anyio_backend"]

#: Bounds that turn a hung worker into a failure; never timing claims.
BOUND_S = 60.0


@attrs.frozen
class Subject:
    """What the author's ``subject`` fixture returns (see the module docstring)."""

    transport: Transport
    models: Sequence[Mapping[str, Any]]
    in_process: Transport | None = None
    faults: bool = True
    atol: float = 1e-5
    settings: Mapping[str, Any] = attrs.field(factory=dict)

    def entries(self, task: str) -> list[Mapping[str, Any]]:
        return [m for m in self.models if m["task"] == task]

    def model(self, task: str) -> Mapping[str, Any]:
        found = self.entries(task)
        if not found:
            if task == "embed":
                raise AssertionError("Subject.models needs at least one embed model")
            pytest.skip(f"the subject has no {task} model")
        return found[0]

    def config(self, *models: Mapping[str, Any]) -> HostConfig:
        text = catalog_toml(*(dict(m) for m in models or self.models), **dict(self.settings))
        return HostConfig.from_toml_text(text, source="conformance catalog")


class _LargestBucket:
    """Sends every sequence to the largest bucket (rows must not change)."""

    __name__ = "conformance-largest-bucket"

    @hookimpl
    def synapse_select_bucket(
        self, length: int, buckets: Sequence[int], model: ModelSpec
    ) -> int | None:
        return buckets[-1]


@asynccontextmanager
async def _host(
    subject: Subject,
    transport: Transport | None = None,
    *extra: object,
    models: Sequence[Mapping[str, Any]] = (),
) -> AsyncIterator[Host]:
    plugins = [transport_plugin(transport or subject.transport), *extra]
    async with open_host(subject.config(*models), plugins=plugins) as host:
        yield host


@attrs.define
class _Direct:
    """A worker started without a host, and the host's end of its channel."""

    launched: Launched
    channel: FramedChannel
    hello: Hello
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    async def ask(self, make: Callable[[int], Frame]) -> Frame:
        return await self.channel.exchange(make(next(self.ids)), BOUND_S)


@asynccontextmanager
async def _direct(
    transport: Transport, entry: Mapping[str, Any], generation: int = 1
) -> AsyncIterator[_Direct]:
    """Launch one worker as the host would (lane opened first if it needs a lock)."""
    spec = next(iter(_specs(entry)))
    lane = transport.lane_for(spec)
    session: LaneSession | None = None
    if lane.hardware_lock:
        session = await transport.open_lane(lane)
    try:
        async with anyio.create_task_group() as tg:
            request = LaunchRequest(spec, f"{spec.name}#direct", generation, lane, session, tg)
            launched = await transport.launch(request)
            try:
                channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
                with anyio.fail_after(BOUND_S):
                    hello = await channel.receive()
                assert isinstance(hello, Hello), f"the first frame must be a hello, got {hello!r}"
                yield _Direct(launched, channel, hello)
            finally:
                with anyio.CancelScope(shield=True):
                    for stream in (launched.send, launched.receive):
                        with suppress(anyio.BrokenResourceError, OSError):
                            await stream.aclose()
                    exited = await confirm_exit(launched.process, 10.0)
            assert exited, f"worker {launched.process.pid} did not exit when its channel closed"
    finally:
        if session is not None:
            session.close()


def _specs(*entries: Mapping[str, Any]) -> tuple[ModelSpec, ...]:
    config = HostConfig.from_toml_text(catalog_toml(*(dict(e) for e in entries)))
    return config.models


def _texts_across_buckets(host: Host, transport: Transport, name: str) -> list[str]:
    """Texts that fill each of the worker's buckets, mixed with short ones."""
    worker = host.worker(name)
    assert worker is not None and worker.hello is not None
    tokenizer = transport.tokenizer(worker.spec)
    buckets = worker.hello.buckets
    ceiling = min(worker.spec.ceiling, buckets[-1])

    def fits(words: int, bucket: int) -> bool:
        text = " ".join(f"w{i % 50}" for i in range(words))
        return tokenizer.sequence_length(tokenizer.encode(text)) <= bucket

    texts = []
    for bucket in [b for b in buckets if b < ceiling] + [ceiling]:
        # The most words that still fit this bucket: the text runs in it, not a smaller one.
        words = 1
        while fits(words + 1, bucket):
            words += 1
        texts.append(" ".join(f"w{i % 50}" for i in range(words)))
    mixed = []
    for i, text in enumerate(reversed(texts)):
        mixed += [text, f"short text {i}"]
    return mixed


def _close(a: Sequence[float], b: Sequence[float], atol: float) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, abs_tol=atol) for x, y in zip(a, b, strict=True)
    )


def _assert_finite(rows: Sequence[Sequence[float]] | Sequence[float], what: str) -> None:
    flat = [v for row in rows for v in (row if isinstance(row, Sequence) else [row])]
    bad = [v for v in flat if not math.isfinite(v)]
    assert not bad, f"{what}: {len(bad)} values are not finite, e.g. {bad[0]!r}"


async def _embedded(host: Host, name: str) -> tuple[EmbedResult, Hello]:
    """``TEXTS`` embedded, and the hello of the worker that served them."""
    result = await host.embed(name, TEXTS)
    worker = host.worker(name)
    assert worker is not None and worker.hello is not None
    return result, worker.hello


TEXTS = ["the first text", "a second, different text", "third", "the first text"]
QUERY = "what does the first text say"


@pytest.mark.anyio
class Conformance:
    """Subclass in a test module and define the ``subject`` fixture."""

    @pytest.fixture(params=BACKENDS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError("define a `subject` fixture returning a Subject")

    # -- the worker's hello and its shapes ------------------------------------------

    async def test_hello_names_the_launch_and_an_identity(self, subject: Subject) -> None:
        entry = subject.model("embed")
        async with _direct(subject.transport, entry, generation=3) as worker:
            hello = worker.hello
            assert hello.protocol == PROTOCOL_VERSION
            assert (hello.model, hello.package, hello.generation) == (
                entry["name"],
                entry["package"],
                3,
            ), "hello must echo the launch spec's model, package and generation"
            assert hello.pid == worker.launched.process.pid, "hello.pid must be the worker's pid"
            assert hello.buckets and hello.buckets == sorted(set(hello.buckets))
            assert hello.dims > 0 and hello.max_batch > 0
            assert hello.identity, "the identity names the vector space; it must not be empty"
            assert hello.implementation and hello.version

    async def test_identity_is_returned_with_every_embedding(self, subject: Subject) -> None:
        async with _host(subject) as host:
            result, hello = await _embedded(host, subject.model("embed")["name"])
        assert result.identity == hello.identity

    async def test_admit_evict_and_inventory_round_trip(self, subject: Subject) -> None:
        async with _direct(subject.transport, subject.model("embed")) as worker:
            shape = Shape(worker.hello.buckets[0], 1)
            first = await worker.ask(lambda rid: Admit(rid, shape))
            assert isinstance(first, Admitted) and first.shape == shape and first.cold
            again = await worker.ask(lambda rid: Admit(rid, shape))
            assert isinstance(again, Admitted) and not again.cold, "a second admit is warm"
            listed = await worker.ask(InventoryRequest)
            assert isinstance(listed, Inventory) and listed.shapes == [shape]
            evicted = await worker.ask(lambda rid: Evict(rid, shape))
            assert isinstance(evicted, Evicted) and evicted.shape == shape
            listed = await worker.ask(InventoryRequest)
            assert isinstance(listed, Inventory) and listed.shapes == []
            cold = await worker.ask(lambda rid: Admit(rid, shape))
            assert isinstance(cold, Admitted) and cold.cold, "an evicted shape is cold again"

    # -- rows --------------------------------------------------------------------------

    async def test_one_row_of_dims_finite_floats_per_text(self, subject: Subject) -> None:
        async with _host(subject) as host:
            result, hello = await _embedded(host, subject.model("embed")["name"])
        assert len(result.vectors) == len(TEXTS)
        assert {len(v) for v in result.vectors} == {hello.dims}
        _assert_finite(result.vectors, "embed")
        assert _close(result.vectors[0], result.vectors[3], subject.atol), "same text"

    async def test_one_finite_score_per_document(self, subject: Subject) -> None:
        entry = subject.model("rerank")
        async with _host(subject) as host:
            scores = (await host.rerank(entry["name"], QUERY, TEXTS)).scores
            alone = (await host.rerank(entry["name"], QUERY, TEXTS[1:2])).scores
        assert len(scores) == len(TEXTS), "one score per document"
        _assert_finite(scores, "rerank")
        assert math.isclose(scores[0], scores[3], abs_tol=subject.atol), "same document"
        assert math.isclose(scores[1], alone[0], abs_tol=subject.atol), "independent of mates"

    async def test_rows_come_back_in_input_order_across_buckets(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with _host(subject) as host:
            await host.load(name)
            texts = _texts_across_buckets(host, subject.transport, name)
            together = (await host.embed(name, texts)).vectors
            alone = [(await host.embed(name, [t])).vectors[0] for t in texts]
        _assert_finite(together, "embed")
        for i, (row, own) in enumerate(zip(together, alone, strict=True)):
            assert _close(row, own, subject.atol), (
                f"row {i} of a call across buckets is not that text's row: rows must come "
                "back in input order and must not depend on their batch mates"
            )

    async def test_rows_do_not_depend_on_batch_mates(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        # Short mates: they share the text's (smallest) bucket, so its batches.
        mates = [f"mate {i}" for i in range(12)]
        async with _host(subject) as host:
            alone = (await host.embed(name, [TEXTS[1]])).vectors[0]
            crowded = (await host.embed(name, [*mates[:5], TEXTS[1], *mates[5:]])).vectors[5]
        assert _close(alone, crowded, subject.atol), (
            f"a text's row changed with its batch mates: {alone[:3]} vs {crowded[:3]}"
        )

    async def test_rows_do_not_depend_on_bucket(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with _host(subject) as host:
            smallest = (await host.embed(name, TEXTS)).vectors
        async with _host(subject, None, _LargestBucket()) as host:
            largest = (await host.embed(name, TEXTS)).vectors
        for i, (a, b) in enumerate(zip(smallest, largest, strict=True)):
            assert _close(a, b, subject.atol), f"text {i}'s row changed with its bucket"

    # -- refusals, faults, retirement ----------------------------------------------------

    async def test_refusals_start_no_worker(
        self, subject: Subject, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        entry = subject.model("embed")
        name = entry["name"]
        launched: list[str] = []
        launch = subject.transport.launch

        async def counting(request: LaunchRequest) -> Launched:
            launched.append(request.model.name)
            return await launch(request)

        monkeypatch.setattr(subject.transport, "launch", counting)
        (spec,) = _specs(entry)
        # The transport may declare buckets before a worker starts: the
        # longest one then caps the ceiling, and is refused up front too.
        declared = getattr(subject.transport, "buckets", lambda spec: None)(spec)
        ceiling = min(spec.ceiling, max(declared)) if declared else spec.ceiling
        too_long = " ".join(f"w{i}" for i in range(ceiling + 1))
        calls: list[tuple[Callable[[Host], Awaitable[object]], str]] = [
            (lambda host: host.embed("no-such-model", ["x"]), "unknown-model"),
            (lambda host: host.rerank(name, "q", ["x"]), "wrong-task"),
            (lambda host: host.embed(name, ["fine", ""]), "empty-sequence"),
            (lambda host: host.embed(name, ["fine", too_long]), "over-ceiling"),
        ]
        async with _host(subject) as host:
            for call, code in calls:
                with pytest.raises(Refused) as refused:
                    await call(host)
                assert refused.value.code == code
            assert launched == [], f"a refused call started a worker for {launched}"
            assert all(not lane.workers for lane in host.snapshot().lanes.values())

    async def test_crash_mid_call_is_outcome_unknown_then_next_generation(
        self, subject: Subject
    ) -> None:
        if not subject.faults:
            pytest.skip("the subject says its options have no fault knobs")
        entry = dict(subject.model("embed"))
        faults = {"crash_on_infer": 1, "only_generation": 1}
        entry["options"] = {**entry.get("options", {}), "faults": faults}
        async with _host(subject, None, models=[entry]) as host:
            with pytest.raises(OutcomeUnknown):
                await host.embed(entry["name"], TEXTS)
            result = await host.embed(entry["name"], TEXTS)
            snap = host.snapshot().worker(entry["name"])
        assert len(result.vectors) == len(TEXTS)
        assert (snap.generation, snap.restarts) == (2, 1)

    async def test_retirement_leaves_no_process(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with _host(subject) as host:
            await host.embed(name, TEXTS)
            pid = host.snapshot().worker(name).pid
            assert pid is not None and pid != os.getpid()
            await host.retire(name)
            assert not pid_exists(pid), f"worker {pid} is still running after retire"
            snap = host.snapshot().worker(name)
            assert snap.state == "exited" and snap.pid is None
            lane = next(iter(host.snapshot().lanes.values()))
            assert lane.reserved == 0, "a retired worker's reservations are refunded"

    async def test_in_process_and_subprocess_variants_agree(self, subject: Subject) -> None:
        if subject.in_process is None:
            pytest.skip("the subject has no in-process variant")
        name = subject.model("embed")["name"]
        results = []
        for transport in (subject.transport, subject.in_process):
            async with _host(subject, transport) as host:
                result, h = await _embedded(host, name)
            results.append((result, (h.buckets, h.dims, h.max_batch, h.identity)))
        (sub, sub_hello), (inp, inp_hello) = results
        assert sub_hello == inp_hello, "the variants' hellos differ"
        for i, (a, b) in enumerate(zip(sub.vectors, inp.vectors, strict=True)):
            assert _close(a, b, subject.atol), f"text {i}: the variants' rows differ"
