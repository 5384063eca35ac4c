"""The fake worker, after starting a child of its own in its process group.

The child (a grandchild of the host) ignores SIGTERM and sleeps, as a helper
process a real worker starts might; its pid is appended to the file named by
``SYNAPSE_TEST_CHILD_PIDS``. Launch target:
``plugin_fixtures.forking_worker:ForkingWorker``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from synapse_core.testing.fake_worker import FakeOptions, FakeWorker

CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


class ForkingWorker(FakeWorker):
    def load(self, options: FakeOptions) -> None:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(os.environ["SYNAPSE_TEST_CHILD_PIDS"], "a", encoding="utf-8") as fh:
            fh.write(f"{child.pid}\n")
        super().load(options)
