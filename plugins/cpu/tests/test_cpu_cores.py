"""Threads without tuning: every usable core, shared out among the lane's busy workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synapse_cpu import cores
from synapse_cpu.options import parse_options
from synapse_models import model as runtime

HOLDER = """
import sys
from pathlib import Path
from synapse_cpu.cores import CoreShare
share = CoreShare(Path(sys.argv[1]), cores=4)
with share.busy():
    print("busy", flush=True)
    sys.stdin.readline()
"""


def test_usable_cores_are_the_affinity_mask() -> None:
    assert cores.usable_cores() == len(os.sched_getaffinity(0)) >= 1


def test_a_worker_alone_gets_every_core_and_busy_workers_share_them(tmp_path: Path) -> None:
    first, second = cores.CoreShare(tmp_path, cores=4), cores.CoreShare(tmp_path, cores=4)
    try:
        with first.busy() as alone:
            assert alone == 4
            with second.busy() as shared:
                assert shared == 2
        with second.busy() as again:  # the first is idle again
            assert again == 4
    finally:
        first.close()
        second.close()
    assert list(tmp_path.iterdir()) == []


def test_a_sparse_short_request_takes_its_share_without_marking_the_lane(
    tmp_path: Path,
) -> None:
    now = [100.0]
    first = cores.CoreShare(tmp_path, cores=4, clock=lambda: now[0])
    second = cores.CoreShare(tmp_path, cores=4)
    try:
        with second.busy(), first.computing(cores.CLAIM_POSITIONS) as short:
            assert short == 2  # its share beside the busy worker
        now[0] += cores.BACK_TO_BACK_S * 2
        with first.computing(cores.CLAIM_POSITIONS), second.busy() as beside:
            assert beside == 4  # the short request is not counted
        # The next short request right after the last: back to back, it claims.
        now[0] += cores.BACK_TO_BACK_S / 2
        with first.computing(cores.CLAIM_POSITIONS), second.busy() as beside:
            assert beside == 2
        now[0] += cores.BACK_TO_BACK_S * 2
        with first.computing(cores.CLAIM_POSITIONS + 1), second.busy() as beside:
            assert beside == 2  # a longer request always claims
        now[0] += cores.BACK_TO_BACK_S * 2
        with first.computing(1), second.busy() as beside:
            assert beside == 4  # sparse again
    finally:
        first.close()
        second.close()


def test_the_folder_is_listed_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listings.append(path) or scandir(path))
    wall, tick = [time.time_ns()], [0.0]
    old = wall[0] - 2 * cores.RECENT_NS
    os.utime(tmp_path, ns=(old, old))  # changed long before the first listing
    first = cores.CoreShare(tmp_path, cores=4, clock=lambda: tick[0], wall=lambda: wall[0])
    second = None
    try:
        os.utime(tmp_path, ns=(old, old))
        first.busy_others()
        before = len(listings)
        tick[0] += cores.STAT_S
        first.busy_others()
        assert len(listings) == before  # unchanged: its marks are read from memory
        tick[0] += cores.RELIST_S
        first.busy_others()
        assert len(listings) == before + 1  # listed at least every RELIST_S
        second = cores.CoreShare(tmp_path, cores=4)
        with second.busy():
            before = len(listings)
            tick[0] += cores.STAT_S
            assert first.busy_others() == 1  # a worker came: listed again
            assert len(listings) == before + 1
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_worker_that_came_within_the_listings_clock_tick_is_seen(tmp_path: Path) -> None:
    now = time.time_ns()  # the wall clock stays at the folder's last change
    tick = [0.0]
    first = cores.CoreShare(tmp_path, cores=4, clock=lambda: tick[0], wall=lambda: now)
    second = None
    try:
        assert first.busy_others() == 0
        listed = os.stat(tmp_path).st_mtime_ns
        second = cores.CoreShare(tmp_path, cores=4)
        os.utime(tmp_path, ns=(listed, listed))  # the file system's stamp did not move
        tick[0] += cores.STAT_S
        with second.busy():
            assert first.busy_others() == 1
    finally:
        first.close()
        if second is not None:
            second.close()


def test_the_folders_time_is_read_at_most_every_stat_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tick = [0.0]
    first = cores.CoreShare(tmp_path, cores=4, clock=lambda: tick[0])
    second = None
    stats = []
    stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stats.append(path) or stat(path, *a, **k))
    try:
        assert first.busy_others() == 0
        second = cores.CoreShare(tmp_path, cores=4)
        with second.busy():
            before = len(stats)
            tick[0] += cores.STAT_S / 2
            assert first.busy_others() == 0  # not looked for yet
            assert len(stats) == before
            tick[0] += cores.STAT_S / 2
            assert first.busy_others() == 1  # seen within STAT_S
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_new_workers_mark_under_a_dead_ones_name_is_read(tmp_path: Path) -> None:
    """A reused pid names a new worker's mark as a dead worker's was."""
    tick = [0.0]
    first = cores.CoreShare(tmp_path, cores=4, clock=lambda: tick[0])
    second = cores.CoreShare(tmp_path, cores=4)
    third = None
    try:
        assert first.busy_others() == 0  # knows the second's mark
        name = second.path
        second.close()
        third = cores.CoreShare(tmp_path, cores=4)
        os.rename(third.path, name)
        third.path = name
        tick[0] += cores.STAT_S
        with third.busy():
            assert first.busy_others() == 1
    finally:
        first.close()
        if third is not None:
            third.close()


def test_one_core_each_at_least(tmp_path: Path) -> None:
    shares = [cores.CoreShare(tmp_path, cores=2) for _ in range(3)]
    try:
        with shares[0].busy(), shares[1].busy(), shares[2].busy() as third:
            assert third == 1
    finally:
        for share in shares:
            share.close()


@pytest.mark.subprocess
def test_a_killed_worker_is_not_counted_busy(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    share = cores.CoreShare(tmp_path, cores=4)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "busy\n"
        assert share.busy_others() == 1
        holder.kill()
        holder.wait(timeout=30)
        assert share.busy_others() == 0  # the kernel dropped its lock
        later = cores.CoreShare(tmp_path, cores=4)
        assert later.busy_others() == 0
        later.close()
    finally:
        holder.kill()
        share.close()
    assert not list(tmp_path.glob(f"{holder.pid}.*{cores.SUFFIX}"))  # its mark was swept


def test_a_model_runs_each_request_on_its_share(tmp_path: Path, onnxruntime_model: object) -> None:
    assert isinstance(onnxruntime_model, runtime.Model)
    share, other = cores.CoreShare(tmp_path, cores=2), cores.CoreShare(tmp_path, cores=2)
    model = runtime.Model(**{**_fields(onnxruntime_model), "threads": None, "share": share})
    seen: list[int] = []
    run = model.run

    def spy(ids: object, types: object, mask: object, threads: int) -> object:
        seen.append(threads)
        return run(ids, types, mask, threads)  # type: ignore[arg-type]

    model.run = spy  # type: ignore[assignment]
    try:
        model.embed([[7592, 2088]])
        with other.busy():
            model.embed([[7592, 2088]])
    finally:
        share.close()
        other.close()
    assert seen == [2, 1]


def _fields(model: runtime.Model) -> dict[str, object]:
    import attrs

    return {f.name: getattr(model, f.name) for f in attrs.fields(runtime.Model) if f.init}


def test_threads_default_to_none_and_stay_an_option() -> None:
    assert parse_options({}).threads is None
    assert parse_options({"threads": 3}).threads == 3
    with pytest.raises(Exception, match=r"options\.threads"):
        parse_options({"threads": 0})


def test_quantize_needs_onnxruntime() -> None:
    assert parse_options({"quantize": "int8"}).quantize == "int8"
    with pytest.raises(Exception, match=r"options\.quantize: int8 needs runtime"):
        parse_options({"quantize": "int8", "runtime": "numpy"})


def test_spin_wait_is_an_option_that_defaults_to_spinning() -> None:
    """``options.spin_wait`` is what the worker passes to the model's sessions."""
    assert parse_options({}).spin_wait is True
    assert parse_options({"spin_wait": False}).spin_wait is False
    with pytest.raises(Exception, match=r"options\.spin_wait"):
        parse_options({"spin_wait": "sometimes"})
