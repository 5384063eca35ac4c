"""Test support: a local Ray instance on loopback with the deployment running,
and process checks that read /proc (Linux).

Used by this distribution's tests; usable by anyone who tests a catalog
through the deployment on one machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from synapse_core.testing import catalog_toml, model_entry

from .settings import LANE_RESOURCE

#: lanes the local Ray node declares: two replicas, and room for none more
LANES = 2
#: bounds that keep a broken cluster from hanging the run; never timing claims
BOUND_S = 120.0


#: what Ray says when its raylet gave up on its dashboard agent: it waits a
#: fixed 15 s for the agent's ports, which a busy 2-core machine can exceed
#: while the agent imports; the start-up, not Synapse, failed
STARTUP_TIMED_OUT = "The current node timed out during startup"
#: attempts at starting Ray, for that reason only
STARTUP_ATTEMPTS = 3

#: the mock options of :func:`mock_model`'s entries
MOCK_OPTIONS: dict[str, Any] = {"buckets": [8, 16, 32], "dims": 8, "max_batch": 4}
#: catalog settings of the tests: short bounds, so a broken test fails quickly
SETTINGS: dict[str, Any] = {"exit_grace_s": 2.0, "exchange_timeout_s": 10.0}


def mock_model(name: str, trace: Path | None = None, **options: Any) -> dict[str, Any]:
    """A mock catalog entry; with ``trace``, its workers log every frame there."""
    traced = MOCK_OPTIONS if trace is None else {**MOCK_OPTIONS, "trace": str(trace)}
    return model_entry(name, defaults=traced, **options)


def write_catalog(directory: Path, *models: dict[str, Any], **settings: Any) -> Path:
    """A catalog file of ``models`` in ``directory``; ``settings`` override :data:`SETTINGS`."""
    path = directory / "catalog.toml"
    path.write_text(catalog_toml(*models, **{**SETTINGS, **settings}), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has exited: only its parent's reaping is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(") ", 1)[1][:1] != "Z"


def descendants(root: int) -> set[int]:
    """Every live process under ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if alive(pid)}


def end_processes(pids: set[int]) -> None:
    """SIGKILL ``pids`` (processes this test started) and wait for them to go."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: not any(alive(pid) for pid in pids), f"processes {sorted(pids)} to end", 30.0
    )


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = BOUND_S) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


@attrs.define
class ServeApp:
    """A running deployment: its HTTP base URL and a handle for ``describe``."""

    url: str
    handle: Any
    catalog: Path

    @property
    def trace(self) -> list[dict[str, Any]]:
        """Every frame the mock workers received (models built with ``trace``)."""
        path = self.catalog.parent / "trace.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def politely_stopped(self) -> set[int]:
        """Pids of workers that the host asked to shut down."""
        return {r["pid"] for r in self.trace if r["frame"] == "shutdown"}

    def describe(self, model: str | None = None) -> dict[str, Any]:
        """The replica a call for ``model`` is routed to (any replica when
        ``None``): the one holding it, once Ray knows (see :meth:`holder`)."""
        handle = self.handle if model is None else self.handle.options(multiplexed_model_id=model)
        return dict(handle.describe.remote().result(timeout_s=BOUND_S))

    def holder(self, model: str) -> dict[str, Any]:
        """:meth:`describe` of the replica holding ``model``, which a call has
        loaded. Ray's handle learns where a model is from the replica's
        report, a moment after the load; until then a call routed by the
        model may reach another replica, so the question is asked again."""
        found: list[dict[str, Any]] = []

        def holds() -> bool:
            found[:] = [self.describe(model)]
            return model in found[0]["workers"]

        wait_until(holds, f"a replica reporting that it holds {model!r}")
        return found[0]

    def headers(self, model: str) -> dict[str, str]:
        """What a client sends to be routed to a replica holding ``model``."""
        return {"serve_multiplexed_model_id": model}

    def embed(self, model: str, inputs: list[str] | None = None) -> Any:
        """POST ``/v1/embeddings`` for ``model``, routed by the header; the httpx response."""
        import httpx

        return httpx.post(
            f"{self.url}/v1/embeddings",
            json={"model": model, "input": inputs or ["a text"]},
            headers=self.headers(model),
            timeout=BOUND_S,
        )


def start_serve(catalog: Path, args: Mapping[str, str]) -> ServeApp:
    """Start local Ray on loopback, Serve's proxy on 127.0.0.1, and the app."""
    import ray
    from ray import serve

    from .app import app

    # Ray takes the address of the interface that routes outwards as its node
    # address; off macOS and Windows this switch makes every Ray process use
    # 127.0.0.1 instead, so all of its traffic stays on loopback.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # On Linux Ray kills a dead worker's child processes itself; elsewhere it
    # may not. Off, so that a killed replica's workers must end by Synapse's
    # own rule (a worker watches its host process).
    os.environ["RAY_kill_child_processes_on_worker_exit"] = "0"  # noqa: SIM112 (Ray spells it so)
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        before = descendants(os.getpid())
        try:
            ray.init(
                address="local",  # a new instance, never one found running on this machine
                num_cpus=2,
                resources={LANE_RESOURCE: LANES},
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
                _node_ip_address="127.0.0.1",
            )
            break
        except Exception as exc:
            if STARTUP_TIMED_OUT not in str(exc) or attempt == STARTUP_ATTEMPTS:
                raise
            # What the failed start left running goes before the next try.
            end_processes(descendants(os.getpid()) - before)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(app({"catalog": str(catalog), **args}), name="synapse", route_prefix="/")
    return ServeApp(f"http://127.0.0.1:{port}", handle, catalog)


def stop_serve(before: set[int]) -> None:
    """Shut Serve and Ray down; every process Ray started must be gone."""
    import ray
    from ray import serve

    started = descendants(os.getpid()) - before
    try:
        serve.shutdown()  # type: ignore[no-untyped-call]
    finally:
        ray.shutdown()
    wait_until(
        lambda: not any(alive(pid) for pid in started),
        f"Ray's processes {sorted(p for p in started if alive(p))} to exit",
        timeout=60.0,
    )
