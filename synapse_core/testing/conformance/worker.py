"""Conformance checks of a worker on its own: its hello, the identity it
names, and admitting, evicting and listing shapes."""

from __future__ import annotations

from ...wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Evict,
    Evicted,
    Inventory,
    InventoryRequest,
    Shape,
)
from .harness import direct, embedded, host_for
from .subject import Subject


class WorkerChecks:
    """The worker's hello and its shapes."""

    async def test_hello_names_the_launch_and_an_identity(self, subject: Subject) -> None:
        entry = subject.model("embed")
        async with direct(subject.transport, entry, generation=3) as worker:
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
        async with host_for(subject) as host:
            result, hello = await embedded(host, subject.model("embed")["name"])
        assert result.identity == hello.identity

    async def test_admit_evict_and_inventory_round_trip(self, subject: Subject) -> None:
        async with direct(subject.transport, subject.model("embed")) as worker:
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
