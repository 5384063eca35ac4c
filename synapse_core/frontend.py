"""The front-end API: what a plugin that puts a host behind a protocol (the
HTTP server of ``synapse serve``, a command line) uses besides the host API.

- Names in messages: :func:`shown` cuts a caller's name to
  :data:`SHOWN_CHARS` characters, so an error message stays readable.
- Bounds on tokenising: :func:`characters` counts a request's characters,
  :func:`bounded` refuses inputs past the model's bound before they are
  tokenised, and a request of :data:`OFFLOAD_CHARS` characters or more is
  worth tokenising off the event loop; :func:`give_back` returns freed memory
  to the system after a large request, and :func:`map_large_blocks` (called
  once at start) serves large blocks from their own mappings, so they can be.
- ASGI apps another plugin serves: a front end registers a factory under
  the entry-point group :data:`APPS_GROUP` (``synapse.apps``), and a plugin
  that serves it elsewhere (Ray Serve's replicas, say) finds it by name with
  :func:`app_factory`, without importing the plugin that provides it.
- A front end's own settings, worded as the catalog's errors are: a
  validator raises :class:`FieldInvalid` (:func:`positive` is one), and
  :func:`structuring_problems` turns a cattrs error into ``path: problem``
  lines for a :class:`~synapse_core.ConfigError`.
- Tracing calls: a front end sets a host's ``tracer`` to its own
  :class:`Tracer`, whose :class:`CallTrace` of each call is told the points
  the call passes (:mod:`synapse_core.tracing`); the default, :data:`NO_TRACER`,
  hands out :data:`NO_TRACE`, which records nothing. What a trace is told
  of is published here too: the call's :class:`Plan`, each exchange's
  :class:`Infer` request and its :class:`Output` or :class:`Failure` reply
  (:class:`Frame`), their :class:`Shape`, and a worker's :class:`Fault`.
- What a model's vectors may be cut to: :func:`matryoshka_sizes` of its
  catalog entry (``Host.embed(..., dimensions=N)``; :mod:`synapse_core.matryoshka`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

_EXPORTS = {
    "SHOWN_CHARS": "naming",
    "shown": "naming",
    "OFFLOAD_CHARS": "bounds",
    "bounded": "bounds",
    "characters": "bounds",
    "give_back": "bounds",
    "map_large_blocks": "bounds",
    "APPS_GROUP": "apps",
    "AppFactory": "apps",
    "ASGIApp": "apps",
    "app_factory": "apps",
    "FieldInvalid": "errors",
    "positive": "worker.options",
    "structuring_problems": "config",
    "CallTrace": "tracing",
    "NO_TRACE": "tracing",
    "NO_TRACER": "tracing",
    "Tracer": "tracing",
    # what a call trace is told of: the plan, each exchange's frames, a fault
    "Plan": "plan",
    "Fault": "errors",
    "Frame": "wire",
    "Infer": "wire",
    "Output": "wire",
    "Failure": "wire",
    "Shape": "wire",
    "matryoshka_sizes": "matryoshka",
}

__all__ = [
    "APPS_GROUP",
    "NO_TRACE",
    "NO_TRACER",
    "OFFLOAD_CHARS",
    "SHOWN_CHARS",
    "ASGIApp",
    "AppFactory",
    "CallTrace",
    "Failure",
    "Fault",
    "FieldInvalid",
    "Frame",
    "Infer",
    "Output",
    "Plan",
    "Shape",
    "Tracer",
    "app_factory",
    "bounded",
    "characters",
    "give_back",
    "map_large_blocks",
    "matryoshka_sizes",
    "positive",
    "shown",
    "structuring_problems",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
    from .apps import APPS_GROUP, AppFactory, ASGIApp, app_factory
    from .bounds import OFFLOAD_CHARS, bounded, characters, give_back, map_large_blocks
    from .config import structuring_problems
    from .errors import Fault, FieldInvalid
    from .matryoshka import matryoshka_sizes
    from .naming import SHOWN_CHARS, shown
    from .plan import Plan
    from .tracing import NO_TRACE, NO_TRACER, CallTrace, Tracer
    from .wire import Failure, Frame, Infer, Output, Shape
    from .worker.options import positive
