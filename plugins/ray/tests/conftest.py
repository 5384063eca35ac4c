"""A local Ray instance per test module, on loopback only, and nothing left behind.

Tests that need Ray use the module-scoped ``serve_app`` fixture (one Ray
instance and one Serve application per module: starting Ray costs seconds)
and are marked ``ray`` (``-m "not ray"`` leaves them out). They are not in
the project's default test paths: the ``ray`` nox session runs them one at a
time (``-p no:xdist``), since two Ray instances on a 2-core machine only
slow each other down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from synapse_ray.testing import ServeApp, descendants, start_serve, stop_serve, write_catalog


@pytest.fixture(scope="module")
def serve_app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeApp]:
    """The deployment of the module's ``catalog(trace)`` and ``ARGS``, with the
    module's ``environment(directory)`` set for every Ray process."""
    directory = tmp_path_factory.mktemp("ray")
    models, settings = request.module.catalog(directory / "trace.jsonl")
    catalog = write_catalog(directory, *models, **settings)
    environment = getattr(request.module, "environment", lambda directory: {})(directory)
    before = descendants(os.getpid())
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)  # Ray's processes inherit it from ray.init
        try:
            yield start_serve(catalog, getattr(request.module, "ARGS", {}))
        finally:
            stop_serve(before)
