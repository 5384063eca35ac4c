"""Deprecated location of the worker kit: import from :mod:`synapse_core.plugin`."""

from .worker import *  # noqa: F403
from .worker import __all__ as __all__
