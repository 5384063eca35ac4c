"""The least a worker process can do: the `cpu` group's process floor.

``python -m benchmarks.floor_worker``: loads the shipped MiniLM on
onnxruntime (the graph the CPU lane's workers run, every core), then
answers each request on its pipes until stdin closes. A request is a
little-endian ``uint32`` count and that many ``int32`` token ids (no
special tokens); the answer a ``uint32`` byte count and the vector as
float32. No frames, checks, marks or tracing: what is left is the cost of
leaving the process (two pipe writes, two wake-ups) around the same
forward pass :class:`benchmarks.cpu.OrtLimit` runs in-process.
"""

from __future__ import annotations

import os
import struct
import sys

COUNT = struct.Struct("<I")


def read_exactly(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd`` (blocking), or fewer at end of stream."""
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def main() -> int:
    from synapse_models import model as runtime

    from .cpu import OrtLimit

    limit = OrtLimit(runtime.load())
    os.write(1, b"ready\n")
    while header := read_exactly(0, COUNT.size):
        (count,) = COUNT.unpack(header)
        ids = list(struct.unpack(f"<{count}i", read_exactly(0, 4 * count)))
        vector = limit.run([ids])[0].astype("<f4").tobytes()
        os.write(1, COUNT.pack(len(vector)) + vector)
    return 0


if __name__ == "__main__":
    sys.exit(main())
