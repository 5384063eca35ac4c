"""A framed, one-exchange-at-a-time channel over any pair of anyio byte streams.

Used over subprocess pipes and over in-process memory streams alike.

An exchange has two halves. :meth:`FramedChannel.begin_now` (synchronous)
takes the idle channel and writes the request as far as the stream accepts
without waiting; :meth:`FramedChannel.complete` sends the rest and receives
the reply. The turn belongs to the exchange, not to a task: the host begins
an exchange in the caller's task, before any await, and the detached task
that owns the call completes it, so the caller's hand-off to that task
overlaps the worker's compute instead of delaying the request.

A worker's :class:`~synapse_core.wire.Computed` notice (sent before a reply
after a long computation, so that the host wakes while the reply is
packed) is dropped wherever frames are cut: every method here returns the
frames around it.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from .errors import ChannelClosed, ExchangeTimeout, WireError
from .wire import PREFIX, Codec, Computed, Frame, stray_text

_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
_READ_SIZE = 65536
#: the most one read asks for: a huge frame arrives in pipe-sized pieces anyway
_MAX_READ = 1 << 20


class Exchange:
    """One exchange under way: its unsent bytes, and whether the request left.

    ``written`` turns true once the request is fully handed to the stream
    (or the bound cut its sending short): from then on the worker may have
    acted on it, so a fault must not be answered by a replay.
    """

    __slots__ = ("_turns", "error", "unsent", "written")

    def __init__(self, turns: _Turns | None = None) -> None:
        # Invariant: once true, never false again (a replay is never safe after).
        self.written = False
        #: the request's bytes not yet handed to the stream
        # Invariant: unsent is None once written (unless the bound cut the send short).
        self.unsent: bytes | None = None
        #: why the request could not be written; raised when it is completed
        self.error: ChannelClosed | None = None
        #: the channel's turns while this exchange holds the turn (``None``:
        #: a record of progress only, or the turn was given back)
        # Invariant: set ⇒ this exchange holds its channel's turn; it holds
        #   it until ``release``, which gives it back exactly once.
        self._turns = turns

    def release(self) -> None:
        """Give the channel's turn back, once. :meth:`FramedChannel.complete`
        does; an exchange dropped unfinished leaves its reply unread."""
        turns, self._turns = self._turns, None
        if turns is not None:
            turns.give_back()


class _Turns:
    """Whose turn the channel is: FIFO, handed over directly, not bound to a task."""

    __slots__ = ("_waiters", "busy")

    def __init__(self) -> None:
        #: an exchange (or a task between taking the turn and writing) holds the turn
        # Invariant: busy ⇔ exactly one holder; a turn given back while
        #   others wait stays busy and passes to the oldest of them.
        self.busy = False
        #: the tasks waiting for the turn, oldest first, each event set only
        #: when the turn is handed to it
        # Invariant: _waiters nonempty ⇒ busy; a waiter cancelled after its
        #   event was set passes the turn on, otherwise it leaves the deque.
        self._waiters: deque[anyio.Event] = deque()

    def take_now(self) -> bool:
        if self.busy:
            return False
        self.busy = True
        return True

    async def take(self) -> None:
        if self.take_now():
            return
        turn = anyio.Event()
        self._waiters.append(turn)
        try:
            await turn.wait()
        except BaseException:
            if turn.is_set():
                self.give_back()  # handed over as we were cancelled: pass it on
            else:
                self._waiters.remove(turn)
            raise

    def give_back(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # stays busy: the turn moves on
        else:
            self.busy = False


class FramedChannel:
    def __init__(self, send: ByteSendStream, receive: ByteReceiveStream, codec: Codec) -> None:
        self._send = send
        self._receive = receive
        # Byte streams that can write and read without waiting (the worker
        # pipes) let a request leave before its sender's first await, and a
        # reply already here be taken without a timeout. Only byte streams:
        # anyio's object streams have methods of these names with other meanings.
        self._send_now: Callable[[bytes], int] | None = (
            getattr(send, "send_nowait", None) if isinstance(send, ByteSendStream) else None
        )
        self._receive_nowait: Callable[[int], bytes | None] | None = (
            getattr(receive, "receive_nowait", None)
            if isinstance(receive, ByteReceiveStream)
            else None
        )
        self._read: Callable[[int], Awaitable[bytes]] = (
            receive.receive if isinstance(receive, ByteReceiveStream) else self._read_item
        )
        #: bytes received and not yet cut into frames
        # Invariant: starts at a frame boundary (``_take_frame`` cuts whole frames only).
        self._buffer = bytearray()
        #: bytes the next frame still lacks (sizes the next read)
        self._wanted = 0
        self.codec = codec
        # Invariant: one exchange at a time: every request is written and its
        #   reply read while its exchange holds this turn.
        self._turns = _Turns()
        # Invariant: once set, never unset; an exchange begun after fails.
        self.closed = False

    # -- frames -------------------------------------------------------------------

    async def send(self, frame: Frame) -> None:
        await self._send_bytes(self.codec.encode(frame))

    async def _send_bytes(self, data: bytes) -> None:
        try:
            await self._send.send(data)
        except _STREAM_ERRORS as exc:
            raise ChannelClosed(f"send failed: {exc!r}") from None

    async def receive(self) -> Frame:
        try:
            frame = self._take_frame()
            while frame is None:
                frame = self._add(await self._read(self._read_size()))
        except (anyio.IncompleteRead, anyio.EndOfStream):
            raise ChannelClosed("worker closed its end of the channel") from None
        except _STREAM_ERRORS as exc:
            raise ChannelClosed(f"receive failed: {exc!r}") from None
        return frame

    async def _read_item(self, max_bytes: int) -> bytes:
        """A read from a stream of byte chunks that takes no size."""
        return bytes(await self._receive.receive())

    def _receive_now(self) -> Frame | None:
        """A whole frame that is already here, or ``None`` (then :meth:`receive`,
        which also reports any stream error)."""
        frame = self._take_frame()
        if frame is None and self._receive_nowait is not None:
            try:
                data = self._receive_nowait(self._read_size())
            except (anyio.EndOfStream, *_STREAM_ERRORS):
                return None
            if data:
                frame = self._add(data)
        return frame

    def _add(self, data: bytes) -> Frame | None:
        """Take in ``data`` just read, and cut the next whole frame off, if
        there is one. A read that is one whole frame with nothing buffered
        before it (the usual reply) is decoded where it is: no copies."""
        if not self._buffer and len(data) > PREFIX.size:
            try:
                whole = PREFIX.size + self.codec.body_length(data[: PREFIX.size]) == len(data)
            except WireError:
                whole = False  # cut from the buffer, which says what is wrong
            if whole:
                self._wanted = 0
                frame = self.codec.decode(memoryview(data)[PREFIX.size :])
                return None if type(frame) is Computed else frame
        self._buffer += data
        return self._take_frame()

    def _read_size(self) -> int:
        return min(max(self._wanted, _READ_SIZE), _MAX_READ)

    def _take_frame(self) -> Frame | None:
        """Cut the next whole frame off the buffer, dropping a worker's
        :class:`~synapse_core.wire.Computed` notices; note how many bytes
        the next frame lacks."""
        while (frame := self._cut_frame()) is not None:
            if type(frame) is not Computed:
                return frame
        return None

    def _cut_frame(self) -> Frame | None:
        """Cut the next whole frame off the buffer; note how many bytes it lacks."""
        buffer = self._buffer
        if len(buffer) < PREFIX.size:
            self._wanted = PREFIX.size - len(buffer)
            return None
        try:
            end = PREFIX.size + self.codec.body_length(buffer[: PREFIX.size])
        except WireError as exc:
            text = stray_text(buffer)
            if text is None:
                raise
            raise WireError(text) from exc
        if len(buffer) < end:
            self._wanted = end - len(buffer)
            return None
        body = bytes(buffer[PREFIX.size : end])
        del buffer[:end]
        return self.codec.decode(body)

    # -- exchanges ----------------------------------------------------------------

    def begin_now(self, frame: Frame) -> Exchange | None:
        """Take the channel if it is idle and write ``frame`` as far as the stream
        takes it without waiting; ``None`` if another exchange holds the channel.

        Raises :class:`WireError` (nothing taken) if the frame cannot be encoded.
        Every begun exchange must be finished with :meth:`complete`.
        """
        data = self.codec.encode(frame)
        if not self._turns.take_now():
            return None
        return self._start(data)

    async def begin(self, frame: Frame, check: Callable[[], None] | None = None) -> Exchange:
        """:meth:`begin_now`, waiting for the channel's turn if it is busy.

        ``check`` runs once the turn is taken, before anything is written; if
        it raises (its sender gave up while waiting), the turn is given back.
        """
        data = self.codec.encode(frame)
        await self._turns.take()
        if check is not None:
            try:
                check()
            except BaseException:
                self._turns.give_back()
                raise
        return self._start(data)

    def _start(self, data: bytes) -> Exchange:
        """Write what the stream takes now; the turn is held from here on."""
        exchange = Exchange(self._turns)
        exchange.unsent = data
        if self.closed:
            exchange.error = ChannelClosed("the channel is closed")
        elif self._send_now is not None:
            try:
                sent = self._send_now(data)
            except _STREAM_ERRORS as exc:
                exchange.error = ChannelClosed(f"send failed: {exc!r}")
            except BaseException:
                exchange.release()  # never keep a turn nobody will finish
                raise
            else:
                if sent == len(data):
                    exchange.unsent = None
                    exchange.written = True
                else:
                    exchange.unsent = data[sent:]
        return exchange

    async def complete(self, exchange: Exchange, timeout: float) -> Frame:
        """Finish a begun exchange: send what is left and return the next frame,
        within ``timeout`` seconds. Gives the channel's turn back in every case."""
        try:
            if exchange.error is None and exchange.unsent is None:
                ready = self._receive_now()
                if ready is not None:
                    return ready  # already here: no bound to set up
            with anyio.move_on_after(timeout) as scope:
                try:
                    if exchange.error is not None:
                        raise exchange.error
                    if exchange.unsent is not None:
                        await self._send_bytes(exchange.unsent)
                        exchange.unsent = None
                        exchange.written = True
                finally:
                    # A send cut short by the bound may still land: count it written.
                    if scope.cancel_called:
                        exchange.written = True
                reply = await self.receive()
            if scope.cancelled_caught:
                raise ExchangeTimeout(f"no reply within {timeout:g}s")
            return reply
        finally:
            exchange.release()

    async def exchange(
        self, frame: Frame, timeout: float, progress: Exchange | None = None
    ) -> Frame:
        """Send ``frame`` and return the next frame, within ``timeout`` seconds.

        ``progress.written`` tells a caller whose exchange failed whether the
        request had left (see :class:`Exchange`).
        """
        exchange = await self.begin(frame)
        try:
            return await self.complete(exchange, timeout)
        finally:
            if progress is not None:
                progress.written = exchange.written

    async def aclose(self) -> None:
        self.closed = True
        with anyio.CancelScope(shield=True):
            for stream in (self._send, self._receive):
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stream.aclose()


__all__ = ["Exchange", "FramedChannel"]
