"""``synapse serve`` as a process, on both backends: connections that send
nothing or a request head a byte at a time are closed, unsafe settings are
refused or warned about, ``/health`` answers 503 while the server drains,
and a worker's fault, exit and restart each reach the server's log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from synapse_core.testing import catalog_toml
from synapse_http.cli import loopback
from synapse_http.testing import API_KEY, Server, metric, model

#: seconds any one wait here may take before the test fails instead of hanging
BOUND_S = 30.0
TIMEOUTS = ("--header-timeout", "0.5", "--keep-alive-timeout", "0.5")


def connect(server: Server) -> socket.socket:
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=BOUND_S)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closes ``sock`` (the read ends or is reset)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_connections_that_send_no_complete_request_head_are_closed(
    serve: Callable[..., Server], anyio_backend: str
) -> None:
    server = serve(anyio_backend, [model("e")], *TIMEOUTS)
    with connect(server) as silent, connect(server) as slow, connect(server) as idle:
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: synapse\r\n")  # and never the end
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: synapse\r\n\r\n")
        assert idle.recv(65536).startswith(b"HTTP/1.1 200")  # answered, then kept idle
        for sock in (silent, slow, idle):
            assert closed_by_server(sock)
    # A client that sends its request in time is served as ever.
    with server.client() as http:
        assert http.post("/embed", json={"inputs": "fine"}).status_code == 200


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(model("e")), encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "SYNAPSE_API_KEY"}
    environ.update(SYNAPSE_PLUGINS="mock,http", **env)
    command = [sys.executable, "-m", "synapse_core.cli", "serve", "--catalog", str(catalog)]
    return subprocess.run(
        [*command, *args], env=environ, capture_output=True, text=True, timeout=BOUND_S
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [(("--api-key", ""), {}), ((), {"SYNAPSE_API_KEY": ""}), (("--api-key", "  "), {})],
    ids=["option", "environment", "blank"],
)
def test_an_empty_api_key_is_a_usage_error(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    done = run_cli(tmp_path, "--port", "0", *args, **env)
    assert done.returncode == 2, done.stderr
    assert "the key is empty, which would turn authentication off" in done.stderr
    assert "serving on" not in done.stderr


def test_binding_beyond_loopback_without_a_key_warns(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails, and
    # nothing listens or is sent anywhere.
    done = run_cli(tmp_path, "--host", "192.0.2.1", "--port", "0")
    assert done.returncode == 1
    assert "warning: serving on 192.0.2.1 without an API key" in done.stderr
    assert "/metrics included" in done.stderr
    assert "cannot bind 192.0.2.1:0" in done.stderr and "Traceback" not in done.stderr
    keyed = run_cli(tmp_path, "--host", "192.0.2.1", "--port", "0", "--api-key", API_KEY)
    assert "warning" not in keyed.stderr


def test_loopback_addresses() -> None:
    assert all(map(loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(loopback, ["0.0.0.0", "::", "192.0.2.1", "example.org"]))


def test_health_answers_503_while_draining_and_requests_are_still_served(
    serve: Callable[..., Server], anyio_backend: str
) -> None:
    server = serve(anyio_backend, [model("e")], "--drain-grace", "120", "--api-key", API_KEY)
    with server.client() as http:
        assert http.get("/health").status_code == 200
        server.signal(signal.SIGTERM)
        deadline = time.monotonic() + BOUND_S
        health = http.get("/health")
        while health.status_code == 200 and time.monotonic() < deadline:
            health = http.get("/health")  # the signal is handled a moment later
        assert health.status_code == 503
        assert health.json()["error_type"] == "unhealthy"
        # The listener is still open: a new connection is answered, and served.
        with server.client() as fresh:
            assert fresh.get("/health").status_code == 503
            assert fresh.post("/embed", json={"inputs": "still"}).status_code == 200
    assert server.proc.poll() is None  # draining, for its grace
    server.signal(signal.SIGTERM)  # a second signal stops at once
    assert server.wait(BOUND_S) == 0, "".join(server.lines)
    assert any("/health answers 503 for 120 s" in line for line in server.lines)


def test_a_short_drain_ends_by_itself(serve: Callable[..., Server], anyio_backend: str) -> None:
    server = serve(anyio_backend, [model("e")], "--drain-grace", "0.2")
    server.signal(signal.SIGTERM)
    assert server.wait(BOUND_S) == 0, "".join(server.lines)
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", timeout=BOUND_S)


def test_a_killed_worker_logs_its_fault_exit_and_restart(
    serve: Callable[..., Server], anyio_backend: str
) -> None:
    server = serve(anyio_backend, [model("e")], "--preload", "e", "--api-key", API_KEY)
    (pid,) = metric(server.metrics(), "synapse_worker_pid", model="e")
    os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + BOUND_S
    while not any("worker restart" in line for line in server.lines):
        assert time.monotonic() < deadline, "".join(server.lines)
        time.sleep(0.05)  # the server's log is read by another thread
    lines = [line for line in server.lines if line.startswith("synapse: worker ")]
    fault, exit_, restart = lines[:3]
    assert fault.startswith("synapse: worker fault: model='e' worker='e#1' generation=1 cause=")
    assert "exited on its own with status -9" in fault
    assert exit_.startswith("synapse: worker exit: model='e' worker='e#1' generation=1 cause=")
    assert restart.startswith("synapse: worker restart: model='e' worker='e#1' generation=2")
    with server.client() as http:
        assert http.post("/embed", json={"inputs": "after"}).status_code == 200
