"""A cpu catalog entry for a model given by ``--model`` (a folder or a hub id).

The entry is what a user would write: ``options.model_dir`` or
``options.hf``, the task read from the folder, the ceiling from the
folder's buckets; everything else is checked as any catalog entry is.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from synapse_core.plugin import ConfigError, ModelSource, ModelSpec, Task, Transport

#: a ceiling for a folder whose buckets cannot be read (the entry is then
#: shown unavailable with the folder's problem, so it is never served)
FALLBACK_CEILING = 512


def task_of(folder: Path) -> Task:
    """What the folder's model does (``synapse_models.folder.task_of``); a
    folder whose ``config.json`` cannot be read is a configuration error."""
    from synapse_models.errors import ModelFilesError
    from synapse_models.folder import task_of as folder_task

    try:
        return folder_task(folder)
    except ModelFilesError as exc:
        raise ConfigError(exc.path, [str(exc).removeprefix(f"{exc.path}: ")]) from None


def model_from_source(transport: Transport, source: ModelSource) -> ModelSpec:
    """The cpu entry serving ``source`` (see :meth:`Transport.model_from_source`)."""
    from synapse_models.errors import ModelFilesError

    from .options import CpuOptions

    if source.folder is not None:
        options = {"model_dir": str(source.folder)}
        folder = source.folder
    else:
        options = {"hf": str(source.hub_id)}
        try:
            folder = Path(str(CpuOptions(hf=source.hub_id).folder()))
        except ModelFilesError:
            raise ConfigError(
                f"--model {source.given}",
                [
                    f"no folder {source.given} here, and {source.given} is not in the local "
                    f"Hugging Face cache; download it with `synapse pull {source.given}`"
                ],
            ) from None
    spec = ModelSpec(
        name=source.name,
        task=task_of(folder),
        transport=transport.name,
        package=source.name,
        ceiling=FALLBACK_CEILING,
        options=options,
        description=f"--model {source.given}",
    )
    # The folder's own ceiling (its max_seq_length), so the catalog shows it
    # as it is rather than capped by an arbitrary number.
    buckets = transport.buckets(spec)
    return attrs.evolve(spec, ceiling=max(buckets)) if buckets else spec
