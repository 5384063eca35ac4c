"""Launching Python worker modules as subprocesses, and confirming their exit.

Workers run in their own session (process group) so terminate and kill reach
any grandchildren. A worker counts as gone only once it is reaped *and* no
process of its group is left: a child it started could otherwise keep the
device (and an inherited lane lock) after the host refunded its reservations.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence

import anyio
import msgspec
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from .launch import Launched, LaunchRequest, ProcessGroup, WorkerProcess
from .wire import LaunchSpec

#: the module every Python worker starts through (see :mod:`synapse_core.worker.entry`)
WORKER_ENTRY = "synapse_core.worker"
#: first and longest pause between two looks at a process group that is going
GROUP_POLL_S = (0.002, 0.05)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs.

    Zombies count as gone: they hold nothing, and an orphan's zombie may never
    be reaped where PID 1 does not reap (some containers). On Linux the group's
    members are read from ``/proc``; elsewhere a zombie counts as alive until
    its reaper (launchd) reaps it.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we may not signal still runs
    if not sys.platform.startswith("linux"):
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


class SubprocessWorker(ProcessGroup):
    """A :class:`~synapse_core.transport.WorkerProcess` over an anyio process
    that leads its own process group."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self._pgid = process.pid

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._pgid, sig)
        except ProcessLookupError:
            pass  # already gone; wait() reaps it
        except PermissionError:
            self._process.send_signal(sig)

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    async def wait(self) -> int:
        return await self._process.wait()

    def group_alive(self) -> bool:
        return group_alive(self._pgid)


def launch_spec(request: LaunchRequest) -> LaunchSpec:
    return LaunchSpec(
        model=request.model.name,
        package=request.model.package,
        worker_id=request.worker_id,
        generation=request.generation,
        options=dict(request.model.options),
        host_pid=os.getpid(),
    )


async def spawn_worker(
    module: str,
    request: LaunchRequest,
    *,
    env: Mapping[str, str] | None = None,
    unset_env: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
) -> Launched:
    """Start a Python worker speaking frames on stdin/stdout.

    ``module`` is ``"package.module:WorkerClass"`` (a
    :class:`~synapse_core.worker.ModelWorker` subclass, or a function building
    a :class:`~synapse_core.worker.WorkerLogic` from a launch spec) or a
    module run as ``__main__``. The child runs ``python -m synapse_core.worker
    MODULE --spec JSON``: its stdout is moved to stderr before ``module`` is
    imported, and it exits soon after this process does.

    ``env`` adds variables; ``unset_env`` removes some (the direct-ANE worker
    needs ``TMPDIR`` removed); ``pass_fds`` are inherited (lane locks).
    """
    child_env = dict(os.environ)
    child_env.update(env or {})
    for name in unset_env:
        child_env.pop(name, None)
    spec = msgspec.json.encode(launch_spec(request)).decode()
    # Our own pipes, read and written directly: anyio's asyncio process
    # streams add an event-loop turn to every send and a StreamReader layer.
    to_child, from_host = os.pipe()
    from_child, to_host = os.pipe()
    try:
        process = await anyio.open_process(
            [sys.executable, "-m", WORKER_ENTRY, module, "--spec", spec],
            stdin=to_child,
            stdout=to_host,
            stderr=None,
            env=child_env,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        os.close(from_host)
        os.close(from_child)
        raise
    finally:
        os.close(to_child)
        os.close(to_host)
    worker: WorkerProcess = SubprocessWorker(process)
    return Launched(send=PipeSend(from_host), receive=PipeReceive(from_child), process=worker)


class _PipeEnd:
    """One non-blocking end of a pipe, closed once (waking any waiter on it)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        # Invariant: once set, never unset; the fd is closed exactly once.
        self._closed = False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)


class PipeSend(_PipeEnd, ByteSendStream):
    """Writes straight to a non-blocking pipe; waits only while the pipe is full."""

    def send_nowait(self, item: bytes | memoryview) -> int:
        """Write as much of ``item`` as the pipe takes now; return the bytes written."""
        if self._closed:
            raise anyio.ClosedResourceError
        view = memoryview(item)
        sent = 0
        while sent < len(view):
            try:
                sent += os.write(self._fd, view[sent:])
            except BlockingIOError:
                break
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError from exc
        return sent

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            view = view[self.send_nowait(view) :]
            if view:
                await anyio.wait_writable(self._fd)


class PipeReceive(_PipeEnd, ByteReceiveStream):
    """Reads straight from a non-blocking pipe; waits only while it is empty."""

    def receive_nowait(self, max_bytes: int = 65536) -> bytes | None:
        """What the pipe holds now (up to ``max_bytes``), or ``None`` if it is empty."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            data = os.read(self._fd, max_bytes)
        except BlockingIOError:
            return None
        if not data:
            raise anyio.EndOfStream
        return data

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while (data := self.receive_nowait(max_bytes)) is None:
            await anyio.wait_readable(self._fd)
        return data


async def _gone(process: WorkerProcess) -> None:
    """Return once ``process`` is reaped and no process of its group is left."""
    await process.wait()
    if isinstance(process, ProcessGroup):
        pause, longest = GROUP_POLL_S
        while process.group_alive():
            await anyio.sleep(pause)
            pause = min(pause * 2, longest)


def _lingers(process: WorkerProcess) -> bool:
    """Whether something of ``process`` may still run (itself or its group)."""
    if process.returncode is None:
        return True
    return isinstance(process, ProcessGroup) and process.group_alive()


async def confirm_exit(process: WorkerProcess, grace_s: float) -> bool:
    """SIGTERM, wait ``grace_s``, SIGKILL, wait ``grace_s``: True once the
    process is reaped and, for a :class:`ProcessGroup`, its whole group is gone.

    A worker that exited on its own is still signalled if its group lingers.
    Shielded and bounded, so a cancelled caller can neither skip nor hang it.
    """
    with anyio.CancelScope(shield=True):
        confirmed = await _stop(process, grace_s)
    return confirmed


async def _stop(process: WorkerProcess, grace_s: float) -> bool:
    if not _lingers(process):
        await process.wait()
        return True
    for stop in (process.terminate, process.kill):
        stop()
        with anyio.move_on_after(grace_s):
            await _gone(process)
            return True
    return False


async def wait_gone(process: WorkerProcess, every_s: float) -> None:
    """Wait, unbounded, until ``process`` (and its group) is gone, sending
    SIGKILL again every ``every_s``: for a process whose exit
    :func:`confirm_exit` could not confirm. Cancellable."""
    while True:
        process.kill()
        with anyio.move_on_after(every_s):
            await _gone(process)
            return
