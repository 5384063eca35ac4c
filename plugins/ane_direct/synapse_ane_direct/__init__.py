"""Synapse's direct Apple Neural Engine transport (``ane-direct``, lane ``ane:0``).

The Neural Engine path runs only on macOS with Apple's private framework; it
refuses clearly anywhere else. A simulated device stands in for it in tests.
"""

from .options import AneOptions, parse_options

__version__ = "0.1.0"
__all__ = ["AneOptions", "__version__", "parse_options"]
