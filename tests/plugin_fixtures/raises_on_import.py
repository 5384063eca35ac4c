"""A plugin whose import fails, as one with a missing dependency would."""

from __future__ import annotations

raise RuntimeError("plugin fixture refuses to import")
