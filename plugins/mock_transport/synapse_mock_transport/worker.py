"""The mock worker process: ``python -m synapse_mock_transport.worker --spec JSON``."""

from __future__ import annotations

import sys

from synapse_core.wire import LaunchSpec
from synapse_core.worker_kit import worker_main

from .logic import MockLogic
from .options import parse_options


def build(spec: LaunchSpec) -> MockLogic:
    return MockLogic(
        model=spec.model,
        package=spec.package,
        generation=spec.generation,
        options=parse_options(spec.options),
    )


def main(argv: list[str] | None = None) -> int:
    return worker_main("synapse_mock_transport.worker", build, argv)


if __name__ == "__main__":
    sys.exit(main())
