"""``GET /metrics``: Prometheus text, with the official client.

Request counts and latencies are counted as requests finish; the host's
state (waiting calls, lanes, workers) is read from a snapshot at each
scrape, so serving pays nothing for it. Each app has its own registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from synapse_core import Host

#: the host being served now, or None while none is (starting, stopped)
OpenHost = Callable[[], "Host | None"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: latency buckets (seconds): sub-millisecond warm calls up to the default timeout
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """An app's counters, and the host's state read at each scrape from ``host()``."""

    def __init__(self, host: OpenHost) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "synapse_http_requests",
            "HTTP requests answered, by route and status (499: the client went away).",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "synapse_http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route.",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            "synapse_refusals",
            "Calls refused before any inference, by refusal code.",
            ["code"],
            registry=self.registry,
        )
        self.faults = Counter(
            "synapse_worker_faults",
            "Calls that ended in a worker fault, by error type "
            "(outcome-unknown: the request may have run).",
            ["error_type"],
            registry=self.registry,
        )
        self.registry.register(_HostCollector(host))
        # labelled children, looked up once: labels() takes a lock and
        # checks its arguments on every call
        self._counted: dict[tuple[str, int], Counter] = {}
        self._timed: dict[str, Histogram] = {}
        #: requests whose answer was handed to the server in full
        self.answered = 0
        #: requests inside the app now
        self.inside = 0

    def observe(self, route: str, status: int, seconds: float) -> None:
        counter = self._counted.get((route, status))
        if counter is None:
            counter = self._counted[route, status] = self.requests.labels(route, str(status))
        counter.inc()
        histogram = self._timed.get(route)
        if histogram is None:
            histogram = self._timed[route] = self.latency.labels(route)
        histogram.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _HostCollector(Collector):
    def __init__(self, host: OpenHost) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        host = self.host()
        waiting = GaugeMetricFamily(
            "synapse_calls_waiting",
            "Calls waiting for an execution permit, for lane room, or queued to be "
            "coalesced (what max_waiting bounds).",
        )
        waiting.add_metric([], host.backlog.waiting if host else 0)
        yield waiting
        capacity = GaugeMetricFamily(
            "synapse_lane_capacity_units",
            "A lane's capacity in reservation units.",
            labels=["lane"],
        )
        reserved = GaugeMetricFamily(
            "synapse_lane_reserved_units", "Units reserved on a lane.", labels=["lane"]
        )
        labels = ["model", "worker"]
        generation = GaugeMetricFamily(
            "synapse_worker_generation", "A worker's generation.", labels=labels
        )
        restarts = CounterMetricFamily(
            "synapse_worker_restarts", "Restarts of a worker after faults.", labels=labels
        )
        leases = GaugeMetricFamily("synapse_worker_leases", "Leases held.", labels=labels)
        inflight = GaugeMetricFamily(
            "synapse_worker_inflight", "Calls in flight on a worker.", labels=labels
        )
        pid = GaugeMetricFamily(
            "synapse_worker_pid", "A live worker's process id (0 when none).", labels=labels
        )
        snapshot = host.snapshot() if host else None
        for lane in snapshot.lanes.values() if snapshot else ():
            capacity.add_metric([lane.lane_id], lane.capacity)
            reserved.add_metric([lane.lane_id], lane.reserved)
            for worker in lane.workers:
                key = [worker.model, worker.worker_id]
                generation.add_metric(key, worker.generation)
                restarts.add_metric(key, worker.restarts)
                leases.add_metric(key, worker.leases)
                inflight.add_metric(key, worker.inflight)
                pid.add_metric(key, worker.pid or 0)
        resident = GaugeMetricFamily(
            "synapse_model_resident",
            "1 while a model has a worker process (or one starting), 0 while it has none "
            "(never called, retired, or let go when idle: idle_unload_s).",
            labels=["model"],
        )
        for name, entry in host.catalog.entries.items() if host else ():
            if entry.available:
                resident.add_metric([name], 1 if host.resident(name) else 0)  # type: ignore[union-attr]
        yield from (capacity, reserved, generation, restarts, leases, inflight, pid, resident)
