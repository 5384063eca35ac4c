"""Background threads: work runs in them at a lowered priority, its result or
error comes back to the caller, and a cancelled caller waits for it to end."""

from __future__ import annotations

import gc
import os
import sys
import threading

import anyio
import pytest

from synapse_http.background import NICE, Background

pytestmark = pytest.mark.anyio


def nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_work_runs_in_a_thread_of_its_own_at_a_lower_priority() -> None:
    background = Background(2, "test-background")
    loop = threading.get_ident(), nice()
    seen = await background.run(lambda: (threading.get_ident(), nice()))
    assert seen[0] != loop[0]
    if sys.platform == "linux" and loop[1] + NICE <= 19:
        assert seen[1] == loop[1] + NICE
    # The thread is lowered once, when it starts, not again on each use.
    assert (await background.run(lambda: (threading.get_ident(), nice())))[1] == seen[1]
    assert nice() == loop[1]  # the event loop's own is untouched


async def test_an_error_of_the_work_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await Background(1, "test-background").run(fail)


class Broken(Exception):
    pass


async def test_an_error_of_the_work_is_left_in_no_reference_cycle() -> None:
    # In a cycle with the frames its traceback holds, the error would keep
    # their locals (a request's texts) until the cyclic collector ran.
    def fail() -> None:
        raise Broken("broken")

    background = Background(1, "test-background")
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(Broken):
            await background.run(fail)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, Broken)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == []


async def test_a_cancelled_caller_waits_for_the_work_to_end() -> None:
    background = Background(1, "test-background")
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []

    def work() -> None:
        started.set()
        release.wait(30)
        ended.append("work")

    scope = anyio.CancelScope()

    async def caller() -> None:
        with scope:
            try:
                await background.run(work)
            finally:
                ended.append("caller")

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await anyio.to_thread.run_sync(started.wait, 30)
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert ended == []  # still waiting, though cancelled
        release.set()
    assert ended == ["work", "caller"]
