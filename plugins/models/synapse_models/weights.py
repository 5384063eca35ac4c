"""A checkpoint's tensors, read lazily from safetensors and taken by name.

Weights are taken out of the mapping as they are used (a file is then never
in memory twice), with or without the prefix a task head's checkpoint puts
before the encoder's names (``bert.``, ``roberta.``, ``model.``, ...).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .errors import ModelFilesError

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class LazyTensors(dict[str, Any]):
    """A safetensors file's tensors, each read when it is taken (``pop``)."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        try:
            self._file: Any = cast(Any, safe_open(str(path), framework="numpy"))
            names = list(self._file.keys())
        except Exception as exc:
            raise ModelFilesError(str(path), f"cannot read it as safetensors: {exc}") from None
        super().__init__(dict.fromkeys(names))

    def pop(self, key: str, *default: Any) -> Any:
        super().pop(key, *default)
        return self._file.get_tensor(key)

    def rows(self, key: str, indexes: Iterable[int]) -> Any:
        """Rows of the tensor ``key``, read alone and leaving it to be taken."""
        part = self._file.get_slice(key)
        return np.concatenate([part[i : i + 1] for i in indexes])


class Tensors:
    """Takes a checkpoint's tensors by the names a family knows them by.

    ``prefixes``: what a task head's checkpoint puts before the body's names;
    ``kind`` names the family in the error a missing tensor raises.
    """

    def __init__(
        self, tensors: dict[str, Any], source: str, kind: str, prefixes: Iterable[str] = ()
    ) -> None:
        self.tensors = tensors
        self.source = source
        self.kind = kind
        self.prefixes = ("", *prefixes)

    def has(self, name: str) -> bool:
        return any(prefix + name in self.tensors for prefix in self.prefixes)

    def get(self, name: str) -> F32:
        """The tensor ``name`` (with or without a prefix), as contiguous float32."""
        for prefix in self.prefixes:
            if prefix + name in self.tensors:
                return np.ascontiguousarray(self.tensors.pop(prefix + name), dtype=np.float32)
        raise ModelFilesError(
            self.source, f"tensor {name!r} is missing: not a {self.kind} checkpoint"
        )

    def rows(self, names: Iterable[str], indexes: Iterable[int]) -> F32:
        """Rows ``indexes`` of the first of ``names`` the checkpoint holds (with
        or without a prefix), as float32; the tensor is left to be taken (an
        LLM reranker reads two rows of the embedding table its body takes)."""
        names = tuple(names)
        for name in names:
            for prefix in self.prefixes:
                key = prefix + name
                if key in self.tensors:
                    found = self.tensors
                    rows = (
                        found.rows(key, indexes)
                        if isinstance(found, LazyTensors)
                        else np.asarray(found[key])[list(indexes)]
                    )
                    return np.ascontiguousarray(rows, dtype=np.float32)
        raise ModelFilesError(
            self.source,
            f"tensor {' or '.join(map(repr, names))} is missing: not a {self.kind} checkpoint",
        )

    def matrix(self, name: str) -> F32:
        """A torch ``Linear``'s weight ``name`` as (in, out): torch keeps (out, in)."""
        return np.ascontiguousarray(self.get(name).T)

    def linear(self, name: str) -> tuple[F32, F32]:
        """``name.weight`` as (in, out) and ``name.bias``."""
        return self.matrix(name + ".weight"), self.get(name + ".bias")


def header_names(path: Path) -> dict[str, Any]:
    """A safetensors file's header (tensor names to dtype, shape, offsets), read alone."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(size, 1 << 24)))
    except (OSError, ValueError, struct.error) as exc:
        raise ModelFilesError(str(path), f"is not a safetensors file: {exc!r}") from None
    if not isinstance(header, dict):
        raise ModelFilesError(str(path), "is not a safetensors file: its header is not a map")
    return header


def read_all(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a safetensors file, as read-only arrays over one memory map."""
    tensors = LazyTensors(path)
    return {name: tensors.pop(name) for name in list(tensors)}
