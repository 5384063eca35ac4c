"""The conformance suite: what the host needs from every transport, as tests.

A transport author gets the whole suite, on both anyio backends, by writing
one fixture. In the plugin's tests, e.g. ``tests/test_conformance.py``::

    import pytest
    from synapse_core.testing.conformance import Conformance, Subject

    from my_transport.transport import MyTransport


    class TestMyTransport(Conformance):
        @pytest.fixture
        def subject(self, tmp_path) -> Subject:
            return Subject(
                transport=MyTransport(),
                models=[
                    {"name": "e", "task": "embed", "transport": "mine",
                     "package": "my-embedder", "ceiling": 256, "options": {}},
                    {"name": "r", "task": "rerank", "transport": "mine",
                     "package": "my-reranker", "ceiling": 256, "options": {}},
                ],
            )

The fixture contract (:class:`Subject`):

- ``transport``: the transport as users get it, starting real worker
  processes. A new instance per test (the fixture is function-scoped).
- ``models``: catalog entries, each a dict with the keys of a ``[[models]]``
  table (``name``, ``task``, ``transport`` = the transport's name,
  ``package``, ``ceiling``, ``options``). At least one ``embed`` entry; the
  rerank checks run when there is a ``rerank`` entry and are skipped
  otherwise. Keep models small: every check starts workers.
- ``in_process`` (optional): the same transport's in-process variant (a
  transport built on :class:`~synapse_core.inprocess.InProcessWorkers`);
  then the two variants must agree row for row. Without it that check is
  skipped.
- ``faults`` (default True): the models' options accept the worker kit's
  ``faults`` table (options derived from ``WorkerOptions``); the crash check
  adds ``faults = {crash_on_infer = 1, only_generation = 1}`` to an embed
  model's options. Set False only for a transport that cannot inject faults;
  that check is then skipped.
- ``atol`` (default 1e-5): how far two computations of the same row may
  differ (a text alone vs. in a batch, in a small vs. a large bucket, in
  one variant vs. the other). Rows must not depend on batch mates or bucket.
- ``settings``: host settings for the catalog (e.g. ``exchange_timeout_s``
  for a model that loads slowly).

What is checked (each test's name says it): the hello names the launch and
an identity, dims and buckets are usable; every text gets one row of
``dims`` finite floats and every document one finite score; rows come back
in input order across buckets and do not depend on batch mates or bucket;
admit, evict and inventory round-trip; refusals (unknown model, wrong task,
empty text, over the ceiling) start no worker; a worker that crashes during
a call gives ``OutcomeUnknown`` and the next call is served by generation
+ 1; retiring leaves no worker process behind; the in-process and
subprocess variants agree.

The package is also a pytest plugin (``-p synapse_core.testing.conformance``
or ``pytest_plugins = ["synapse_core.testing.conformance"]`` in the plugin's
top ``conftest.py``): it then provides the shared ``anyio_backend`` fixture to
every test of the plugin. The suite class defines that fixture for itself, so
the suite runs on both backends either way.

The checks live in one module per family (:mod:`.worker`, :mod:`.rows`,
:mod:`.lifecycle`); :class:`Conformance` gathers them.

Run it like any test file, e.g. ``python -m pytest tests -n auto``; it needs
``pytest``, ``anyio`` and ``trio`` (the core's ``test`` extra:
``pip install "synapse-core[test]"``).
"""

from __future__ import annotations

import pytest

from ..pytest_plugin import BACKENDS, anyio_backend
from .lifecycle import LifecycleChecks
from .rows import RowChecks
from .subject import Subject
from .worker import WorkerChecks

__all__ = ["Conformance", "Subject", "anyio_backend"]


@pytest.mark.anyio
class Conformance(WorkerChecks, RowChecks, LifecycleChecks):
    """Subclass in a test module and define the ``subject`` fixture."""

    @pytest.fixture(params=BACKENDS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError("define a `subject` fixture returning a Subject")
