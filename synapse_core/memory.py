"""In-process byte stream pairs, for in-process workers and tests."""

from __future__ import annotations

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


class MemoryByteSendStream(ByteSendStream):
    def __init__(self, inner: MemoryObjectSendStream[bytes]) -> None:
        self._inner = inner

    async def send(self, item: bytes) -> None:
        await self._inner.send(bytes(item))

    async def aclose(self) -> None:
        await self._inner.aclose()


class MemoryByteReceiveStream(ByteReceiveStream):
    def __init__(self, inner: MemoryObjectReceiveStream[bytes]) -> None:
        self._inner = inner
        #: the rest of the last chunk received, handed out before the next
        # Invariant: bytes leave in the order they arrived, none twice.
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._pending:
            self._pending = await self._inner.receive()
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def byte_pipe(buffer: int = 64) -> tuple[MemoryByteSendStream, MemoryByteReceiveStream]:
    """One direction of an in-memory byte channel; ``buffer`` chunks deep."""
    send, receive = anyio.create_memory_object_stream[bytes](buffer)
    return MemoryByteSendStream(send), MemoryByteReceiveStream(receive)
