"""The asyncio one-shot event's timed wait, which every call with a deadline uses."""

from __future__ import annotations

import asyncio

import pytest

from synapse_core.handoff import FutureEvent


async def test_a_timed_wait_is_woken_by_set() -> None:
    event = FutureEvent(asyncio.get_running_loop())
    asyncio.get_running_loop().call_soon(event.set)
    assert await event.wait_for(60.0) is True
    assert await event.wait_for(0.0) is True  # set stays set


async def test_a_timed_wait_ends_unset_when_its_time_is_up() -> None:
    event = FutureEvent(asyncio.get_running_loop())
    assert await event.wait_for(0.001) is False
    assert not event.is_set()
    # Set later, a new wait (timed or not) sees it at once.
    event.set()
    assert await event.wait_for(60.0) is True
    await asyncio.wait_for(event.wait(), 5.0)


async def test_a_cancelled_timed_wait_leaves_the_event_usable() -> None:
    loop = asyncio.get_running_loop()
    event = FutureEvent(loop)
    waiter = loop.create_task(event.wait_for(60.0))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    loop.call_soon(event.set)
    assert await event.wait_for(60.0) is True


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FutureEvent is asyncio's alone


pytestmark = pytest.mark.anyio
