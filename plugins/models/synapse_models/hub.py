"""A CPU model named by its Hugging Face hub id (``options.hf``, optional
``options.revision``) instead of a folder: its folder is the model's
snapshot in the local hub cache, laid out as ``huggingface_hub`` lays it out
(``HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub``).

Nothing is downloaded while serving: a model missing from the cache is
unavailable, with a message naming ``synapse pull MODEL``, which downloads
it (with ``huggingface_hub``'s progress bars) when the user asks.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ModelFilesError


def _cache_dir() -> str | None:
    # Read at each call: huggingface_hub reads its environment once, at import.
    return os.environ.get("HF_HUB_CACHE") or None


def cached_folder(repo_id: str, revision: str | None = None) -> Path:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (default:
    ``main`` as last pulled). Never downloads."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo_id, revision=revision, cache_dir=_cache_dir(), local_files_only=True
        )
    except LocalEntryNotFoundError:
        at = f" at revision {revision!r}" if revision else ""
        raise ModelFilesError(
            f"hub:{repo_id}",
            f"{repo_id}{at} is not in the local Hugging Face cache; download it with "
            "`synapse pull MODEL` (MODEL: its name in the catalog)",
        ) from None
    return Path(folder)


def pull(repo_id: str, revision: str | None = None) -> Path:
    """Download ``repo_id`` at ``revision`` into the cache (files already
    there are kept); its snapshot folder."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, revision=revision, cache_dir=_cache_dir()))
