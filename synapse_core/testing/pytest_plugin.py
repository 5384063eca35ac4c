"""pytest fixtures shared by the core's tests and every plugin's.

Load it from a ``conftest.py`` with ``pytest_plugins = ["synapse_core.testing.pytest_plugin"]``
(or ``-p synapse_core.testing.pytest_plugin``): every ``@pytest.mark.anyio``
test then runs once on asyncio and once on trio.
"""

from __future__ import annotations

import pytest

BACKENDS = ("asyncio", "trio")


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Each async test on both anyio backends."""
    return str(request.param)
