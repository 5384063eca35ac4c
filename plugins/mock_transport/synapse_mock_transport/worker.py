"""The mock worker process: ``python -m synapse_mock_transport.worker --spec JSON``."""

from __future__ import annotations

import argparse
import sys

import msgspec

from synapse_core.errors import ConfigError
from synapse_core.process import LaunchSpec
from synapse_core.worker_kit import serve_stdio

from .logic import MockLogic
from .options import parse_options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="synapse_mock_transport.worker")
    parser.add_argument("--spec", required=True, help="launch spec as JSON (set by the host)")
    args = parser.parse_args(argv)
    try:
        spec = msgspec.json.decode(args.spec, type=LaunchSpec)
        options = parse_options(spec.options)
    except (msgspec.DecodeError, msgspec.ValidationError, ConfigError) as exc:
        print(f"mock worker: bad launch spec: {exc}", file=sys.stderr)
        return 2
    logic = MockLogic(
        model=spec.model, package=spec.package, generation=spec.generation, options=options
    )
    return serve_stdio(logic)


if __name__ == "__main__":
    sys.exit(main())
