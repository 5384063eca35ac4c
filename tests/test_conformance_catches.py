"""The conformance suite fails transports that break the contract it checks.

Each broken worker below is the fake worker with one fault, and each broken
transport the fake transport with one; the suite runs against it (in a
pytester sandbox, in-process variant, asyncio only) and the check named for
that fault must fail while an unrelated check still passes.

Three checks have no catch here: the identity returned with embeddings and
the admit/evict/inventory round trip are kept by the worker kit, which a
transport built on it cannot break, and a leftover process after retirement
needs a real process that outlives its host.
"""

from __future__ import annotations

import pytest

SUITE = """
import math
import attrs
import pytest
from synapse_core.testing.conformance import Conformance, Subject
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import FakeWorker


class BatchMates(FakeWorker):
    def embed(self, batch):
        return [[v + 0.01 * len(batch) for v in row] for row in super().embed(batch)]


class Reversed(FakeWorker):
    def embed(self, batch):
        return super().embed(batch)[::-1]


class BucketSized(FakeWorker):
    def embed(self, batch):
        return [[v + self.shape.bucket * 1e-3 for v in row] for row in super().embed(batch)]


class NotFinite(FakeWorker):
    def embed(self, batch):
        return [[math.nan, *row[1:]] for row in super().embed(batch)]


class ShortRerank(FakeWorker):
    def rerank(self, query, batch):
        return super().rerank(query, batch[:-1]) + [math.inf]


class WrongGeneration(FakeWorker):
    def load(self, options):
        super().load(options)
        self.generation += 1


class Broken(InProcessFakeTransport):
    async def launch(self, request):
        return self.start_worker(request, WORKER, 4_242_000 + len(self.launches))


class NoFaults(Broken):
    # Says its options take fault knobs, then drops them.

    async def launch(self, request):
        options = {{k: v for k, v in request.model.options.items() if k != "faults"}}
        model = attrs.evolve(request.model, options=options)
        return await super().launch(attrs.evolve(request, model=model))


class Undercounting(Broken):
    # A tokenizer that counts at most four tokens: nothing is over the ceiling.

    def tokenizer(self, model):
        class Short(BasicTokenizer):
            def encode(self, text):
                return super().encode(text)[:4]

        return Short()


class Agreeing(Broken):
    # The healthy variant of a transport whose other variant is Broken.

    async def launch(self, request):
        return self.start_worker(request, FakeWorker, 4_343_000 + len(self.launches))


class TestBroken(Conformance):
    @pytest.fixture
    def anyio_backend(self):
        return "asyncio"

    @pytest.fixture
    def subject(self):
        options = {{"buckets": [8, 16, 32], "dims": 8, "max_batch": 4}}
        models = [
            {{"name": n, "task": t, "transport": "fake", "package": "p", "ceiling": 32,
              "options": options}}
            for n, t in (("e", "embed"), ("r", "rerank"))
        ]
        return {subject}


WORKER = {worker}
"""


BROKEN = "Subject(transport=Broken(), models=models)"
#: the subprocess variant healthy, the in-process one running WORKER
VARIANTS = "Subject(transport=Agreeing(), in_process=Broken(), models=models)"


def run_suite(
    pytester: pytest.Pytester, subject: str, worker: str, fails: str | None, healthy: str
) -> None:
    """Run the suite's ``fails`` check (``healthy`` checks for a healthy subject)
    and the round-trip check; only the ``fails`` check may fail, and it must."""
    pytester.makepyfile(test_suite=SUITE.format(worker=worker, subject=subject))
    selected = "test_admit_evict or " + (fails or healthy)
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", "-p", "no:cacheprovider", "-k", selected
    )
    outcomes = result.parseoutcomes()
    failed = [r.nodeid for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed]
    if fails is None:
        checks = len(healthy.split(" or "))
        assert failed == [] and outcomes.get("passed", 0) >= 1 + checks, result.stdout.str()
    else:
        assert failed and all(fails in nodeid for nodeid in failed), failed
        assert outcomes.get("passed", 0) >= 1  # the round-trip check still passes


@pytest.mark.parametrize(
    ("worker", "fails"),
    [
        ("BatchMates", "test_rows_do_not_depend_on_batch_mates"),
        ("Reversed", "test_rows_come_back_in_input_order_across_buckets"),
        ("BucketSized", "test_rows_do_not_depend_on_bucket"),
        ("NotFinite", "test_one_row_of_dims_finite_floats_per_text"),
        ("ShortRerank", "test_one_finite_score_per_document"),
        ("WrongGeneration", "test_hello_names_the_launch_and_an_identity"),
        ("FakeWorker", None),
    ],
)
def test_the_suite_fails_a_worker_that_breaks_its_check(
    pytester: pytest.Pytester, worker: str, fails: str | None
) -> None:
    healthy = "test_rows or test_one_row or test_one_finite or test_hello"
    run_suite(pytester, BROKEN, worker, fails, healthy)


@pytest.mark.parametrize(
    ("subject", "worker", "fails"),
    [
        (
            "Subject(transport=Undercounting(), models=models)",
            "FakeWorker",
            "test_refusals_start_no_worker",
        ),
        (
            "Subject(transport=NoFaults(), models=models)",
            "FakeWorker",
            "test_crash_mid_call_is_outcome_unknown_then_next_generation",
        ),
        (VARIANTS, "BatchMates", "test_in_process_and_subprocess_variants_agree"),
        (VARIANTS, "FakeWorker", None),
    ],
)
def test_the_suite_fails_a_transport_that_breaks_its_check(
    pytester: pytest.Pytester, subject: str, worker: str, fails: str | None
) -> None:
    healthy = "test_refusals or test_crash or test_in_process"
    run_suite(pytester, subject, worker, fails, healthy)
