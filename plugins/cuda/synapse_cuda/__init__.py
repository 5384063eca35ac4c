"""Synapse's CUDA lane: every model family of :mod:`synapse_models` on NVIDIA
GPUs (lanes ``cuda:0``, ``cuda:1``, ...) through onnxruntime's CUDA execution
provider, in float16 by default, charged in GPU memory (MiB)."""

__version__ = "0.1.0"
__all__ = ["__version__"]
