"""The frame loop a worker runs, over pipes (a subprocess) or memory streams.

A worker's behaviour is a :class:`WorkerLogic`: it says hello, then answers
each host frame with an :class:`Action`. :class:`~.model.ModelWorker` builds
one from an author's model; a test worker may implement it directly.

Imported by worker processes: depends only on :mod:`synapse_core.wire`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import BinaryIO, Protocol

import attrs

from ..errors import WireError
from ..wire import PREFIX, Codec, Frame, Hello, HostFrame


@attrs.frozen
class Reply:
    frame: Frame
    delay_s: float = 0.0


@attrs.frozen
class RawReply:
    """Bytes sent as they are (a test worker's malformed frame)."""

    data: bytes
    delay_s: float = 0.0


@attrs.frozen
class Crash:
    """Exit at once, without a reply."""

    status: int = 3


@attrs.frozen
class Hang:
    """Never reply (until terminated)."""


@attrs.frozen
class Stop:
    """Exit cleanly (after a shutdown frame)."""


Action = Reply | RawReply | Crash | Hang | Stop


class WorkerLogic(Protocol):
    """What the frame loop drives: one worker generation's behaviour."""

    #: keep running on SIGTERM (a fault knob: the host must then SIGKILL)
    ignore_sigterm: bool

    def hello(self) -> Hello: ...

    def handle(self, frame: Frame) -> Action: ...


def host_codec() -> Codec:
    """The codec a worker uses: it decodes host frames only."""
    return Codec(accepts=HostFrame)


# -- subprocess loop -------------------------------------------------------------


def writer(frames_out: BinaryIO) -> Callable[[Frame], object]:
    """Writes a frame to the host at once, between the loop's own replies
    (a :class:`~synapse_core.wire.Computed` notice)."""
    codec = host_codec()
    return lambda frame: frames_out.write(codec.encode(frame))


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def serve_pipes(logic: WorkerLogic, frames_in: BinaryIO, frames_out: BinaryIO) -> int:
    """Run ``logic`` over a pair of unbuffered pipe ends; return the exit status."""
    if logic.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    codec = host_codec()
    frames_out.write(codec.encode(logic.hello()))
    while True:
        prefix = _read_exactly(frames_in, PREFIX.size)
        if prefix is None:
            return 0  # host closed the channel
        try:
            body = _read_exactly(frames_in, codec.body_length(prefix)) or b""
            frame: Frame = codec.decode(body)
        except WireError as exc:
            print(f"worker: bad frame from host: {exc}", file=sys.stderr)
            return 4
        action = logic.handle(frame)
        match action:
            case Reply(frame=reply, delay_s=delay):
                if delay:
                    time.sleep(delay)
                frames_out.write(codec.encode(reply))
            case RawReply(data=data, delay_s=delay):
                if delay:
                    time.sleep(delay)
                frames_out.write(data)
            case Crash(status=status):
                os._exit(status)
            case Hang():
                while True:
                    time.sleep(3600)
            case Stop():
                return 0


# -- in-process loop ---------------------------------------------------------------


async def serve_streams(
    logic: WorkerLogic,
    send: object,
    receive: object,
    *,
    before_reply: Callable[[Frame], Awaitable[None]] | None = None,
) -> int:
    """Run ``logic`` over anyio byte streams (an in-process worker).

    Returns the exit status the worker would have had; closing the streams on
    return is how the host sees a crash. ``before_reply`` is awaited before
    each reply is sent: tests hold replies there to order events exactly.
    """
    import anyio
    from anyio.abc import ByteReceiveStream, ByteSendStream
    from anyio.streams.buffered import BufferedByteReceiveStream

    assert isinstance(send, ByteSendStream) and isinstance(receive, ByteReceiveStream)
    reader = BufferedByteReceiveStream(receive)
    codec = host_codec()
    try:
        await send.send(codec.encode(logic.hello()))
        while True:
            try:
                prefix = await reader.receive_exactly(PREFIX.size)
                body = await reader.receive_exactly(codec.body_length(prefix))
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                return 0
            frame = codec.decode(body)
            action = logic.handle(frame)
            if before_reply is not None and isinstance(action, Reply | RawReply):
                await before_reply(frame)
            match action:
                case Reply(frame=reply, delay_s=delay):
                    await anyio.sleep(delay)
                    await send.send(codec.encode(reply))
                case RawReply(data=data, delay_s=delay):
                    await anyio.sleep(delay)
                    await send.send(data)
                case Crash(status=status):
                    return status
                case Hang():
                    await anyio.sleep_forever()
                case Stop():
                    return 0
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return 0
    finally:
        with anyio.CancelScope(shield=True):
            await send.aclose()
            await receive.aclose()
