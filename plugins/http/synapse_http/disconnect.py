"""Cancelling a request's call when its client goes away.

Only ``receive()`` says that a client disconnected, so something must be
waiting in it while the call runs. On trio that is a task in a task group.
On asyncio a task per request (made, scheduled, cancelled and finished on
every request) cost more than the rest of the watching, so there
:class:`Watch` drives ``receive()`` from the callbacks of the futures it
waits on instead, as a task would but without one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import anyio
import sniffio
from starlette.types import Receive

T = TypeVar("T")


async def until_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T | None:
    """Run ``work``; if the client disconnects first, cancel it and return None.

    A cancelled call is abandoned by its caller only: the host drains the
    worker's reply and lets go of everything, as for any cancelled caller.
    """
    if sniffio.current_async_library() == "asyncio":
        scope = anyio.CancelScope()
        watch = Watch(receive, scope.cancel)
        try:
            with scope:
                return await work()
            return None  # cancelled: the client went away
        finally:
            watch.stop()
    outcome: list[T] = []
    failure: list[Exception] = []

    async def watcher() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        try:
            outcome.append(await work())
        except Exception as exc:  # raised as is, not in a group
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        # Popped: a local still holding it would make a cycle with its
        # traceback (which holds this frame), keeping the call's frames alive.
        raise failure.pop()
    return outcome[0] if outcome else None


class Watch:
    """On asyncio: call ``gone()`` once ``receive()`` gives ``http.disconnect``
    (or fails: a broken ``receive()`` counts as a disconnect), until
    :meth:`stop`.

    ``receive()`` is stepped as a task steps a coroutine: its first step runs
    here, and each later one in the callback of the future the step before
    waited on (a bare ``yield``, as in ``asyncio.sleep(0)``, is resumed on the
    loop's next pass). :meth:`stop` closes a ``receive()`` still waiting,
    which runs its cleanup as a cancelled task's would.
    """

    __slots__ = ("_gone", "_receive", "_steps", "_waiting")

    def __init__(self, receive: Receive, gone: Callable[[], object]) -> None:
        self._receive = receive
        self._gone: Callable[[], object] | None = gone
        self._waiting: asyncio.Future[Any] | None = None
        self._steps: Generator[Any, None, Any] | None = None
        self._start()

    def stop(self) -> None:
        self._gone = None
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.remove_done_callback(self._woken)
        steps, self._steps = self._steps, None
        if steps is not None:
            steps.close()

    def _start(self) -> None:
        self._steps = self._receive().__await__()
        self._step()

    def _step(self) -> None:
        steps = self._steps
        if steps is None or self._gone is None:
            return
        try:
            waiting = steps.send(None)
        except StopIteration as done:
            self._steps = None
            if done.value["type"] == "http.disconnect":
                self._disconnected()
            else:
                self._start()  # not the end yet: wait for the next message
            return
        except asyncio.CancelledError:
            self._steps = None  # cancelled by someone else: nothing to say
            return
        except Exception:
            self._steps = None
            self._disconnected()
            return
        if waiting is None:
            asyncio.get_running_loop().call_soon(self._step)
        else:
            # What a task does with a future its coroutine yields.
            waiting._asyncio_future_blocking = False
            self._waiting = waiting
            waiting.add_done_callback(self._woken)

    def _woken(self, future: asyncio.Future[Any]) -> None:
        self._waiting = None
        self._step()

    def _disconnected(self) -> None:
        gone, self._gone = self._gone, None
        if gone is not None:
            gone()
