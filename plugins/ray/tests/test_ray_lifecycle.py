"""Replica lifecycle on a local Ray instance: a killed replica loses only its
in-flight requests and its workers (even a worker stuck in a call exits with
its host), Ray replaces it, and ``serve.shutdown()`` retires every worker (the
host asks each to stop, then sees it exit).

The tests run in file order: the last one shuts Serve down.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve

from synapse_ane_direct import lanelock
from synapse_core import LaneLocked
from synapse_core.testing import model_entry
from synapse_ray.deployment import REPLICA_HEADER
from synapse_ray.testing import ServeApp, alive, mock_model, wait_until

pytestmark = pytest.mark.ray

ARGS = {"num_replicas": "2"}
IN_FLIGHT = 3
#: how long the stuck call waits for its replica to be killed
KILL_BOUND_S = 60.0


#: a direct-ANE model on the simulated device: its host takes lane ane:0's lock
LANE_MODEL = model_entry(
    "ane",
    transport="ane-direct",
    package="ane-test",
    buckets=[16, 32],
    dims=16,
    max_batch=2,
    device="simulated",
)


def catalog(trace: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # A stuck worker never reads its channel again: only the parent-death rule
    # (the worker watches its host process) can end it once its host is gone.
    stuck = mock_model("stuck", trace=trace, faults={"hang_on_infer": 2})
    models = [stuck, mock_model("quick", trace=trace), mock_model("other", trace=trace)]
    # The stuck call must still be in flight when its replica is killed: a
    # kill that Ray carries out late (it took over 10 s in some full runs of
    # the Ray session) must not meet the host answering it as timed out first.
    return [*models, LANE_MODEL], {"exchange_timeout_s": KILL_BOUND_S}


def environment(directory: Path) -> dict[str, str]:
    """The simulated Neural Engine, with lane locks under this test's own directory."""
    runtime = directory / "runtime"
    runtime.mkdir(mode=0o700)
    return {"SYNAPSE_ANE_DEVICE": "simulated", "XDG_RUNTIME_DIR": str(runtime)}


def lane_held() -> bool:
    """Whether some process holds lane ane:0's lock (taking it briefly if free)."""
    try:
        lanelock.acquire("ane:0", lanelock.default_runtime_dir()).close()
    except LaneLocked:
        return True
    return False


def running_replicas() -> dict[str, int]:
    status = serve.status().applications["synapse"].deployments["SynapseHosts"]
    return {str(state): count for state, count in status.replica_states.items()}


def test_killed_replica_fails_only_in_flight_requests_and_is_replaced(
    serve_app: ServeApp,
) -> None:
    assert serve_app.embed("stuck").status_code == 200
    victim = serve_app.holder("stuck")
    worker = victim["workers"]["stuck"]
    try:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            pending = [pool.submit(serve_app.embed, "stuck") for _ in range(IN_FLIGHT)]
            wait_until(
                lambda: serve_app.describe("stuck")["inflight"].get("stuck", 0) > 0,
                "a call in flight on the victim",
            )
            began = time.monotonic()
            ray.kill(ray.get_actor(victim["actor"], namespace="serve"), no_restart=True)
            answers = [p.result() for p in pending]
            took = time.monotonic() - began
        # Nobody is left serving on the dead replica's behalf.
        wait_until(lambda: not alive(victim["pid"]), "the killed replica's process to exit")
        wait_until(lambda: not alive(worker), f"the killed replica's worker {worker} to exit")
    finally:
        if alive(worker):  # the rule is broken: leave no stuck process behind
            os.kill(worker, signal.SIGKILL)
    # The calls the victim held fail, answered by Ray's proxy (a dead replica
    # cannot answer for itself: Ray says 500, in plain text, with no replica
    # header). Ray may have sent some to the other replica instead (its
    # router falls back from the replica holding a multiplexed model when
    # that one is slow to take more): that replica loads its own "stuck",
    # whose second call hangs too, so each of those is answered by that
    # replica: served, or ended by its timeout or deadline, never by the victim.
    seen = [(a.status_code, a.headers.get(REPLICA_HEADER)) for a in answers]
    assert took < KILL_BOUND_S, (took, victim["replica"], seen)
    held = [a for a in answers if REPLICA_HEADER not in a.headers]
    assert held, (victim["replica"], seen)
    assert {(a.status_code, a.text) for a in held} == {(500, "Internal Server Error")}
    for answer in answers:
        if answer in held:
            continue
        assert answer.headers[REPLICA_HEADER] != victim["replica"], (took, answer.text)
        assert answer.status_code == 200 or answer.json()["error"]["type"] in {
            "outcome-unknown",
            "deadline-exceeded",
        }, answer.text
    assert worker not in serve_app.politely_stopped()  # it died with its host, unasked
    # Service goes on, and Ray brings the deployment back to two replicas. A
    # model that does not hang: "stuck" may be held by the other replica
    # already (a pending call sent there), whose next call of it hangs.
    again = serve_app.embed("quick")
    assert again.status_code == 200, again.text
    assert again.headers[REPLICA_HEADER] != victim["replica"]
    wait_until(lambda: running_replicas() == {"RUNNING": 2}, "a replacement replica")


def test_serve_shutdown_retires_every_worker_and_frees_the_lane(serve_app: ServeApp) -> None:
    workers: dict[str, int] = {}
    for model in ("quick", "other", "ane"):
        assert serve_app.embed(model).status_code == 200
        workers[model] = serve_app.holder(model)["workers"][model]
    assert lane_held()  # by the host that serves "ane"
    serve.shutdown()
    # Shutdown returned: every worker has exited, each mock worker after the
    # host asked it to stop (the ANE stand-in keeps no trace), and the lane
    # lock is free again.
    assert not {pid for pid in workers.values() if alive(pid)}
    assert {workers["quick"], workers["other"]} <= serve_app.politely_stopped()
    assert not lane_held()
