"""``synapse serve`` on the CPU lane against a typical hand-written server.

Both serve MiniLM (synapse-cpu's numpy forward pass, one BLAS thread per
call) behind Starlette and uvicorn in their own process: ``synapse serve``'s
app with one synapse-cpu worker (:mod:`benchmarks.http_server` ``--cpu``),
and :mod:`benchmarks.http_handwritten`, which calls the same runtime in
Starlette's thread pool. The same load generator drives both at
:data:`~benchmarks.http_serving.CONNECTIONS` connections, rounds alternating.
Both sides of that figure run numpy on one thread (``runtime = "numpy"``,
``threads = 1``), as they did before onnxruntime was the default.

``http_cpu_bulk_ratio_vs_host`` serves the shipped ``minilm`` entry as it is
(no options: onnxruntime, every core; two workers): :data:`BULK_TEXTS` mixed-length texts as
requests of 64 texts from 4 clients through ``synapse serve``, against the
same texts in one ``host.embed`` of the same entry in this process, rounds
alternating. Skipped (no figures) where synapse-cpu or the model wheel is
not installed.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from synapse_core.deadline import Deadline
from synapse_core.opening import open_host
from synapse_core.testing import catalog_toml, host_config

from . import cpu
from .harness import Figure, Mode, Series, Target, skipped
from .http_serving import CONNECTIONS, Connection, post, running, throughput

MODEL = "minilm"
BULK = "minilm-default"
BULK_TEXTS, BULK_REQUEST, BULK_CLIENTS = 2000, 64, 4
EMBED = post("/embed", b'{"inputs": "' + cpu.SHORT.encode() + b'"}')
#: requests per connection per round, and rounds per side, by mode
PLANS = {"smoke": (1, 2), "quick": (2, 3), "full": (8, 5)}
#: texts of the bulk figure, by mode
BULK_PLANS = {"smoke": 128, "quick": BULK_TEXTS, "full": BULK_TEXTS}


def measure(mode: Mode) -> list[Figure]:
    if skipped("http CPU-lane figure", cpu.available()):
        return []
    per_connection, rounds = PLANS[mode.name]
    with tempfile.TemporaryDirectory() as folder:
        catalog = Path(folder) / "catalog.toml"
        models = [cpu.entry(MODEL, runtime="numpy", threads=1), cpu.shipped(BULK)]
        text = catalog_toml(*models, exchange_timeout_s=120.0)
        catalog.write_text(text, encoding="utf-8")
        with (
            running("benchmarks.http_server", str(catalog), "--cpu") as synapse,
            running("benchmarks.http_handwritten") as handwritten,
        ):
            series: Series = anyio.run(_measure, synapse, handwritten, per_connection, rounds)
            texts = cpu.mixed_texts(BULK_PLANS[mode.name], seed=2000)
            bulk: Series = anyio.run(_bulk, synapse, texts, rounds)
    return [
        Figure(
            "http_cpu_bulk_ratio_vs_host",
            "ratio",
            f"texts/s of {len(texts)} mixed-length texts as POST /embed requests of "
            f"{BULK_REQUEST} from {BULK_CLIENTS} clients through synapse serve (the shipped "
            "minilm entry, no options) / one host.embed of the same texts in process",
            bulk.ratio("host_bulk_s", "http_bulk_s"),
            Target(">=", 0.9),
            bulk.medians("http_bulk_s", "host_bulk_s"),
        ),
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
        ),
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


async def _bulk(port: int, texts: list[str], rounds: int) -> Series:
    """The bulk texts through synapse serve and through a host of the same entry."""
    series = Series()
    requests = [
        post(f"/embed?model={BULK}", json.dumps({"inputs": texts[i : i + BULK_REQUEST]}).encode())
        for i in range(0, len(texts), BULK_REQUEST)
    ]
    config = host_config(cpu.shipped(BULK), exchange_timeout_s=120.0)
    async with open_host(config, plugins=cpu.plugins()) as host:

        async def in_process() -> None:
            await host.embed(BULK, texts, deadline=Deadline.after(cpu.DEADLINE_S))

        async def over_http() -> None:
            connections = [await Connection.open(port) for _ in range(BULK_CLIENTS)]

            async def client(index: int, connection: Connection) -> None:
                for raw in requests[index::BULK_CLIENTS]:
                    await connection.request(raw)

            async with anyio.create_task_group() as tg:
                for index, connection in enumerate(connections):
                    tg.start_soon(client, index, connection)
            for connection in connections:
                await connection.aclose()

        await in_process()  # warm: load, every bucket
        await over_http()
        for rep in range(rounds):
            values: dict[str, float] = {}
            sides = (("http", over_http), ("host", in_process))
            for name, side in sides if rep % 2 == 0 else sides[::-1]:
                start = time.perf_counter()
                await side()
                values[f"{name}_bulk_s"] = time.perf_counter() - start
            series.add(**values)
    return series
