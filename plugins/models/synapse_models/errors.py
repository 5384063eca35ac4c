"""The model home's typed error: it names the file at fault and what to do."""

from __future__ import annotations

from synapse_core.plugin import SynapseError


class ModelFilesError(SynapseError):
    """A model folder is missing a file, or a file is not what it must be.

    ``path`` names the file (or folder) at fault; the message says what to do.
    """

    code = "model-files"

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")
