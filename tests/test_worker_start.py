"""How a worker starts and ends, seen from the host: the hello's buckets, buckets
known before any worker starts, stdout safety, and ending with the host."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import msgspec
import pytest

import synapse_core as synapse
from synapse_core.catalog import Catalog
from synapse_core.channel import FramedChannel
from synapse_core.errors import ChannelClosed
from synapse_core.plugin import (
    InProcessWorkers,
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSpec,
    Transport,
    WorkerOptions,
    bucket_sizes,
    confirm_exit,
    spawn_worker,
)
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Codec,
    Frame,
    Hello,
    Infer,
    Shape,
    WorkerFrame,
)
from synapse_core.worker import lifeline

FIXTURES = Path(__file__).parent / "worker_fixtures"
#: keeps a broken worker from hanging the suite; never a timing claim
BOUND_S = 20.0


def model(name: str = "m", ceiling: int = 200, **options: Any) -> dict[str, Any]:
    """An entry of the ``kit`` transports below (model ``m`` unless named)."""
    return model_entry(name, transport="kit", package="pkg", ceiling=ceiling, **options)


config = functools.partial(host_config, exchange_timeout_s=10.0)


# -- a hello's buckets ------------------------------------------------------------------------


#: a hello as a broken worker might send it: Hello's fields, without its checks
RawHello = msgspec.defstruct(
    "RawHello",
    [(f.name, f.type) for f in msgspec.structs.fields(Hello)],
    tag="hello",
    tag_field="t",
)


class BadHelloLogic:
    ignore_sigterm = False

    def __init__(self, request: LaunchRequest, buckets: list[int], max_batch: int = 2) -> None:
        self.request, self.buckets, self.max_batch = request, buckets, max_batch

    def hello(self) -> Any:
        r = self.request
        return RawHello(PROTOCOL_VERSION, "bad", "0", r.model.name, r.model.package,
                        r.generation, 1, self.buckets, 4, self.max_batch, "bad", {})  # fmt: skip

    def handle(self, frame: Frame) -> Any:
        raise AssertionError("a worker whose hello was refused is never asked anything")


class BadHelloTransport(InProcessWorkers, Transport):
    name = "kit"

    async def launch(self, request: LaunchRequest) -> Launched:
        options = request.model.options
        logic = BadHelloLogic(request, list(options["hello_buckets"]), options.get("batch", 2))
        return self.start_in_process(request, logic, 7)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("buckets", "problem"),
    [
        ([16, -1], "bucket sizes must be greater than 0"),
        ([0], "bucket sizes must be greater than 0"),
        ([32, 16], "buckets must be in increasing order"),
        ([16, 16], "a bucket is listed twice"),
        ([], "a worker needs at least one bucket"),
    ],
)
async def test_a_hello_with_invalid_buckets_is_a_start_up_fault_naming_the_problem(
    buckets: list[int], problem: str
) -> None:
    transport = BadHelloTransport()
    cfg = config(model(hello_buckets=buckets), restart_budget={"max_restarts": 0})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with anyio.fail_after(BOUND_S), pytest.raises(synapse.WorkerFault) as fault:
            await host.embed("m", ["one two"])
        assert "did not start" in str(fault.value)
        assert f"hello buckets {buckets}: {problem}" in str(fault.value)
        (launch,) = transport.launches
        assert launch.process.exited  # stopped, and its exit confirmed
        assert host.snapshot().lanes["kit:0"].reserved == 0


@pytest.mark.anyio
async def test_a_hello_with_an_absurd_batch_size_is_a_start_up_fault_saying_so() -> None:
    transport = BadHelloTransport()
    entry = model(hello_buckets=[16], batch=2**40)
    cfg = config(entry, restart_budget={"max_restarts": 0})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with anyio.fail_after(BOUND_S), pytest.raises(synapse.WorkerFault) as fault:
            await host.embed("m", ["one two"])
        assert f"hello reports max_batch {2**40}, over the 65536" in str(fault.value)
        (launch,) = transport.launches
        assert launch.process.exited
        assert host.snapshot().lanes["kit:0"].reserved == 0


# -- buckets known before a worker starts -----------------------------------------------------


class DeclaringTransport(Transport):
    """Declares buckets from its options; any launch is a test failure."""

    name = "kit"

    def __init__(self) -> None:
        self.launches = 0

    def buckets(self, model: ModelSpec) -> Sequence[int] | None:
        declared = model.options.get("sizes")
        return None if declared is None else list(declared)

    async def launch(self, request: LaunchRequest) -> Launched:
        self.launches += 1
        raise AssertionError("no worker may start for a refused call")


@pytest.mark.anyio
async def test_the_largest_declared_bucket_caps_the_ceiling_before_any_worker_starts() -> None:
    transport = DeclaringTransport()
    cfg = config(model(ceiling=200, sizes=[8, 16]), model("open", ceiling=200))
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with pytest.raises(synapse.Refused) as refusal:
            await host.embed("m", ["w " * 15])  # 15 words, 17 positions with CLS and SEP
        assert refusal.value.code == "over-ceiling" and refusal.value.index == 0
        assert "over the ceiling of 16" in str(refusal.value)
        assert transport.launches == 0 and host.snapshot().lanes == {}
    catalog = Catalog(cfg, synapse.PluginHost([transport_plugin(DeclaringTransport())]))
    assert (catalog.entries["m"].buckets, catalog.entries["m"].ceiling) == ((8, 16), 16)
    assert (catalog.entries["open"].buckets, catalog.entries["open"].ceiling) == (None, 200)


@pytest.mark.parametrize(
    ("sizes", "problem"),
    [([16, 8], "buckets must be in increasing order"), ([0, 8], "greater than 0")],
)
def test_declared_buckets_are_checked_when_the_catalog_opens(
    sizes: list[int], problem: str
) -> None:
    plugins = synapse.PluginHost([transport_plugin(DeclaringTransport())])
    with pytest.raises(synapse.ConfigError) as error:
        Catalog(config(model(sizes=sizes)), plugins)
    (line,) = error.value.problems
    assert line.startswith(f"models[0].options: transport 'kit' declares buckets {sizes}")
    assert problem in line


@attrs.frozen
class SizeOptions(WorkerOptions):
    buckets: tuple[int, ...] = attrs.field(default=(32, 8), validator=bucket_sizes)


class DefaultsTransport(Transport):
    """A transport that only names its worker and options class."""

    name = "kit"
    worker = "kit_workers:CountWorker"
    options_type = SizeOptions


def test_a_transport_naming_its_options_type_gets_validation_and_buckets() -> None:
    plugins = synapse.PluginHost([transport_plugin(DefaultsTransport())])
    catalog = Catalog(config(model(), model("small", buckets=[4])), plugins)
    assert (catalog.entries["m"].buckets, catalog.entries["m"].ceiling) == ((8, 32), 32)
    assert (catalog.entries["small"].buckets, catalog.entries["small"].ceiling) == ((4,), 4)
    for options, problem in [
        ({"colour": "red"}, "models[0].options: extra fields found (colour)"),
        ({"buckets": [8, 8]}, "models[0].options.buckets: a bucket is listed twice, got [8, 8]"),
    ]:
        with pytest.raises(synapse.ConfigError) as error:
            Catalog(config(model(**options)), plugins)
        assert error.value.problems == [problem]


@pytest.mark.anyio
async def test_a_transport_without_worker_or_launch_says_so() -> None:
    spec = ModelSpec("m", "embed", "kit", "pkg", 16)
    bare = Transport()
    with pytest.raises(NotImplementedError, match="sets no worker and does not override launch"):
        await bare.launch(LaunchRequest(spec, "m#1", 1, LaneInfo("k")))
    assert bare.buckets(spec) is None
    bare.validate_model(spec)  # no options type: nothing to check


# -- real worker processes: stdout safety, and ending with the host ---------------------------


class FixtureTransport(Transport):
    """Starts ``target`` from tests/worker_fixtures as a real subprocess."""

    name = "kit"

    def __init__(self, target: str) -> None:
        self.target = target

    async def launch(self, request: LaunchRequest) -> Launched:
        return await spawn_worker(self.target, request, env={"PYTHONPATH": str(FIXTURES)})


@pytest.mark.subprocess
@pytest.mark.anyio
@pytest.mark.parametrize("target", ["kit_workers:CountWorker", "kit_workers"])
async def test_a_worker_writing_to_stdout_does_not_corrupt_its_channel(
    target: str, capfd: pytest.CaptureFixture[str]
) -> None:
    transport = FixtureTransport(target)
    async with synapse.open_host(config(model()), plugins=[transport_plugin(transport)]) as host:
        with anyio.fail_after(BOUND_S):
            first = await host.embed("m", ["one two three", "four"])
            second = await host.embed("m", ["five six"])
        assert host.snapshot().worker("m").restarts == 0
    assert [v[0] for v in first.vectors + second.vectors] == [3.0, 1.0, 2.0]
    err = capfd.readouterr().err  # the worker's stderr is the host's
    for line in [
        "loading kit_workers at import",
        "raw write to fd 1 at import",
        "loading m generation 1",
        "embedding 2 sequences",
        "a child process writing to stdout",
    ]:
        assert line in err


@pytest.mark.subprocess
@pytest.mark.anyio
async def test_a_worker_that_exits_itself_ends_with_its_status() -> None:
    spec = ModelSpec("m", "embed", "kit", "pkg", 16, {"exit_status": 70})
    request = LaunchRequest(spec, "m#1", 1, LaneInfo("kit:0"))
    launched = await spawn_worker(
        "kit_workers:CountWorker", request, env={"PYTHONPATH": str(FIXTURES)}
    )
    channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
    try:
        with anyio.fail_after(BOUND_S):
            assert isinstance(await channel.receive(), Hello)
            assert isinstance(await channel.exchange(Admit(1, Shape(8, 1)), BOUND_S), Admitted)
            with pytest.raises(ChannelClosed):
                await channel.exchange(Infer(2, Shape(8, 1), "embed", [[1]]), BOUND_S)
            assert await launched.process.wait() == 70
    finally:
        await channel.aclose()
        await confirm_exit(launched.process, 5.0)


HOST_SCRIPT = """
import sys, anyio
from synapse_core.plugin import LaneInfo, LaunchRequest, ModelSpec, spawn_worker
from synapse_core.channel import FramedChannel
from synapse_core.wire import Admit, Codec, Infer, Shape, WorkerFrame

async def main():
    spec = ModelSpec("m", "embed", "kit", "pkg", 16, {"busy_s": 600.0})
    launched = await spawn_worker(
        "kit_workers:CountWorker", LaunchRequest(spec, "m#1", 1, LaneInfo("kit:0")),
        env={"PYTHONPATH": sys.argv[1]},
    )
    channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
    await channel.receive()  # hello
    await channel.exchange(Admit(1, Shape(8, 1)), 30)
    await channel.send(Infer(2, Shape(8, 1), "embed", [[1, 2]]))  # busy for 600 s
    print(launched.process.pid, flush=True)
    await anyio.sleep(600)

anyio.run(main)
"""


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.subprocess
def test_a_busy_worker_exits_soon_after_its_host_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "host.py"
    script.write_text(HOST_SCRIPT)
    host = subprocess.Popen(
        [sys.executable, str(script), str(FIXTURES)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None
        worker_pid = int(host.stdout.readline())
        assert not gone(worker_pid)
    finally:
        host.kill()
        host.wait()
    with anyio.from_thread.start_blocking_portal() as portal:
        portal.call(wait_until_gone, worker_pid)
    assert gone(worker_pid)


async def wait_until_gone(pid: int) -> None:
    with anyio.fail_after(BOUND_S):
        while not gone(pid):
            await anyio.sleep(0.05)


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "getppid"])
def test_the_host_watch_notices_the_host_is_gone(
    use_pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_pidfd:
        monkeypatch.setattr(lifeline, "_pidfd", lambda pid: None)
    elif lifeline._pidfd(os.getpid()) is None:
        pytest.skip("no pidfd_open here")
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ended = threading.Event()
    statuses: list[int] = []

    def leave(status: int) -> None:
        statuses.append(status)
        ended.set()

    lifeline.watch_host(host.pid, exit=leave, poll_s=0.01)
    assert not ended.is_set()
    os.kill(host.pid, signal.SIGKILL)
    host.wait()
    assert ended.wait(BOUND_S)
    assert statuses == [lifeline.HOST_GONE]


def test_a_host_already_gone_ends_the_worker_at_once() -> None:
    host = subprocess.Popen([sys.executable, "-c", "pass"])
    host.wait()
    statuses: list[int] = []
    assert lifeline.watch_host(host.pid, exit=statuses.append) is None
    assert statuses == [lifeline.HOST_GONE]


# -- a worker that never says hello -------------------------------------------------------


class MistypedWorker(Transport):
    """A transport whose ``worker`` names a module that does not exist: the
    worker process fails to import it and exits before its hello."""

    name = "kit"
    worker = "synapse_core.no_such_worker_module:Worker"


@pytest.mark.subprocess
@pytest.mark.anyio
async def test_a_worker_that_exits_before_its_hello_is_reported_with_its_status() -> None:
    cfg = config(model(), restart_budget={"max_restarts": 0})
    async with synapse.open_host(cfg, plugins=[transport_plugin(MistypedWorker())]) as host:
        with anyio.fail_after(BOUND_S), pytest.raises(synapse.WorkerFault) as fault:
            await host.embed("m", ["one two"])
    message = str(fault.value)
    assert "worker for 'm' did not start: it exited with status 1 before its hello" in message
    assert "the worker's own error is on the host's standard error" in message


@pytest.mark.subprocess
@pytest.mark.anyio
async def test_a_worker_that_closes_its_channel_and_stays_is_stopped_and_said_to_be() -> None:
    transport = FixtureTransport("kit_workers:closes_and_lingers")
    cfg = config(model(), restart_budget={"max_restarts": 0})
    async with synapse.open_host(cfg, plugins=[transport_plugin(transport)]) as host:
        with anyio.fail_after(BOUND_S), pytest.raises(synapse.WorkerFault) as fault:
            await host.embed("m", ["one two"])
    assert "it closed its channel before its hello" in str(fault.value)
    assert "had not exited 1 s later, so the host stopped it" in str(fault.value)
