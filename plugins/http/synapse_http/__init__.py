"""synapse-http: ``synapse serve``, Synapse's HTTP face.

The ASGI app is built by :func:`create_app` (no server, no signals), so any
ASGI server or framework that mounts ASGI apps can host it;
:mod:`synapse_http.server` runs it under uvicorn or hypercorn.
"""

from __future__ import annotations

from .app import create_app
from .settings import VERSION, ServeSettings

__version__ = VERSION
__all__ = ["ServeSettings", "__version__", "create_app"]
