"""Big bodies against ``synapse serve``: does ``/health`` stay quick, and
does the server's memory come back? ``python -m benchmarks.stall [--backend
asyncio|trio] [--rounds N] [--only I,J]``; bounded (a few minutes at most), loopback only.

One ``synapse serve`` runs the catalog's ``minilm`` on the CPU lane
(synapse-cpu and the model wheel must be installed), preloaded and warmed
up. ``/health`` is probed one request after another, from a blocking
socket, first alone and then while eight requests of about 2 MB each arrive
at once, four to ``/tokenize`` and four to ``/embed``, two of each of:

- ``/tokenize`` of one 2 MB text, and ``/embed`` of one (both far over the
  ceiling: refused before tokenising);
- ``/tokenize`` of 2,000 texts of 1,000 characters (each fits: a 2,000-text
  answer of about 400,000 tokens), and
  ``/embed`` of 250 texts of 8 KB (over the ceiling once tokenised).

Each round probes ``/health`` alone, then during a burst, then lets the
server settle and reads its RSS. Figures (JSON on stdout): ``/health``'s p50,
p99 and worst latency alone and during the bursts, and the ratio of the two
p99s (noise on a shared machine moves both); each burst's wall time; the
server's RSS once warm, at its peak during the bursts, and after the last,
with the after/warm ratio. Targets: p99 during the burst under 50 ms; RSS
after within 10% of warm.

As the harness group ``stall`` (``python -m benchmarks --only stall``), one
repetition is one round: ``stall_health_p99_ms`` is the round's p99 during
its burst (its p99 alone is a reported part), ``stall_rss_ratio_after`` the
RSS after it over warm. The smoke run sends each body once, cut to a
twentieth. Skipped (no figures) where synapse-cpu, the model wheel,
synapse-http or httpx is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from . import cpu
from .harness import Figure, Mode, Series, Target, skipped

if TYPE_CHECKING:
    import httpx

#: seconds the whole run may take before it is stopped
BOUND_S = 300.0
MIB = 1024 * 1024
PROBES_ALONE = 400


@attrs.frozen
class Plan:
    rounds: int
    #: ``/health`` probes alone in each round
    probes: int
    #: how many times each of the four bodies is sent in a burst
    copies: int = 2
    #: bodies are cut to 1/scale of their size (the smoke run's are tiny)
    scale: int = 1
    #: the bodies sent, by index into :func:`bodies`' four, each once
    #: (``--only``, to look at one kind alone); empty: all, ``copies`` times
    only: tuple[int, ...] = ()


#: the harness group's plan by mode
PLANS = {
    "smoke": Plan(2, 50, copies=1, scale=20),
    "quick": Plan(3, PROBES_ALONE),
    "full": Plan(5, PROBES_ALONE),
}
CATALOG = """
[[models]]
name = "minilm"
task = "embed"
transport = "cpu"
package = "all-MiniLM-L6-v2"
ceiling = 256
"""


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match[1]) / 1024 if match else float("nan")


def settled_rss(pid: int) -> float:
    """RSS once it stops falling (two readings 0.2 s apart within 0.5 MiB,
    for at most 5 s): the server gives memory back in a thread after the
    last answer is written, which a quick reading would race."""
    last = rss_mib(pid)
    for _ in range(25):
        time.sleep(0.2)
        now = rss_mib(pid)
        if abs(now - last) < 0.5:
            return now
        last = now
    return last


def start(folder: Path, backend: str) -> tuple[subprocess.Popen[str], str]:
    catalog = folder / "catalog.toml"
    catalog.write_text(CATALOG, encoding="utf-8")
    env = dict(os.environ, SYNAPSE_PLUGINS="cpu,http", PYTHONUNBUFFERED="1")
    env.pop("SYNAPSE_API_KEY", None)
    command = [sys.executable, "-m", "synapse_core.cli", "serve", "--catalog", str(catalog)]
    command += ["--port", "0", "--backend", backend, "--preload", "minilm"]
    command += ["--max-inputs", "2048", "--drain-grace", "0", "--request-timeout", "120"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    # A server that starts and then prints nothing would block the read: the
    # timer ends it, and the read with it.
    timer = threading.Timer(120, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:
            found = re.search(r"serving on (http://\S+)", line)
            if found:
                threading.Thread(
                    target=lambda: proc.stderr and proc.stderr.read(), daemon=True
                ).start()
                return proc, found[1]
    finally:
        timer.cancel()
    proc.kill()
    raise RuntimeError("synapse serve did not start within 120 s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def client(url: str, timeout: float) -> httpx.Client:
    # imported here: the harness lists this group where httpx is not installed
    import httpx

    return httpx.Client(base_url=url, timeout=timeout)


def probe(url: str, until: threading.Event | None, count: int = 0) -> list[float]:
    """``/health`` latencies (ms), one request after another: at least
    ``count`` of them, and on until ``until`` is set."""
    out: list[float] = []
    with client(url, 60) as http:
        while len(out) < count or (until is not None and not until.is_set()):
            began = time.perf_counter()
            http.get("/health")
            out.append((time.perf_counter() - began) * 1000)
    return out


def bodies(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    scale = plan.scale
    size = 2_000_000 // scale
    two_mb = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    kilo = ("the quick brown fox jumps over the lazy dog " * 23)[:1000]
    eight_k = ("lorem ipsum dolor sit amet " * 304)[:8192]
    jobs: list[tuple[str, dict[str, Any]]] = [
        ("/tokenize", {"inputs": two_mb}),
        ("/embed", {"inputs": two_mb}),
        ("/tokenize", {"inputs": [kilo] * (2000 // scale)}),
        ("/embed", {"inputs": [eight_k] * (250 // scale)}),
    ]
    return [jobs[i] for i in plan.only] if plan.only else jobs * plan.copies


def burst(url: str, pid: int, plan: Plan) -> dict[str, Any]:
    done = threading.Event()
    statuses: list[int] = []
    peak = [rss_mib(pid)]

    def send(path: str, body: dict[str, Any]) -> None:
        with client(url, 120) as http:
            statuses.append(http.post(path, json=body).status_code)

    def watch_rss() -> None:
        while not done.is_set():
            peak.append(rss_mib(pid))
            done.wait(0.02)

    senders = [threading.Thread(target=send, args=job) for job in bodies(plan)]
    watcher = threading.Thread(target=watch_rss)
    latencies: list[float] = []
    prober = threading.Thread(target=lambda: latencies.extend(probe(url, done, 1)))
    watcher.start()
    prober.start()
    began = time.monotonic()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(BOUND_S)
    took = time.monotonic() - began
    done.set()
    prober.join()
    watcher.join()
    # A burst whose requests failed at once would stall nothing: every one
    # must have been answered, and none with a server error.
    if len(statuses) != len(senders) or any(status >= 500 for status in statuses):
        raise RuntimeError(f"{len(senders)} requests sent, answered {sorted(statuses)}")
    return {
        "latencies": latencies,
        "statuses": sorted(statuses),
        "rss_peak": max(peak),
        "seconds": took,
    }


def run(backend: str, plan: Plan) -> dict[str, Any]:
    """Serve, warm up, then ``plan.rounds`` rounds of: ``/health`` alone, a
    burst, the RSS once settled. The rounds' records, and the warm RSS."""
    with tempfile.TemporaryDirectory() as folder:
        proc, url = start(Path(folder), backend)
        try:
            with client(url, 60) as http:
                assert http.post("/embed", json={"inputs": ["warm up"] * 32}).status_code == 200
                http.post("/tokenize", json={"inputs": ["warm up"] * 32})
                # One request large enough for the worker threads: they, and
                # their stacks and arenas, belong to the server's start.
                http.post("/tokenize", json={"inputs": ["warm up " * 100] * 40})
            probe(url, None, 50)  # warm the probe's path too
            warm = rss_mib(proc.pid)
            rounds = []
            for _ in range(plan.rounds):
                alone = probe(url, None, plan.probes)
                record = burst(url, proc.pid, plan)
                # Answers are written and dropped; the allocator gets a moment to give back.
                probe(url, None, 50)
                rounds.append(record | {"alone": alone, "rss_after": settled_rss(proc.pid)})
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return {"warm": warm, "rounds": rounds}


def missing() -> str:
    """Why the group cannot run here ("" when it can)."""
    for module, what in (("synapse_http", "synapse-http"), ("httpx", "httpx")):
        if importlib.util.find_spec(module) is None:
            return f"{what} is not installed"
    return cpu.available()


def measure(mode: Mode) -> list[Figure]:
    """The harness group: one repetition per round."""
    if skipped("stall group", missing()):
        return []
    plan = PLANS[mode.name]
    done = run("asyncio", plan)
    series = Series()
    for r in done["rounds"]:
        series.add(
            health_p99_ms=percentile(r["latencies"], 0.99),
            health_alone_p99_ms=percentile(r["alone"], 0.99),
            health_p50_ms=statistics.median(r["latencies"]),
            burst_s=r["seconds"],
            rss_peak_mib=r["rss_peak"],
            rss_after_mib=r["rss_after"],
            rss_ratio=r["rss_after"] / done["warm"],
        )
    requests = len(done["rounds"][0]["statuses"])
    size = f"{2 / plan.scale:g} MB"
    return [
        Figure(
            "stall_health_p99_ms",
            "ms",
            f"p99 of GET /health on synapse serve (minilm on the CPU lane) while {requests} "
            f"requests of about {size} arrive at once, half to /tokenize, half to /embed",
            series["health_p99_ms"],
            Target("<=", 50),
            series.medians("health_alone_p99_ms", "health_p50_ms", "burst_s"),
        ),
        Figure(
            "stall_rss_ratio_after",
            "ratio",
            "synapse serve's RSS once settled after such a burst / its RSS once warm",
            series["rss_ratio"],
            Target("<=", 1.1),
            {"warm_mib": done["warm"], **series.medians("rss_peak_mib", "rss_after_mib")},
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        type=lambda text: tuple(int(i) for i in text.split(",")),
        default=(),
        help="send only these of the four bodies (indices 0-3, comma-separated), each once",
    )
    args = parser.parse_args()
    signal.alarm(int(BOUND_S))  # the whole run is bounded
    done = run(args.backend, Plan(args.rounds, PROBES_ALONE, only=args.only))
    rounds, warm = done["rounds"], done["warm"]
    alone = [ms for r in rounds for ms in r["alone"]]
    during = [ms for r in rounds for ms in r["latencies"]]
    after = rounds[-1]["rss_after"]
    figures = {
        "backend": args.backend,
        "load": os.getloadavg(),
        "statuses": [r["statuses"] for r in rounds],
        # the burst's wall time: its work yields to the event loop, so it takes longer when busy
        "burst_s": [round(r["seconds"], 2) for r in rounds],
        "health_alone_ms": {
            "p50": statistics.median(alone),
            "p99": percentile(alone, 0.99),
            "max": max(alone),
        },
        "health_during_ms": {
            "p50": statistics.median(during),
            "p99": percentile(during, 0.99),
            "max": max(during),
            "probes": len(during),
        },
        "health_p99_ratio_during_vs_alone": percentile(during, 0.99) / percentile(alone, 0.99),
        "rss_mib": {"warm": warm, "peak": max(r["rss_peak"] for r in rounds), "after": after},
        "rss_ratio_after_vs_warm": after / warm,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
