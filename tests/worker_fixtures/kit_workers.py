"""Worker classes the kit's subprocess tests start (this folder goes on PYTHONPATH).

``noisy`` writes to stdout while its module is imported, while loading and
while embedding (from Python and from a child process writing to fd 1): none
of it may reach the frame channel.
"""

from __future__ import annotations

import os
import sys
import time

import attrs

from synapse_core.plugin import ModelWorker, WorkerOptions, bucket_sizes, worker_main

print("loading kit_workers at import")
os.write(1, b"raw write to fd 1 at import\n")


@attrs.frozen
class CountOptions(WorkerOptions):
    buckets: tuple[int, ...] = attrs.field(default=(8, 16), validator=bucket_sizes)
    #: seconds each embed call takes (a busy worker)
    busy_s: float = 0.0
    #: embed ends the worker with this status (a worker that knows it is broken)
    exit_status: int | None = None


class CountWorker(ModelWorker):
    """Rows of (length, sum): enough to check order and plumbing."""

    options_type = CountOptions
    dims = 2
    max_batch = 4

    def load(self, options: CountOptions) -> None:
        print(f"loading {self.model} generation {self.generation}")
        self.buckets = options.buckets
        self.busy_s = options.busy_s
        self.exit_status = options.exit_status
        self.identity = f"count:{self.package}:v1"

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        if self.exit_status is not None:
            raise SystemExit(self.exit_status)
        print("embedding", len(batch), "sequences")
        sys.stdout.flush()
        os.system("echo a child process writing to stdout")
        deadline = time.monotonic() + self.busy_s
        while time.monotonic() < deadline:
            pass  # busy, not sleeping: the host watch must still end the process
        return [[float(len(s)), float(sum(s))] for s in batch]


if __name__ == "__main__":
    sys.exit(worker_main(CountWorker))


def closes_and_lingers(spec: object) -> object:
    """A worker that closes its channel before its hello and does not exit."""
    import time

    from synapse_core.worker.entry import take_pipes

    take_pipes()[1].close()
    time.sleep(60)  # the host stops it long before
    raise SystemExit(0)
