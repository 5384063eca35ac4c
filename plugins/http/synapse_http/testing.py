"""Test support for synapse-http: real ``synapse serve`` processes on ephemeral
127.0.0.1 ports, and reading their metrics. Needs the test extra (httpx).

Each server runs the installed mock transport and HTTP plugins only
(``SYNAPSE_PLUGINS=mock,http``; ``plugins=`` names others), with a catalog
written for the test.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from synapse_core.testing import catalog_toml, model_entry, pid_exists

API_KEY = "test-key-1234"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
#: seconds a server may take to start, or to stop after SIGTERM (a hang becomes a failure)
START_S = 30.0
STOP_S = 60.0
# Either log format: ``synapse: serving on URL`` or a JSON line whose message says it.
_URL = re.compile(r"serving on (http://[^\s\"]+)")
_MODELS = re.compile(r'^synapse: models: |"message": "models: ')


#: a mock-transport catalog entry; ``options`` override two buckets, eight
#: dims and batches of four
model = functools.partial(
    model_entry, ceiling=16, defaults={"buckets": [8, 16], "dims": 8, "max_batch": 4}
)


class Server:
    """One ``synapse serve`` process; ``url`` once it listens."""

    def __init__(
        self,
        proc: subprocess.Popen[str],
        url: str,
        lines: list[str],
        reader: threading.Thread | None = None,
    ) -> None:
        self.proc = proc
        self.url = url
        self.lines = lines  # stderr, as read so far (a reader thread keeps reading)
        self.reader = reader

    def output(self, timeout: float = STOP_S) -> str:
        """All the server printed on stderr, once it has exited."""
        self.wait(timeout)
        if self.reader is not None:
            self.reader.join(timeout)
        return "".join(self.lines)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = STOP_S) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait()

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("headers", AUTH)
        kwargs.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, **kwargs)

    def metrics(self) -> str:
        with self.client() as client:
            response = client.get("/metrics")
        assert response.status_code == 200
        return response.text


def start_server(
    tmp: Path,
    backend: str,
    models: list[dict[str, Any]] | None,
    *args: str,
    plugins: str = "mock,http",
    **settings: Any,
) -> Server:
    """``synapse serve`` in a subprocess on an ephemeral port of 127.0.0.1,
    with a catalog of ``models`` (``None``: no catalog file, as a server of
    ``--model`` folders alone runs)."""
    env = dict(os.environ, SYNAPSE_PLUGINS=plugins, PYTHONUNBUFFERED="1")
    env.pop("SYNAPSE_CATALOG", None)
    command = [sys.executable, "-m", "synapse_core.cli", "serve"]
    if models is not None:
        catalog = tmp / "catalog.toml"
        catalog.write_text(catalog_toml(*models, **settings), encoding="utf-8")
        command += ["--catalog", str(catalog)]
    # No drain unless a test asks for one: every server here is stopped with SIGTERM.
    command += ["--port", "0", "--backend", backend, "--drain-grace", "0", *args]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            # The models line comes right after the URL's: once it is read,
            # everything the server prints on start is in ``lines``.
            if _MODELS.search(line):
                found.set()
        found.set()  # the process ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not found.wait(START_S) or proc.poll() is not None:
        proc.kill()
        proc.wait()
        raise RuntimeError("synapse serve did not start:\n" + "".join(lines))
    match = next(m for m in map(_URL.search, lines) if m)
    return Server(proc, match[1], lines, reader)


def metric(text: str, name: str, **labels: str) -> list[float]:
    """Every value of metric ``name`` whose labels include ``labels``."""
    values = []
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, label_text = head.partition("{")
        if metric_name != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if all(found.get(k) == v for k, v in labels.items()):
            values.append(float(value))
    return values


def pid_gone(pid: int) -> bool:
    """True once no process ``pid`` exists (a zombie still counts as existing)."""
    return not pid_exists(pid)
