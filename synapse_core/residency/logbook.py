"""One log line for every worker fault, restart and exit, under the
``synapse`` logger (``synapse.workers``).

Each line says what happened and carries the same facts as fields a log
handler can read (``record.synapse``): the model, the worker, its generation
and the cause. ``synapse serve`` prints them; a host embedded elsewhere logs
them wherever its application sends the ``synapse`` logger.
"""

from __future__ import annotations

import logging

from ..naming import shown
from .worker import Worker

log = logging.getLogger("synapse.workers")


def record(event: str, worker: Worker, generation: int, cause: str, level: int) -> None:
    """Log ``event`` (``fault``, ``restart``, ``exit``, ...) of ``worker``'s ``generation``."""
    if not log.isEnabledFor(level):
        return
    model = worker.spec.name
    log.log(
        level,
        "worker %s: model=%s worker=%s generation=%d cause=%s",
        event,
        shown(model),
        shown(worker.worker_id),
        generation,
        cause,
        extra={
            "synapse": {
                "event": event,
                "model": model,
                "worker": worker.worker_id,
                "generation": generation,
                "cause": cause,
            }
        },
    )


def fault(worker: Worker, generation: int, cause: str) -> None:
    record("fault", worker, generation, cause, logging.WARNING)


def restart(worker: Worker, generation: int, cause: str) -> None:
    record("restart", worker, generation, cause, logging.WARNING)


def failed(worker: Worker, generation: int, cause: str) -> None:
    """The worker is given up on (its start failed, or its restart budget is spent)."""
    record("failed", worker, generation, cause, logging.ERROR)


def exited(worker: Worker, generation: int, cause: str, confirmed: bool) -> None:
    if confirmed:
        record("exit", worker, generation, cause, logging.INFO)
    else:
        record("exit-unconfirmed", worker, generation, cause, logging.ERROR)
