"""Synapse's model home: everything about a model that is not about a device.

Reading a model folder (``config.json``, sentence-transformers modules,
pooling, Dense, Normalize, prompts, ``max_seq_length``), the hub cache, the
weights and the tokenizer; one module per architecture family
(:mod:`synapse_models.families`), with the poolings and heads they share;
and the forward pass in numpy or as an ONNX graph, run by onnxruntime on the
execution providers a lane gives. Every lane (the CPU lane, the Neural
Engine's self-test, a GPU lane) loads models through :func:`load`.

A library, not a plugin: it registers no entry point. docs/models.md is the
guide for adding a family.
"""

from __future__ import annotations

from .arranged import Weights
from .errors import ModelFilesError
from .families import FAMILIES, Family, family_for
from .folder import Layout, read_layout
from .model import RUNTIMES, Model, Runtime, load

__version__ = "0.1.0"

__all__ = [
    "FAMILIES",
    "RUNTIMES",
    "Family",
    "Layout",
    "Model",
    "ModelFilesError",
    "Runtime",
    "Weights",
    "family_for",
    "load",
    "read_layout",
]
