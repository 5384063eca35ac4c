"""Certified identity: what a certification, an approval and a vector space belong to.

The identity is a SHA-256 digest over everything that can change the vectors
a worker produces or where its shapes are placed: the core version, the
versions of the serving plugins, the worker implementation and version, the
model checkpoint's hash, the conversion policy and the OS build. Change any
of them and it is a different identity; nothing issued for the old one
(approval, vector-space identity) carries over.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

import synapse_core
from synapse_core import PluginHost

from .errors import IdentityMismatch

SCHEME = "synapse-certified-identity/1"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _checkpoint(value: str) -> str:
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise ValueError(f"checkpoint hash must be 64 hexadecimal digits (SHA-256), got {value!r}")
    return value


def _pairs(items: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    pairs = items.items() if isinstance(items, Mapping) else items
    return tuple(sorted((str(k), str(v)) for k, v in pairs))


@attrs.frozen
class CertifiedIdentity:
    """The parts of an identity; :attr:`digest` is the identity itself."""

    core_version: str
    #: (distribution, version) of each serving plugin, sorted
    plugins: tuple[tuple[str, str], ...] = attrs.field(converter=_pairs)
    worker_implementation: str
    worker_version: str
    checkpoint_sha256: str = attrs.field(converter=_checkpoint)
    #: conversion options (key, value), sorted
    conversion_policy: tuple[tuple[str, str], ...] = attrs.field(converter=_pairs)
    os_build: str

    def canonical(self) -> bytes:
        """The exact bytes the digest is taken over (sorted keys, no spaces)."""
        body: dict[str, Any] = {
            "scheme": SCHEME,
            "core": self.core_version,
            "plugins": [list(p) for p in self.plugins],
            "worker": [self.worker_implementation, self.worker_version],
            "checkpoint_sha256": self.checkpoint_sha256,
            "conversion_policy": [list(p) for p in self.conversion_policy],
            "os_build": self.os_build,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, **json.loads(self.canonical())}


def os_build() -> str:
    """This machine's OS build: the macOS build number (``23E224``), elsewhere
    the system, release and kernel version."""
    if platform.system() == "Darwin":
        try:
            build = subprocess.run(
                ["sw_vers", "-buildVersion"], capture_output=True, text=True, check=True, timeout=5
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            build = ""
        return f"macOS {platform.mac_ver()[0]} ({build or 'unknown build'})"
    return f"{platform.system()} {platform.release()} {platform.version()}"


def _digest_of(identity: CertifiedIdentity | str) -> str:
    return identity.digest if isinstance(identity, CertifiedIdentity) else identity


@attrs.frozen
class Approval:
    """A sign-off (``subject``: what was approved, e.g. "placement") bound to one identity."""

    identity: str
    subject: str
    approved_by: str = ""

    @classmethod
    def issue(cls, identity: CertifiedIdentity, subject: str, approved_by: str = "") -> Approval:
        return cls(identity.digest, subject, approved_by)

    def require(self, current: CertifiedIdentity | str) -> None:
        """Raise :class:`IdentityMismatch` unless ``current`` is the approved identity."""
        digest = _digest_of(current)
        if digest != self.identity:
            raise IdentityMismatch(f"approval of {self.subject!r}", self.identity, digest)


@attrs.frozen
class VectorSpace:
    """A vector-space identity (``EmbedResult.identity``) bound to the identity
    that certified it: vectors from one space are comparable only under it."""

    space: str
    identity: str

    @classmethod
    def bind(cls, space: str, identity: CertifiedIdentity) -> VectorSpace:
        return cls(space, identity.digest)

    def require(self, current: CertifiedIdentity | str, space: str | None = None) -> None:
        """Raise :class:`IdentityMismatch` unless ``current`` is the bound identity
        and, when given, ``space`` is this vector space."""
        digest = _digest_of(current)
        if digest != self.identity:
            raise IdentityMismatch(f"vector space {self.space!r}", self.identity, digest)
        if space is not None and space != self.space:
            raise IdentityMismatch("these vectors", self.space, space, kind="vector space")


#: Hooks that cannot change vectors or placement; plugins implementing only
#: these (such as synapse-certify itself) are not part of an identity.
NON_SERVING_HOOKS = frozenset({"synapse_register_commands"})


def serving_plugins(host: PluginHost) -> tuple[tuple[str, str], ...]:
    """(distribution, version) of every loaded plugin that takes part in serving."""
    return _pairs(
        (info.distribution or info.name, info.version or "unknown")
        for info in host.infos
        if not info.error and set(info.hooks) - NON_SERVING_HOOKS
    )


def installed_identity(
    *,
    checkpoint_sha256: str,
    worker_implementation: str,
    worker_version: str,
    conversion_policy: Mapping[str, str] | None = None,
    plugins: PluginHost | None = None,
    build: str | None = None,
) -> CertifiedIdentity:
    """The identity of this installation (its core, its serving plugins, this OS build)."""
    host = plugins if plugins is not None else PluginHost(load_entry_points=True)
    return CertifiedIdentity(
        core_version=synapse_core.__version__,
        plugins=serving_plugins(host),
        worker_implementation=worker_implementation,
        worker_version=worker_version,
        checkpoint_sha256=checkpoint_sha256,
        conversion_policy=conversion_policy or {},
        os_build=build if build is not None else os_build(),
    )
