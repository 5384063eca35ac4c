"""Synapse hosts as a Ray Serve deployment.

``serve run synapse_ray:app catalog=catalog.toml`` runs one Synapse host per
replica, each serving the HTTP app of ``synapse serve``; a request that
names its model in the ``serve_multiplexed_model_id`` header goes to a
replica that already holds that model. See docs/scale-out.md.
"""

from __future__ import annotations

from .app import app

__all__ = ["app"]
