"""Big bodies against ``synapse serve``: does ``/health`` stay quick, and
does the server's memory come back? ``python -m benchmarks.stall [--backend
asyncio|trio] [--rounds N]``; bounded (a few minutes at most), loopback only.

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

Figures (JSON on stdout): ``/health``'s p50, p99 and worst latency alone and
during the burst, and the ratio of the two p99s (noise on a shared machine
moves both); each burst's wall time; the server's RSS once warm, at its peak during the burst, and
after it, with the after/warm ratio. Targets: p99 during the burst under
50 ms; RSS after within 10% of warm.
"""

from __future__ import annotations

import argparse
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
from typing import Any

import httpx

#: seconds the whole run may take before it is stopped
BOUND_S = 300.0
MIB = 1024 * 1024
PROBES_ALONE = 400
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
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        found = re.search(r"serving on (http://\S+)", line)
        if found:
            threading.Thread(target=lambda: proc.stderr and proc.stderr.read(), daemon=True).start()
            return proc, found[1]
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("synapse serve did not start")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def probe(url: str, until: threading.Event | None, count: int = 0) -> list[float]:
    """``/health`` latencies (ms), one request after another: ``count`` of
    them, or until ``until`` is set."""
    out: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as http:
        while (until is None and len(out) < count) or (until is not None and not until.is_set()):
            began = time.perf_counter()
            http.get("/health")
            out.append((time.perf_counter() - began) * 1000)
    return out


def bodies() -> list[tuple[str, dict[str, Any]]]:
    two_mb = ("lorem ipsum dolor sit amet " * (2_000_000 // 27 + 1))[:2_000_000]
    kilo = ("the quick brown fox jumps over the lazy dog " * 23)[:1000]
    eight_k = ("lorem ipsum dolor sit amet " * 304)[:8192]
    jobs: list[tuple[str, dict[str, Any]]] = [
        ("/tokenize", {"inputs": two_mb}),
        ("/embed", {"inputs": two_mb}),
        ("/tokenize", {"inputs": [kilo] * 2000}),
        ("/embed", {"inputs": [eight_k] * 250}),
    ]
    only = os.environ.get("STALL_ONLY")
    return [jobs[int(i)] for i in only.split(",")] if only else jobs * 2


def burst(url: str, pid: int) -> dict[str, Any]:
    done = threading.Event()
    statuses: list[int] = []
    peak = [rss_mib(pid)]

    def send(path: str, body: dict[str, Any]) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            statuses.append(http.post(path, json=body).status_code)

    def watch_rss() -> None:
        while not done.is_set():
            peak.append(rss_mib(pid))
            done.wait(0.02)

    senders = [threading.Thread(target=send, args=job) for job in bodies()]
    watcher = threading.Thread(target=watch_rss)
    latencies: list[float] = []
    prober = threading.Thread(target=lambda: latencies.extend(probe(url, done)))
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
    return {
        "latencies": latencies,
        "statuses": sorted(statuses),
        "rss_peak": max(peak),
        "seconds": took,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signal.alarm(int(BOUND_S))  # the whole run is bounded
    with tempfile.TemporaryDirectory() as folder:
        proc, url = start(Path(folder), args.backend)
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                assert http.post("/embed", json={"inputs": ["warm up"] * 32}).status_code == 200
                http.post("/tokenize", json={"inputs": ["warm up"] * 32})
                # One request large enough for the worker threads: they, and
                # their stacks and arenas, belong to the server's start.
                http.post("/tokenize", json={"inputs": ["warm up " * 100] * 40})
            probe(url, None, 50)  # warm the probe's path too
            warm = rss_mib(proc.pid)
            alone = probe(url, None, PROBES_ALONE)
            rounds = [burst(url, proc.pid) for _ in range(args.rounds)]
            # Answers are written and dropped; the allocator gets a moment to give back.
            probe(url, None, 50)
            after = settled_rss(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    during = [ms for r in rounds for ms in r["latencies"]]
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
