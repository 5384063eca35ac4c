"""The fixture contract of the conformance suite (:class:`Subject`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from ...config import HostConfig, ModelSpec
from ...transport import Transport
from .. import host_config


@attrs.frozen
class Subject:
    """What the author's ``subject`` fixture returns (see :mod:`..conformance`)."""

    transport: Transport
    models: Sequence[Mapping[str, Any]]
    in_process: Transport | None = None
    faults: bool = True
    atol: float = 1e-5
    settings: Mapping[str, Any] = attrs.field(factory=dict)

    def entries(self, task: str) -> list[Mapping[str, Any]]:
        return [m for m in self.models if m["task"] == task]

    def model(self, task: str) -> Mapping[str, Any]:
        found = self.entries(task)
        if not found:
            if task == "embed":
                raise AssertionError("Subject.models needs at least one embed model")
            pytest.skip(f"the subject has no {task} model")
        return found[0]

    def config(self, *models: Mapping[str, Any]) -> HostConfig:
        return host_config(*(models or self.models), source="conformance catalog", **self.settings)


def specs(*entries: Mapping[str, Any]) -> tuple[ModelSpec, ...]:
    """The model specs of catalog ``entries`` (dicts of a ``[[models]]`` table)."""
    return host_config(*entries).models
