"""The one hash model behind the fake transport, the mock transport and the
simulated Neural Engine: each scheme's vectors and scores, bit for bit.

The digests were taken from the three separate implementations this model
replaced, so a change to it that moves any bit of any row fails here (the
other suites compare the workers with the model, not with fixed values).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence

import pytest

from synapse_core.plugin import (
    CRC32_POSITIONAL,
    MULTIPLICATIVE,
    SPLITMIX64,
    HashOptions,
    HashScheme,
    HashWorker,
    LaunchSpec,
)
from synapse_core.testing.fake_worker import FakeOptions, FakeWorker
from synapse_core.worker import build_logic

SEQUENCES: list[list[int]] = [
    [],
    [0],
    [1],
    [-3],
    [2**40],
    [5, 6, 7],
    [7, 6, 5],
    list(range(3, 13)),
    [101, 2023, 7592, 102] * 5,
]
DIMS = (1, 5, 8, 64, 384)


def _pack(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def digest(scheme: HashScheme) -> str:
    """Every sequence's row at every width, then each one's score against [5, 6, 7]."""
    h = hashlib.sha256()
    for dims in DIMS:
        for seq in SEQUENCES:
            h.update(_pack(scheme.embed(seq, dims)))
        h.update(_pack(scheme.rerank(SEQUENCES[5], SEQUENCES, dims)))
    return h.hexdigest()


@pytest.mark.parametrize(
    ("scheme", "expected"),
    [
        (CRC32_POSITIONAL, "6adc96d5d82ae04612f0f7301ceb34d58fa63c4d4dfd4d4ad4629d1080b97eba"),
        (SPLITMIX64, "e80089a9234f00105a5d7d32c7046440bbdf57a8ea052cc23fca95f695b73f41"),
        (MULTIPLICATIVE, "2aa336e8d304eeae357945397e8126bdedf3aad03a9691d5640402c316e06c59"),
    ],
    ids=["fake", "mock", "simulated-ane"],
)
def test_each_scheme_keeps_the_vectors_of_the_model_it_replaced(
    scheme: HashScheme, expected: str
) -> None:
    assert digest(scheme) == expected


def test_rows_are_unit_vectors_and_an_empty_row_follows_its_scheme() -> None:
    for scheme in (CRC32_POSITIONAL, SPLITMIX64, MULTIPLICATIVE):
        for seq in SEQUENCES[1:]:
            row = scheme.embed(seq, 64)
            assert math.isclose(math.fsum(v * v for v in row), 1.0), (scheme, seq)
    assert CRC32_POSITIONAL.embed([], 4) == [0.0, 0.0, 0.0, 0.0]
    assert SPLITMIX64.embed([], 4) == MULTIPLICATIVE.embed([], 4) == [1.0, 0.0, 0.0, 0.0]


def test_only_the_positional_scheme_depends_on_token_order() -> None:
    assert CRC32_POSITIONAL.embed([5, 6, 7], 64) != CRC32_POSITIONAL.embed([7, 6, 5], 64)
    for scheme in (SPLITMIX64, MULTIPLICATIVE):
        assert scheme.embed([5, 6, 7], 64) == scheme.embed([7, 6, 5], 64)


def test_a_document_equal_to_the_query_scores_highest() -> None:
    for scheme in (CRC32_POSITIONAL, SPLITMIX64, MULTIPLICATIVE):
        scores = scheme.rerank([3, 4, 5], [[9, 10], [3, 4, 5], [3, 4]], 64)
        assert scores[1] == pytest.approx(1.0)
        assert max(scores) == scores[1]


def test_the_fake_worker_is_the_hash_worker_with_the_fake_scheme() -> None:
    assert FakeOptions is HashOptions
    assert issubclass(FakeWorker, HashWorker) and FakeWorker.scheme is CRC32_POSITIONAL
    logic = build_logic(FakeWorker, LaunchSpec("m", "pkg", "m#1", 1, {"dims": 8}), pid=7)
    assert logic.hello().identity == "fake:pkg:d8"
