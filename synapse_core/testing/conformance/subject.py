"""The fixture contract of the conformance suite (:class:`Subject`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from ...config import HostConfig, ModelSpec
from ...transport import Transport
from .. import catalog_toml


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
        text = catalog_toml(*(dict(m) for m in models or self.models), **dict(self.settings))
        return HostConfig.from_toml_text(text, source="conformance catalog")


def specs(*entries: Mapping[str, Any]) -> tuple[ModelSpec, ...]:
    """The model specs of catalog ``entries`` (dicts of a ``[[models]]`` table)."""
    config = HostConfig.from_toml_text(catalog_toml(*(dict(e) for e in entries)))
    return config.models
