"""The one hash model behind the fake transport, the mock transport and the
simulated Neural Engine: each scheme's vectors and scores, to 9 decimals.

The digests were taken on CPython 3.11 from the three separate
implementations this model replaced (which it matches bit for bit there),
so a change to it that moves any row fails here (the other suites compare
the workers with the model, not with fixed values). They hold on 3.11, 3.12
and 3.13 alike.
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
    # Rounded to 9 decimals: CPython 3.12's sum() of floats is compensated,
    # so a row's norm can move in its last bit between Python versions; any
    # change to the model itself moves far more than that. (+ 0.0: -0.0 is 0.0.)
    return struct.pack(f"<{len(values)}d", *(round(v, 9) + 0.0 for v in values))


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
        (CRC32_POSITIONAL, "034e3887bf6d9098a6f94b915f653d94b961d89a1b15b677513b171d9740f0ea"),
        (SPLITMIX64, "a469030c2f52169fffed19386198ac26c0f624028467c59e0b83a4065d809765"),
        (MULTIPLICATIVE, "a429d16eac31186c766ecd2bb5ce556d8db4421ad00f7284c378f163fee46d11"),
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
