"""FramedChannel over in-memory byte pipes: exchanges, timeouts, closes, garbage streams."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synapse_core.channel import Exchange, FramedChannel
from synapse_core.errors import ChannelClosed, ExchangeTimeout, WireError
from synapse_core.memory import MemoryByteSendStream, byte_pipe
from synapse_core.process import PipeReceive, PipeSend
from synapse_core.wire import (
    PREFIX,
    Admit,
    Admitted,
    Codec,
    Computed,
    Frame,
    HostFrame,
    Infer,
    Inventory,
    InventoryRequest,
    Shape,
    Shutdown,
    WorkerFrame,
)

BACKENDS = ["asyncio", "trio"]
# A bound that keeps a broken channel from hanging the suite, not a timing claim.
BOUND_S = 10.0


@asynccontextmanager
async def channel_pair(
    max_frame: int = 1 << 20,
) -> AsyncIterator[tuple[FramedChannel, FramedChannel]]:
    """A host end and a worker end, each speaking its own side's frames."""
    host_send, worker_receive = byte_pipe()
    worker_send, host_receive = byte_pipe()
    host = FramedChannel(host_send, host_receive, Codec(WorkerFrame, max_frame=max_frame))
    worker = FramedChannel(worker_send, worker_receive, Codec(HostFrame, max_frame=max_frame))
    try:
        yield host, worker
    finally:
        await host.aclose()
        await worker.aclose()


def raw_receiver(max_frame: int) -> tuple[MemoryByteSendStream, FramedChannel]:
    """A channel whose peer writes raw bytes (to feed it anything)."""
    peer_send, receive = byte_pipe(buffer=1024)
    unused_send, _ = byte_pipe()
    return peer_send, FramedChannel(unused_send, receive, Codec(WorkerFrame, max_frame=max_frame))


@pytest.mark.anyio
async def test_exchange_round_trip() -> None:
    async with channel_pair() as (host, worker):

        async def serve() -> None:
            for _ in range(2):
                request = await worker.receive()
                assert isinstance(request, Admit)
                await worker.send(Admitted(request.request_id, request.shape, cold=True, cost=3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            with anyio.fail_after(BOUND_S):
                progress = Exchange()
                first = await host.exchange(Admit(1, Shape(16, 2)), 5.0, progress)
                second = await host.exchange(Admit(2, Shape(32, 1)), 5.0)
    assert progress.written
    assert first == Admitted(1, Shape(16, 2), True, 3)
    assert second == Admitted(2, Shape(32, 1), True, 3)


@pytest.mark.anyio
async def test_exchanges_are_serialised() -> None:
    """Two concurrent exchanges never interleave: each gets its own reply."""
    async with channel_pair() as (host, worker):
        seen: list[int] = []

        async def serve() -> None:
            for _ in range(2):
                request = await worker.receive()
                assert isinstance(request, InventoryRequest)
                seen.append(request.request_id)
                await worker.send(Inventory(request.request_id, [Shape(request.request_id, 1)]))

        replies: dict[int, Frame] = {}

        async def call(rid: int) -> None:
            replies[rid] = await host.exchange(InventoryRequest(rid), 5.0)

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                tg.start_soon(call, 1)
                tg.start_soon(call, 2)
    assert sorted(seen) == [1, 2]
    assert replies == {1: Inventory(1, [Shape(1, 1)]), 2: Inventory(2, [Shape(2, 1)])}


@pytest.mark.anyio
async def test_exchange_timeout_after_the_request_was_written() -> None:
    async with channel_pair() as (host, worker):
        progress = Exchange()
        with anyio.fail_after(BOUND_S), pytest.raises(ExchangeTimeout, match="no reply within"):
            await host.exchange(Admit(5, Shape(16, 1)), 0.05, progress)
        assert progress.written
        # The worker did get the request: it may have acted on it.
        with anyio.fail_after(BOUND_S):
            assert await worker.receive() == Admit(5, Shape(16, 1))


@pytest.mark.anyio
async def test_exchange_to_a_closed_peer_is_not_written() -> None:
    host_send, worker_receive = byte_pipe()
    _, host_receive = byte_pipe()
    host = FramedChannel(host_send, host_receive, Codec(WorkerFrame))
    await worker_receive.aclose()
    progress = Exchange()
    with anyio.fail_after(BOUND_S), pytest.raises(ChannelClosed, match="send failed"):
        await host.exchange(Shutdown(), 5.0, progress)
    assert not progress.written
    await host.aclose()
    assert host.closed


@pytest.mark.anyio
async def test_peer_close_mid_frame_is_channel_closed() -> None:
    peer, channel = raw_receiver(max_frame=1 << 20)
    whole = Codec().encode(Admitted(1, Shape(16, 1), cold=False))
    await peer.send(whole[:-3])
    await peer.aclose()
    with anyio.fail_after(BOUND_S), pytest.raises(ChannelClosed, match="closed its end"):
        await channel.receive()
    await channel.aclose()


@pytest.mark.anyio
async def test_peer_close_mid_prefix_is_channel_closed() -> None:
    peer, channel = raw_receiver(max_frame=1 << 20)
    await peer.send(PREFIX.pack(12)[:2])
    await peer.aclose()
    with anyio.fail_after(BOUND_S), pytest.raises(ChannelClosed):
        await channel.receive()
    await channel.aclose()


@pytest.mark.anyio
async def test_peer_close_during_exchange_is_channel_closed() -> None:
    async with channel_pair() as (host, worker):

        async def crash() -> None:
            await worker.receive()
            await worker.aclose()

        progress = Exchange()
        async with anyio.create_task_group() as tg:
            tg.start_soon(crash)
            with anyio.fail_after(BOUND_S), pytest.raises(ChannelClosed):
                await host.exchange(Admit(1, Shape(16, 1)), 5.0, progress)
        assert progress.written


@pytest.mark.anyio
async def test_frames_split_across_chunks_reassemble() -> None:
    peer, channel = raw_receiver(max_frame=1 << 20)
    codec = Codec()
    frames = [Admitted(i, Shape(16, i), cold=bool(i % 2), cost=i) for i in range(1, 4)]
    stream = b"".join(codec.encode(f) for f in frames)
    for i in range(len(stream)):  # one byte at a time
        await peer.send(stream[i : i + 1])
    await peer.aclose()
    with anyio.fail_after(BOUND_S):
        got = [await channel.receive() for _ in frames]
        with pytest.raises(ChannelClosed):
            await channel.receive()
    assert got == frames
    await channel.aclose()


@pytest.mark.anyio
async def test_oversized_header_is_wire_error_without_reading_the_body() -> None:
    peer, channel = raw_receiver(max_frame=64)
    await peer.send(PREFIX.pack(65))  # no body follows, and the peer stays open
    with anyio.fail_after(BOUND_S), pytest.raises(WireError, match="announces 65 bytes"):
        await channel.receive()
    await peer.aclose()
    await channel.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (b"loading model\n", "worker wrote to stdout: b'loading model\\n'"),
        (b"\tx" * 40, "worker wrote to stdout: b'" + "\\tx" * 30 + "'…"),
    ],
    ids=["short", "long"],
)
async def test_text_where_a_header_should_be_is_reported_as_stray_stdout(
    text: bytes, shown: str
) -> None:
    peer, channel = raw_receiver(max_frame=1 << 20)
    await peer.send(text)
    with anyio.fail_after(BOUND_S), pytest.raises(WireError) as error:
        await channel.receive()
    assert str(error.value) == shown
    await peer.aclose()
    await channel.aclose()


# -- fuzzed byte streams ------------------------------------------------------------

MAX_FRAME = 4096
frame_bytes = st.sampled_from(
    [
        Codec().encode(Admitted(1, Shape(16, 1), cold=True)),
        Codec().encode(Inventory(2, [Shape(16, 1), Shape(32, 2)])),
        Codec().encode(Admit(3, Shape(16, 1))),  # a host frame: wrong direction
    ]
)
pieces = st.one_of(
    st.binary(max_size=64),  # arbitrary bytes
    frame_bytes,  # a whole valid frame
    frame_bytes.flatmap(lambda b: st.integers(1, len(b) - 1).map(lambda n: b[:n])),  # truncated
    st.integers(0, 2**32 - 1).map(PREFIX.pack),  # any header, huge ones included
    st.tuples(st.integers(0, 64), st.binary(max_size=64)).map(
        lambda lb: PREFIX.pack(lb[0]) + lb[1]  # a plausible header and some body
    ),
)
streams = st.lists(pieces, min_size=0, max_size=6)


async def _drain(chunks: list[bytes]) -> list[Frame]:
    peer, channel = raw_receiver(max_frame=MAX_FRAME)
    for chunk in chunks:
        await peer.send(chunk)
    await peer.aclose()  # so truncated input ends instead of waiting for more
    frames: list[Frame] = []
    try:
        with anyio.fail_after(BOUND_S):
            while True:
                try:
                    frames.append(await channel.receive())
                except (WireError, ChannelClosed):
                    return frames
    finally:
        await channel.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(chunks=streams)
def test_fuzzed_streams_end_in_frames_or_typed_errors(backend: str, chunks: list[bytes]) -> None:
    frames = anyio.run(_drain, chunks, backend=backend)
    assert all(isinstance(f, WorkerFrame.__args__) for f in frames)
    # Frames only come out of the bytes that went in: each one costs a header.
    assert len(frames) * PREFIX.size <= sum(len(c) for c in chunks)


worker_frames = [Admitted(1, Shape(16, 1), cold=True), Inventory(2, [Shape(16, 1)])]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None)
@given(valid=st.lists(st.sampled_from(worker_frames), max_size=3), tail=pieces)
def test_valid_frames_arrive_in_order_before_garbage(
    backend: str, valid: list[Frame], tail: bytes
) -> None:
    codec = Codec()
    frames = anyio.run(_drain, [*(codec.encode(f) for f in valid), tail], backend=backend)
    assert frames[: len(valid)] == valid


# -- split exchanges over real pipes --------------------------------------------------


@asynccontextmanager
async def pipe_pair() -> AsyncIterator[tuple[FramedChannel, FramedChannel]]:
    """A host end and a worker end over two OS pipes, as the host talks to a
    worker subprocess (the non-blocking pipe ends support writes and reads
    without waiting)."""
    to_worker_r, to_worker_w = os.pipe()
    to_host_r, to_host_w = os.pipe()
    host = FramedChannel(PipeSend(to_worker_w), PipeReceive(to_host_r), Codec(WorkerFrame))
    worker = FramedChannel(PipeSend(to_host_w), PipeReceive(to_worker_r), Codec(HostFrame))
    try:
        yield host, worker
    finally:
        await host.aclose()
        await worker.aclose()


async def _answer(worker: FramedChannel, replies: int, seen: list[int]) -> None:
    for _ in range(replies):
        request = await worker.receive()
        assert isinstance(request, Admit | InventoryRequest)
        seen.append(request.request_id)
        await worker.send(Inventory(request.request_id, []))


@pytest.mark.anyio
async def test_begin_now_writes_at_once_and_complete_takes_a_reply_already_here() -> None:
    async with pipe_pair() as (host, worker):
        exchange = host.begin_now(InventoryRequest(1))
        assert exchange is not None and exchange.written and exchange.unsent is None
        with anyio.fail_after(BOUND_S):
            await _answer(worker, 1, [])  # the reply waits in the pipe
            assert await host.complete(exchange, 5.0) == Inventory(1, [])


@pytest.mark.anyio
async def test_a_busy_channel_hands_its_turn_over_in_order() -> None:
    async with pipe_pair() as (host, worker):
        first = host.begin_now(InventoryRequest(1))
        assert first is not None
        assert host.begin_now(InventoryRequest(9)) is None  # busy: nothing written
        seen: list[int] = []
        replies: dict[int, Frame] = {}

        async def call(request_id: int, queued: anyio.Event) -> None:
            queued.set()
            replies[request_id] = await host.exchange(InventoryRequest(request_id), 5.0)

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_answer, worker, 3, seen)
                for request_id in (2, 3):
                    queued = anyio.Event()
                    tg.start_soon(call, request_id, queued)
                    await queued.wait()
                    await anyio.wait_all_tasks_blocked()
                assert await host.complete(first, 5.0) == Inventory(1, [])
    assert seen == [1, 2, 3]
    assert replies == {2: Inventory(2, []), 3: Inventory(3, [])}


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_the_queue_and_the_turn_moves_on() -> None:
    async with pipe_pair() as (host, worker):
        first = host.begin_now(InventoryRequest(1))
        assert first is not None
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                waiter = anyio.CancelScope()

                async def wait_for_turn() -> None:
                    with waiter:
                        await host.begin(InventoryRequest(2))

                tg.start_soon(wait_for_turn)
                await anyio.wait_all_tasks_blocked()
                waiter.cancel()
            assert waiter.cancelled_caught
            first.release()
            # The turn came back instead of going to the cancelled waiter.
            again = host.begin_now(InventoryRequest(3))
            assert again is not None
            seen: list[int] = []
            await _answer(worker, 2, seen)
            assert seen == [1, 3]


@pytest.mark.anyio
async def test_a_request_larger_than_the_pipe_is_finished_by_complete() -> None:
    big = Infer(7, Shape(16, 1), "embed", [list(range(1000, 41000))])  # over 64 KiB
    async with pipe_pair() as (host, worker):
        exchange = host.begin_now(big)
        assert exchange is not None and exchange.unsent  # the pipe took only part
        assert not exchange.written

        async def answer() -> None:
            assert await worker.receive() == big
            await worker.send(Inventory(7, []))

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(answer)
                assert await host.complete(exchange, 5.0) == Inventory(7, [])
        assert exchange.written and exchange.unsent is None


@pytest.mark.anyio
async def test_a_channel_over_object_streams_of_byte_chunks_sends_each_request_once() -> None:
    """anyio's memory object streams have ``send_nowait``/``receive_nowait``
    of their own meaning: the channel must not take them for the byte-stream
    methods of the same names (that sent every request twice)."""
    to_worker, worker_inbox = anyio.create_memory_object_stream[bytes](16)
    to_host, host_inbox = anyio.create_memory_object_stream[bytes](16)
    host = FramedChannel(to_worker, host_inbox, Codec(WorkerFrame))  # type: ignore[arg-type]
    codec = Codec(HostFrame)
    with anyio.fail_after(BOUND_S):
        exchange = host.begin_now(InventoryRequest(4))
        assert exchange is not None
        async with anyio.create_task_group() as tg:

            async def worker() -> None:
                request = codec.decode((await worker_inbox.receive())[PREFIX.size :])
                assert request == InventoryRequest(4)
                await to_host.send(codec.encode(Inventory(4, [])))

            tg.start_soon(worker)
            assert await host.complete(exchange, 5.0) == Inventory(4, [])
    assert worker_inbox.statistics().current_buffer_used == 0  # no second copy
    for stream in (to_worker, worker_inbox, to_host, host_inbox):
        stream.close()


class FailingWrites(MemoryByteSendStream):
    """A byte stream whose immediate write fails in a way no stream should."""

    def send_nowait(self, item: bytes) -> int:
        raise RuntimeError("a bug in the stream")


@pytest.mark.anyio
async def test_an_unexpected_write_error_gives_the_turn_back() -> None:
    send, _ = anyio.create_memory_object_stream[bytes](1)
    _, receive = byte_pipe()
    host = FramedChannel(FailingWrites(send), receive, Codec(WorkerFrame))
    for _ in range(2):  # the second attempt finds the channel free again
        with pytest.raises(RuntimeError, match="a bug in the stream"):
            host.begin_now(InventoryRequest(1))
    send.close()
    await host.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("together", [False, True], ids=["apart", "in-one-read"])
async def test_a_workers_computed_notice_is_dropped_before_its_reply(together: bool) -> None:
    """``computed`` only wakes the host early: the exchange's reply is the
    frame after it, whether the two arrive in one read or apart."""
    peer, host = raw_receiver(1 << 20)
    codec = Codec(WorkerFrame)
    notice, answer = codec.encode(Computed(3)), codec.encode(Inventory(3, [Shape(8, 1)]))
    with anyio.fail_after(BOUND_S):
        if together:
            await peer.send(notice + answer)
        else:
            await peer.send(notice)
            await peer.send(answer)
        assert await host.receive() == Inventory(3, [Shape(8, 1)])


@pytest.mark.anyio
async def test_a_computed_notice_without_a_reply_still_times_out() -> None:
    async with channel_pair() as (host, worker):

        async def notice_only() -> None:
            request = await worker.receive()
            assert isinstance(request, InventoryRequest)
            await worker.send(Computed(request.request_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(notice_only)
            with anyio.fail_after(BOUND_S), pytest.raises(ExchangeTimeout):
                await host.exchange(InventoryRequest(4), 0.2)
