"""``synapse ane selftest``: refused here, and the whole flow with the simulated device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from synapse_ane_direct.cli import make_group
from synapse_ane_direct.selftest import EXIT_CANNOT_RUN, run_selftest

from .conftest import Reference


@pytest.mark.skipif(sys.platform == "darwin", reason="the refusal is for non-macOS")
def test_selftest_refuses_here_with_the_reason_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(make_group(), ["selftest", "--runtime-dir", str(tmp_path)])
    assert result.exit_code == EXIT_CANNOT_RUN == 2
    assert "cannot run on this machine" in result.output and "'linux'" in result.output
    assert not (tmp_path / "lane-ane_0.lock").exists()  # refused before taking the lock


def test_selftest_refuses_a_held_lane(tmp_path: Path) -> None:
    from synapse_ane_direct.lanelock import acquire

    with acquire("ane:0", tmp_path):
        lines: list[str] = []
        status = run_selftest(simulated=True, texts=1, runtime_dir=tmp_path, echo=lines.append)
    assert status == EXIT_CANNOT_RUN
    assert "lane ane:0 is held by" in lines[0]


def test_simulated_selftest_runs_every_bucket_through_the_interpreter(
    reference: Reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the worker must not see it
    result = CliRunner().invoke(
        make_group(),
        ["selftest", "--simulated", "--texts", "1", "--runtime-dir", str(tmp_path / "rt")],
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "device: simulated (mil-interpreter-fp16-minilm-53aa5117)" in out
    assert "worker: TMPDIR unset, lane lock inherited" in out
    rows = [
        line.split()
        for line in out.splitlines()
        if line.split()[:1] in (["32"], ["64"], ["128"], ["256"])
    ]
    assert [r[0] for r in rows] == ["32", "64", "128", "256"]
    for row in rows:
        assert float(row[4]) >= 0.999 and float(row[5]) >= 0.999
    assert out.rstrip().endswith(
        "PASS: every bucket's vectors have cosine >= 0.999 with the baseline"
    )


def test_selftest_fails_below_the_floor(reference: Reference, tmp_path: Path) -> None:
    from synapse_ane_direct.selftest import Baseline

    index = {tuple(ids): i for i, ids in enumerate(reference.ids)}

    def opposite() -> Baseline:
        # each text's reference vector, negated: every cosine is about -1
        return Baseline(
            "a baseline pointing the other way",
            lambda positions: -reference.vectors[[index[tuple(p)] for p in positions]],
        )

    lines: list[str] = []
    status = run_selftest(
        simulated=True,
        texts=1,
        buckets=(32,),
        runtime_dir=tmp_path,
        echo=lines.append,
        baseline=opposite,
    )
    assert status == 1
    assert lines[-1].startswith("FAIL: lowest cosine -0.99"), lines[-1]


def test_bad_buckets_are_refused() -> None:
    result = CliRunner().invoke(make_group(), ["selftest", "--simulated", "--buckets", "32,x"])
    assert result.exit_code == 2 and "give sizes like 32,64,128,256" in result.output


class _Point:
    """An entry point of the ``synapse.references`` group, without installing one."""

    def __init__(self, value: str, factory: object) -> None:
        self.value = value
        self._factory = factory

    def load(self) -> object:
        return self._factory


def test_the_baseline_is_a_reference_another_plugin_publishes() -> None:
    from synapse_ane_direct.selftest import reference_baseline

    class Published:
        def __init__(self, name: str) -> None:
            self.name = name

        def embed(self, positions: list[list[int]]) -> list[list[float]]:
            return [[float(len(p))] for p in positions]

    points = [
        _Point("b.ref:second", lambda: Published("b")),
        _Point("a.ref:x", lambda: Published("a")),
    ]
    baseline = reference_baseline(lambda: points)  # type: ignore[arg-type,return-value]
    assert baseline.name == "a"  # the first by value, whatever the install order
    assert baseline.embed([[101, 5, 102], [101, 102]]) == [[3.0], [2.0]]


def test_the_selftest_finds_the_cpu_reference_by_entry_point_only() -> None:
    from synapse_ane_direct.selftest import REFERENCE_GROUP, REFERENCE_MODEL, installed_references

    values = {point.value for point in installed_references()}
    try:
        import synapse_cpu  # noqa: F401  (installed here: then it must be found)
    except ImportError:
        pytest.skip("synapse-cpu is not installed")
    assert "synapse_cpu.reference:minilm" in values, (REFERENCE_GROUP, REFERENCE_MODEL)


def test_with_no_published_reference_the_interpreter_is_the_baseline_and_says_why(
    reference: Reference,
) -> None:
    from synapse_ane_direct.selftest import reference_baseline

    baseline = reference_baseline(lambda: [])
    assert baseline.name.startswith("the fp32 program in the MIL interpreter")
    assert "'synapse.references'" in baseline.name
    first = reference.ids[0]
    (row,) = baseline.embed([first])
    expected = reference.vectors[0]
    cosine = float(row @ expected / ((row @ row) ** 0.5 * (expected @ expected) ** 0.5))
    assert cosine >= 0.999
