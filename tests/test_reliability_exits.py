"""Confirmed exits: an exit that could not be confirmed keeps being watched
until it can, and a confirmed exit means the worker's whole process group is
gone, grandchildren included."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream

import synapse_core as synapse
from synapse_core.process import spawn_worker
from synapse_core.testing import eventually, transport_plugin
from synapse_core.testing.fake import FakeTransport, InProcessFakeTransport
from synapse_core.transport import Launched, LaunchRequest

pytestmark = pytest.mark.anyio
HANG_GUARD_S = 20  # turns a hang into a failure; not a timing assertion
FIXTURES = Path(__file__).parent  # holds the plugin_fixtures package
#: the first generation crashes on its first inference; the next one serves
CRASHES_ONCE = {"crash_on_infer": 1, "only_generation": 1}


def _state(host: synapse.Host, model: str = "m") -> str:
    return host.snapshot().worker(model).state


def _reserved(host: synapse.Host) -> int:
    return host.snapshot().lanes["fake:0"].reserved


# -- an unconfirmed exit keeps being watched ---------------------------------------------


async def test_an_unconfirmed_exit_is_confirmed_once_the_process_is_gone_then_load_works(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True  # the process is not gone until the test says so
    cfg = make_config(make_model("m"), exit_grace_s=0.02)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            await host.embed("m", ["x"])
            await host.retire("m")
            assert _state(host) == "exit_unconfirmed"
            assert _reserved(host) > 0  # charged while it may still run
            with pytest.raises(synapse.WorkerFault, match="did not exit"):
                await host.load("m")
            transport.launches[0].process.confirm_exit()  # now it is gone
            await eventually(lambda: _state(host) == "exited")
            assert _reserved(host) == 0
            await host.load("m")
            assert (await host.embed("m", ["y"])).vectors
            assert len(transport.launches) == 2


async def test_a_recovery_stopped_by_an_unconfirmed_exit_resumes_once_it_is_confirmed(
    make_model: Any, make_config: Any
) -> None:
    transport = InProcessFakeTransport()
    transport.hold_exits = True
    model = make_model("m", faults=CRASHES_ONCE)
    cfg = make_config(model, exit_grace_s=0.02)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            with pytest.raises(synapse.OutcomeUnknown):
                await host.embed("m", ["crashes"])
            await eventually(lambda: _state(host) == "exit_unconfirmed")
            assert _reserved(host) > 0
            with pytest.raises(synapse.WorkerFault, match="did not exit"):
                await host.embed("m", ["x"])
            transport.launches[0].process.confirm_exit()
            await eventually(lambda: _state(host) == "ready")
            assert host.snapshot().worker("m").generation == 2
            assert (await host.embed("m", ["x"])).vectors
            transport.hold_exits = False
            for record in transport.launches:
                record.process.confirm_exit()


class Silent(ByteReceiveStream):
    """The host end of a worker's pipe on which nothing ever arrives."""

    def __init__(self, inner: ByteReceiveStream) -> None:
        self.inner = inner

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.sleep_forever()
        raise AssertionError  # not reached

    async def aclose(self) -> None:
        await self.inner.aclose()


class SilentFirst(InProcessFakeTransport):
    """The first worker's hello never reaches the host."""

    async def launch(self, request: LaunchRequest) -> Launched:
        launched = await super().launch(request)
        if len(self.launches) == 1:
            return Launched(launched.send, Silent(launched.receive), launched.process)
        return launched


async def test_an_unconfirmed_start_becomes_a_failed_start_once_the_process_is_gone(
    make_model: Any, make_config: Any
) -> None:
    """A worker that never said hello and could not be confirmed gone blocks
    nothing for good: once gone, the next call starts a new one."""
    transport = SilentFirst()
    transport.hold_exits = True
    # Short enough for the silent first worker to fail fast, long enough for
    # the second to say hello on a loaded machine.
    cfg = make_config(make_model("m"), exit_grace_s=0.02, exchange_timeout_s=0.5)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
            with pytest.raises(synapse.WorkerFault):
                await host.load("m")
            assert _state(host) == "exit_unconfirmed"
            transport.launches[0].process.confirm_exit()
            await eventually(lambda: _state(host) == "failed")
            assert "is now gone" in host.snapshot().worker("m").reason
            transport.hold_exits = False
            assert (await host.embed("m", ["x"])).vectors


@pytest.mark.subprocess
async def test_a_real_worker_whose_exit_was_not_confirmed_in_time_is_confirmed_later(
    make_model: Any, make_config: Any
) -> None:
    cfg = make_config(make_model("m"), exit_grace_s=0.001)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(FakeTransport())]) as host:
            await host.embed("m", ["x"])
            await host.retire("m")  # too short a grace to confirm it, most often
            await eventually(lambda: _state(host) == "exited")
            assert _reserved(host) == 0
            await host.load("m")
            assert (await host.embed("m", ["x"])).vectors


# -- a confirmed exit covers the whole process group -------------------------------------


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no longer does)."""
    if sys.platform.startswith("linux"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return False
        return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class ForkingTransport(FakeTransport):
    """Fake workers that each start a child in their process group first."""

    def __init__(self, pids: Path) -> None:
        super().__init__()
        self.pids = pids

    async def launch(self, request: LaunchRequest) -> Launched:
        path = os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])
        env = {"PYTHONPATH": path, "SYNAPSE_TEST_CHILD_PIDS": str(self.pids)}
        return await spawn_worker("plugin_fixtures.forking_worker:ForkingWorker", request, env=env)

    def children(self) -> list[int]:
        if not self.pids.exists():
            return []
        return [int(line) for line in self.pids.read_text(encoding="utf-8").split()]


@pytest.fixture
def forking(tmp_path: Path) -> Any:
    transport = ForkingTransport(tmp_path / "children")
    yield transport
    for pid in transport.children():  # a failed test must not leave them behind
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.subprocess
async def test_retirement_confirms_the_exit_of_the_workers_children_too(
    make_model: Any, make_config: Any, forking: ForkingTransport
) -> None:
    cfg = make_config(make_model("m"), exit_grace_s=0.5)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(forking)]) as host:
            await host.embed("m", ["x"])
            [child] = forking.children()
            assert _running(child)
            await host.retire("m")
            assert _state(host) == "exited"
            assert not _running(child)


@pytest.mark.subprocess
async def test_recovery_after_a_crash_confirms_the_exit_of_the_workers_children_too(
    make_model: Any, make_config: Any, forking: ForkingTransport
) -> None:
    model = make_model("m", faults=CRASHES_ONCE)
    cfg = make_config(model, exit_grace_s=0.5)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(forking)]) as host:
            with pytest.raises(synapse.OutcomeUnknown):
                await host.embed("m", ["crashes"])
            await host.load("m")  # waits for the replacement
            assert host.snapshot().worker("m").generation == 2
            first, second = forking.children()
            assert not _running(first)
            assert _running(second)
    assert not _running(second)


@pytest.mark.subprocess
async def test_closing_the_host_confirms_the_exit_of_every_workers_children(
    make_model: Any, make_config: Any, forking: ForkingTransport
) -> None:
    cfg = make_config(make_model("a"), make_model("b"), exit_grace_s=0.5)
    with anyio.fail_after(HANG_GUARD_S):
        async with synapse.open_host(cfg, plugins=[transport_plugin(forking)]) as host:
            await host.embed("a", ["x"])
            await host.load("b")
            assert len(forking.children()) == 2
    assert not any(_running(pid) for pid in forking.children())
