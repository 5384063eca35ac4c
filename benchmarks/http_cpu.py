"""``synapse serve`` on the CPU lane against a typical hand-written server.

Both serve MiniLM (synapse-cpu's numpy forward pass, one BLAS thread per
call) behind Starlette and uvicorn in their own process: ``synapse serve``'s
app with one synapse-cpu worker (:mod:`benchmarks.http_server` ``--cpu``),
and :mod:`benchmarks.http_handwritten`, which calls the same runtime in
Starlette's thread pool. The same load generator drives both at
:data:`~benchmarks.http_serving.CONNECTIONS` connections, rounds alternating.
Skipped (no figures) where synapse-cpu or the model wheel is not installed.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import anyio

from synapse_core.testing import catalog_toml

from . import cpu
from .harness import Figure, Mode, Series, Target
from .http_serving import CONNECTIONS, Connection, post, running, throughput

MODEL = "minilm"
EMBED = post("/embed", b'{"inputs": "' + cpu.SHORT.encode() + b'"}')
#: requests per connection per round, and rounds per side, by mode
PLANS = {"smoke": (1, 2), "quick": (2, 3), "full": (8, 5)}


def measure(mode: Mode) -> list[Figure]:
    missing = cpu.available()
    if missing:
        print(f"(http CPU-lane figure skipped: {missing})", end=" ", file=sys.stderr, flush=True)
        return []
    per_connection, rounds = PLANS[mode.name]
    with tempfile.TemporaryDirectory() as folder:
        catalog = Path(folder) / "catalog.toml"
        text = catalog_toml(cpu.entry(MODEL), exchange_timeout_s=120.0)
        catalog.write_text(text, encoding="utf-8")
        with (
            running("benchmarks.http_server", str(catalog), "--cpu") as synapse,
            running("benchmarks.http_handwritten") as handwritten,
        ):
            series: Series = anyio.run(_measure, synapse, handwritten, per_connection, rounds)
    return [
        Figure(
            "http_cpu_throughput_ratio_vs_handwritten",
            "ratio",
            f"requests/s of POST /embed (MiniLM, one short text) at {CONNECTIONS} connections, "
            "synapse serve with one synapse-cpu worker / a hand-written Starlette server "
            "running the same numpy forward pass in its thread pool",
            series.ratio("synapse_requests_per_s", "handwritten_requests_per_s"),
            Target(">=", 1.0),
            series.medians(
                "synapse_requests_per_s",
                "handwritten_requests_per_s",
                "synapse_p50_ms",
                "synapse_p99_ms",
                "handwritten_p50_ms",
                "handwritten_p99_ms",
            ),
        )
    ]


async def _measure(synapse: int, handwritten: int, per_connection: int, rounds: int) -> Series:
    series = Series()
    ports = {"synapse": synapse, "handwritten": handwritten}
    for port in ports.values():  # the first call loads the model
        first = await Connection.open(port)
        await first.request(EMBED)
        await first.aclose()
    for rep in range(rounds):
        values: dict[str, float] = {}
        for name in ("synapse", "handwritten") if rep % 2 == 0 else ("handwritten", "synapse"):
            rate, _, latencies = await throughput(ports[name], EMBED, per_connection)
            latencies.sort()
            values[f"{name}_requests_per_s"] = rate
            values[f"{name}_p50_ms"] = statistics.median(latencies) / 1e6
            values[f"{name}_p99_ms"] = latencies[int(len(latencies) * 0.99)] / 1e6
        series.add(**values)
    return series
