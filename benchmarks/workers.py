"""Mock worker subprocesses: spawn-to-hello time and idle resident memory.

Each worker spawn is paired with a spawn of the bare interpreter that writes
one byte and then idles, which is the floor both figures stand on.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

from synapse_core.channel import FramedChannel
from synapse_core.config import ModelSpec
from synapse_core.process import confirm_exit
from synapse_core.transport import LaunchRequest
from synapse_core.wire import Admit, Codec, Hello, Infer, Shape, Shutdown, WorkerFrame
from synapse_mock_transport.transport import LANE, MockTransport

from . import rig
from .harness import Figure, Mode, Series, Target

FLOOR_PROGRAM = "import os, sys; os.write(1, b'x'); sys.stdin.buffer.read()"


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (``/proc`` on Linux, ``ps`` elsewhere)."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def measure(mode: Mode) -> list[Figure]:
    series: Series = anyio.run(_measure, mode)
    return [
        Figure(
            "worker_cold_start_ms",
            "ms",
            "spawn to hello of a mock worker subprocess, p50",
            series["cold_start_ms"],
            Target("<=", 150.0),
            series.medians("python_floor_ms"),
        ),
        Figure(
            "worker_rss_mib",
            "MiB",
            "resident memory of one idle mock worker that has served a call",
            series["rss_served_mib"],
            Target("<=", 25.0),
            series.medians("rss_after_hello_mib", "python_floor_rss_mib"),
        ),
    ]


async def _measure(mode: Mode) -> Series:
    spec = ModelSpec(
        name=rig.MODEL,
        task="embed",
        transport="mock",
        package=rig.PACKAGE,
        ceiling=rig.BUCKETS[-1],
        options=dict(rig.OPTIONS),
    )
    series = Series()
    for rep in range(mode.repetitions):
        parts: dict[str, list[float]] = {}
        for i in range(mode.cold_starts):
            for run in (_worker, _floor) if (rep + i) % 2 == 0 else (_floor, _worker):
                for name, value in (await run(spec, rep * mode.cold_starts + i)).items():
                    parts.setdefault(name, []).append(value)
        series.add(**{name: statistics.median(values) for name, values in parts.items()})
    return series


async def _worker(spec: ModelSpec, serial: int) -> dict[str, float]:
    request = LaunchRequest(model=spec, worker_id=f"{spec.name}#{serial}", generation=1, lane=LANE)
    start = time.perf_counter()
    launched = await MockTransport().launch(request)
    channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
    try:
        hello = await channel.receive()
        cold_ms = (time.perf_counter() - start) * 1e3
        assert isinstance(hello, Hello) and launched.process.pid is not None
        pid = launched.process.pid
        after_hello = rss_mib(pid)
        shape = Shape(rig.BUCKETS[0], hello.max_batch)
        await channel.exchange(Admit(1, shape), 30.0)
        await channel.exchange(Infer(2, shape, "embed", [[5, 6, 7]]), 30.0)
        served = rss_mib(pid)
        await channel.send(Shutdown())
    finally:
        await channel.aclose()
        await confirm_exit(launched.process, 5.0)
    return {"cold_start_ms": cold_ms, "rss_after_hello_mib": after_hello, "rss_served_mib": served}


async def _floor(spec: ModelSpec, serial: int) -> dict[str, float]:
    start = time.perf_counter()
    process = await anyio.open_process(
        [sys.executable, "-c", FLOOR_PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    async with process:
        assert process.stdout is not None and process.stdin is not None
        await process.stdout.receive(1)
        floor_ms = (time.perf_counter() - start) * 1e3
        rss = rss_mib(process.pid)
        await process.stdin.aclose()
        await process.wait()
    return {"python_floor_ms": floor_ms, "python_floor_rss_mib": rss}
