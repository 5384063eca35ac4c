"""Synapse's portable mock transport: deterministic workers with fault knobs."""

from .options import Faults, MockOptions, parse_options

__version__ = "0.1.0"
__all__ = ["Faults", "MockOptions", "__version__", "parse_options"]
