"""Conformance checks of the rows a transport returns: one per input, finite,
in input order, and the same whatever their batch mates, bucket or variant."""

from __future__ import annotations

import math

import pytest

from .harness import (
    QUERY,
    TEXTS,
    LargestBucket,
    assert_finite,
    embedded,
    host_for,
    rows_close,
    texts_across_buckets,
)
from .subject import Subject


class RowChecks:
    """Rows and scores: how many, which values, in which order."""

    async def test_one_row_of_dims_finite_floats_per_text(self, subject: Subject) -> None:
        async with host_for(subject) as host:
            result, hello = await embedded(host, subject.model("embed")["name"])
        assert len(result.vectors) == len(TEXTS)
        assert {len(v) for v in result.vectors} == {hello.dims}
        assert_finite(result.vectors, "embed")
        assert rows_close(result.vectors[0], result.vectors[3], subject.atol), "same text"

    async def test_one_finite_score_per_document(self, subject: Subject) -> None:
        entry = subject.model("rerank")
        async with host_for(subject) as host:
            scores = (await host.rerank(entry["name"], QUERY, TEXTS)).scores
            alone = (await host.rerank(entry["name"], QUERY, TEXTS[1:2])).scores
        assert len(scores) == len(TEXTS), "one score per document"
        assert_finite(scores, "rerank")
        assert math.isclose(scores[0], scores[3], abs_tol=subject.atol), "same document"
        assert math.isclose(scores[1], alone[0], abs_tol=subject.atol), "independent of mates"

    async def test_rows_come_back_in_input_order_across_buckets(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with host_for(subject) as host:
            await host.load(name)
            texts = texts_across_buckets(host, subject.transport, name)
            together = (await host.embed(name, texts)).vectors
            alone = [(await host.embed(name, [t])).vectors[0] for t in texts]
        assert_finite(together, "embed")
        for i, (row, own) in enumerate(zip(together, alone, strict=True)):
            assert rows_close(row, own, subject.atol), (
                f"row {i} of a call across buckets is not that text's row: rows must come "
                "back in input order and must not depend on their batch mates"
            )

    async def test_rows_do_not_depend_on_batch_mates(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        # Mates one token longer: they share the text's bucket, so its batches,
        # and the host, which sends a bucket's requests shortest first, puts
        # the text in the first request among them.
        mates = [f"{TEXTS[1]} {i}" for i in range(12)]
        async with host_for(subject) as host:
            alone = (await host.embed(name, [TEXTS[1]])).vectors[0]
            crowded = (await host.embed(name, [*mates[:5], TEXTS[1], *mates[5:]])).vectors[5]
        assert rows_close(alone, crowded, subject.atol), (
            f"a text's row changed with its batch mates: {alone[:3]} vs {crowded[:3]}"
        )

    async def test_rows_do_not_depend_on_bucket(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with host_for(subject) as host:
            smallest = (await host.embed(name, TEXTS)).vectors
        async with host_for(subject, None, LargestBucket()) as host:
            largest = (await host.embed(name, TEXTS)).vectors
        for i, (a, b) in enumerate(zip(smallest, largest, strict=True)):
            assert rows_close(a, b, subject.atol), f"text {i}'s row changed with its bucket"

    async def test_in_process_and_subprocess_variants_agree(self, subject: Subject) -> None:
        if subject.in_process is None:
            pytest.skip("the subject has no in-process variant")
        name = subject.model("embed")["name"]
        results = []
        for transport in (subject.transport, subject.in_process):
            async with host_for(subject, transport) as host:
                result, h = await embedded(host, name)
            results.append((result, (h.buckets, h.dims, h.max_batch, h.identity)))
        (sub, sub_hello), (inp, inp_hello) = results
        assert sub_hello == inp_hello, "the variants' hellos differ"
        for i, (a, b) in enumerate(zip(sub.vectors, inp.vectors, strict=True)):
            assert rows_close(a, b, subject.atol), f"text {i}: the variants' rows differ"
