"""Test support: shell commands run as a user types them (``serve run``,
``ray start``, ``ray stop``), each in one sandbox of its own, and nothing of
theirs left behind (Linux, as root: ``unshare`` and ``nsenter``).

The sandbox is a network namespace with loopback only, so whatever Ray
binds (its dashboard, GCS and agent ports, Serve's proxy on port 8000) is
reachable from nowhere else and clashes with nothing else running on the
machine; a PID namespace, so that ``ray stop``, which stops Ray processes by
name, sees only the sandbox's own; and a Ray temp directory of its own, so
the commands find no Ray instance started elsewhere. Closing the sandbox
ends its first process, and with it, by the kernel's rule for a PID
namespace, every process still in it, whatever a test left running.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .testing import STARTUP_ATTEMPTS, STARTUP_TIMED_OUT, alive, end_processes, wait_until

#: the sandbox's first process: loopback up, then wait to be ended
_INIT = "ip link set lo up && echo up && exec sleep infinity"
#: how long the namespaces may take to come up
_UP_S = 30.0


def available() -> str:
    """Why sandboxes cannot be made here ("" when they can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux namespaces"
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    probe = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        timeout=_UP_S,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot make namespaces here: {probe.stderr.decode().strip()}"
    return ""


class Sandbox:
    """Run commands in the sandbox, from ``cwd``; a context manager.

    ``cwd`` gets ``.venv``, a link to the Python environment running the
    tests, so that commands written as ``.venv/bin/serve ...`` run as written.
    """

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        # Short: Ray's socket paths under it must fit in 107 bytes.
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="sr-", dir="/tmp"))
        venv = cwd / ".venv"
        if not venv.exists():
            venv.symlink_to(sys.prefix, target_is_directory=True)
        self._anchor = subprocess.Popen(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", _INIT],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            self.init = self._first_child(self._anchor.pid)
            assert self._anchor.stdout is not None
            if self._anchor.stdout.readline().strip() != b"up":
                raise RuntimeError("the sandbox's loopback did not come up")
            self.namespace = os.readlink(f"/proc/{self.init}/ns/pid")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["RAY_TMPDIR"] = str(self.ray_tmp)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _enter(self, command: str) -> list[str]:
        """The command line that runs a shell command (as typed) in the sandbox."""
        return [
            "nsenter",
            f"--target={self.init}",
            "--net",
            "--pid",
            "--mount",
            # entering a mount namespace moves to its root: come back
            f"--wd={self.cwd}",
            "--",
            "sh",
            "-c",
            command,
        ]

    def run(self, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a shell command to its end (at most ``timeout`` seconds); one
        whose Ray start-up timed out is run again, after what it left is ended."""
        for attempt in range(1, STARTUP_ATTEMPTS + 1):
            before = self.processes()
            done = subprocess.run(
                self._enter(command),
                cwd=self.cwd,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode == 0 or STARTUP_TIMED_OUT not in done.stdout + done.stderr:
                break
            if attempt < STARTUP_ATTEMPTS:
                end_processes(self.processes() - before)
        return done

    def serve(self, command: str, log: Path, ready: str, timeout: float) -> Started:
        """Start a long-running command and wait until it says ``ready``; one
        whose Ray start-up timed out is started again, as :meth:`run` does."""
        for attempt in range(1, STARTUP_ATTEMPTS + 1):
            before = self.processes()
            started = self.start(command, log.with_suffix(f".{attempt}{log.suffix}"))
            try:
                started.wait_for(ready, timeout)
                return started
            except AssertionError:
                if not started.ended or STARTUP_TIMED_OUT not in started.output:
                    raise
                if attempt == STARTUP_ATTEMPTS:
                    raise
                end_processes(self.processes() - before)
        raise AssertionError("unreachable")

    def start(self, command: str, log: Path) -> Started:
        """Start a long-running shell command, its output going to ``log``."""
        with log.open("wb") as out:
            entered = subprocess.Popen(
                # exec: the command is the process that Ctrl-C's signal reaches
                self._enter(f"exec {command}"),
                cwd=self.cwd,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Started(entered, self._first_child(entered.pid), log)

    def processes(self) -> set[int]:
        """Every live process in the sandbox but its first one (host pids)."""
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.init:
                continue
            try:
                inside = os.readlink(entry / "ns" / "pid") == self.namespace
            except OSError:
                continue
            if inside and alive(int(entry.name)):
                found.add(int(entry.name))
        return found

    def describe(self, pids: set[int]) -> str:
        """The command lines of ``pids``, for failure messages."""
        lines = []
        for pid in sorted(pids):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                command = b"(gone)"
            lines.append(f"{pid}: {command.decode(errors='replace')[:200]}")
        return "\n".join(lines)

    def drained(self, timeout: float) -> None:
        """Until no process is left in the sandbox; fails naming those left."""
        end = time.monotonic() + timeout
        while left := self.processes():
            if time.monotonic() > end:
                raise AssertionError(f"left after {timeout:g} s:\n{self.describe(left)}")
            time.sleep(0.1)

    def close(self) -> None:
        """End every process in the sandbox, then remove its Ray temp directory."""
        if self._anchor.poll() is None:
            os.killpg(self._anchor.pid, signal.SIGKILL)
        self._anchor.wait(timeout=_UP_S)
        if hasattr(self, "namespace"):
            wait_until(lambda: not self.processes(), "the sandbox's processes to end", _UP_S)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)

    @staticmethod
    def _first_child(pid: int) -> int:
        children = Path(f"/proc/{pid}/task/{pid}/children")
        end = time.monotonic() + _UP_S
        while True:
            found = children.read_text().split() if children.exists() else []
            if found:
                return int(found[0])
            if not alive(pid):
                raise RuntimeError(f"process {pid} ended before it started its child")
            if time.monotonic() > end:
                raise RuntimeError(f"process {pid} started no child within {_UP_S:g} s")
            time.sleep(0.01)


class Started:
    """A command started in a sandbox: ``pid`` is the command itself."""

    def __init__(self, entered: subprocess.Popen[bytes], pid: int, log: Path) -> None:
        self._entered = entered
        self.pid = pid
        self.log = log

    @property
    def ended(self) -> bool:
        return self._entered.poll() is not None

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float) -> None:
        """Until ``text`` appears in the output; fails at once if the command ended."""
        end = time.monotonic() + timeout
        while text not in self.output:
            if self._entered.poll() is not None:
                raise AssertionError(
                    f"ended ({self._entered.returncode}) before {text!r}:\n{self.output}"
                )
            if time.monotonic() > end:
                raise AssertionError(f"no {text!r} within {timeout:g} s:\n{self.output}")
            time.sleep(0.1)

    def interrupt(self, timeout: float) -> int:
        """Ctrl-C: SIGINT to the command; its exit status once it has ended."""
        os.kill(self.pid, signal.SIGINT)
        return self._entered.wait(timeout=timeout)
