"""A framed, one-exchange-at-a-time channel over any pair of anyio byte streams.

Used over subprocess pipes and over in-process memory streams alike.
"""

from __future__ import annotations

import contextlib

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .wire import Codec, Frame, WireError


class ChannelClosed(Exception):
    """The peer closed the channel or the underlying stream failed."""


class ExchangeTimeout(Exception):
    """No reply arrived within the exchange bound."""


class Exchange:
    """Progress of one exchange, so a fault can tell whether the request left."""

    __slots__ = ("written",)

    def __init__(self) -> None:
        self.written = False


class FramedChannel:
    def __init__(self, send: ByteSendStream, receive: ByteReceiveStream, codec: Codec) -> None:
        self._send = send
        self._receive = BufferedByteReceiveStream(receive)
        self._raw_receive = receive
        self.codec = codec
        self._lock = anyio.Lock(fast_acquire=True)
        self.closed = False

    async def send(self, frame: Frame) -> None:
        data = self.codec.encode(frame)
        try:
            await self._send.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ChannelClosed(f"send failed: {exc!r}") from None

    async def receive(self) -> Frame:
        try:
            prefix = await self._receive.receive_exactly(4)
            length = self.codec.body_length(prefix)
            body = await self._receive.receive_exactly(length) if length else b""
        except (anyio.IncompleteRead, anyio.EndOfStream):
            raise ChannelClosed("worker closed its end of the channel") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ChannelClosed(f"receive failed: {exc!r}") from None
        return self.codec.decode(body)

    async def exchange(
        self, frame: Frame, timeout: float, progress: Exchange | None = None
    ) -> Frame:
        """Send ``frame`` and return the next frame, within ``timeout`` seconds.

        ``progress.written`` turns true once the request is fully handed to the
        stream: from then on the worker may have acted on it.
        """
        async with self._lock:
            with anyio.move_on_after(timeout) as scope:
                sent = False
                try:
                    await self.send(frame)
                    sent = True
                finally:
                    # A send cut short by the bound may still land: count it written.
                    if progress is not None and (sent or scope.cancel_called):
                        progress.written = True
                reply = await self.receive()
            if scope.cancelled_caught:
                raise ExchangeTimeout(f"no reply within {timeout:g}s")
            return reply

    async def aclose(self) -> None:
        self.closed = True
        with anyio.CancelScope(shield=True):
            for stream in (self._send, self._raw_receive):
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stream.aclose()


__all__ = ["ChannelClosed", "Exchange", "ExchangeTimeout", "FramedChannel", "WireError"]
