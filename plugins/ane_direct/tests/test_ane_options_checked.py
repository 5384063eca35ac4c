"""Direct-ANE options are checked, all at once, when the catalog opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from synapse_ane_direct.options import parse_options
from synapse_core import ConfigError


def test_a_trace_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"trace": str(tmp_path)}, source="model 'x'")
    (problem,) = info.value.problems
    assert problem.startswith("options.trace: ") and "file to append to" in problem


def test_every_bad_option_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"dims": 0, "max_batch": 0, "compile_delay_s": float("nan")})
    assert [p.split(":")[0] for p in info.value.problems] == [
        "options.dims",
        "options.max_batch",
        "options.compile_delay_s",
    ]
