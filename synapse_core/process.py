"""Launching Python worker modules as subprocesses, and confirming their exit.

Workers run in their own session (process group) so terminate and kill reach
any grandchildren, and a worker counts as gone only once it is reaped.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from subprocess import PIPE

import anyio
import msgspec
from anyio.abc import Process

from .transport import Launched, LaunchRequest, WorkerProcess
from .wire import LaunchSpec


class SubprocessWorker:
    """A :class:`~synapse_core.transport.WorkerProcess` over an anyio process."""

    def __init__(self, process: Process) -> None:
        self._process = process

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._process.pid, sig)
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


def launch_spec(request: LaunchRequest) -> LaunchSpec:
    return LaunchSpec(
        model=request.model.name,
        package=request.model.package,
        worker_id=request.worker_id,
        generation=request.generation,
        options=dict(request.model.options),
    )


async def spawn_worker(
    module: str,
    request: LaunchRequest,
    *,
    env: Mapping[str, str] | None = None,
    unset_env: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
) -> Launched:
    """Start ``python -m module --spec JSON`` speaking frames on stdin/stdout.

    ``env`` adds variables; ``unset_env`` removes some (the direct-ANE worker
    needs ``TMPDIR`` removed); ``pass_fds`` are inherited (lane locks).
    """
    child_env = dict(os.environ)
    child_env.update(env or {})
    for name in unset_env:
        child_env.pop(name, None)
    spec = msgspec.json.encode(launch_spec(request)).decode()
    process = await anyio.open_process(
        [sys.executable, "-m", module, "--spec", spec],
        stdin=PIPE,
        stdout=PIPE,
        stderr=None,
        env=child_env,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    assert process.stdin is not None and process.stdout is not None
    worker: WorkerProcess = SubprocessWorker(process)
    return Launched(send=process.stdin, receive=process.stdout, process=worker)


async def confirm_exit(process: WorkerProcess, grace_s: float) -> bool:
    """SIGTERM, wait ``grace_s``, SIGKILL, wait ``grace_s``: True once reaped.

    Shielded and bounded, so a cancelled caller can neither skip nor hang it.
    """
    with anyio.CancelScope(shield=True):
        if process.returncode is not None:
            await process.wait()
            return True
        for stop in (process.terminate, process.kill):
            stop()
            with anyio.move_on_after(grace_s):
                await process.wait()
                return True
        return False
    return False  # not reached: the shielded scope above always returns
