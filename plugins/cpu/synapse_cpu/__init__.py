"""Synapse's generic CPU lane: a real sentence-embedding model (all-MiniLM-L6-v2
by default) in numpy or onnxruntime worker processes, with no torch."""

__version__ = "0.1.0"
__all__ = ["__version__"]
