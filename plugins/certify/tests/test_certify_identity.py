"""Certified identity, approvals and vector-space identities."""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import pytest

import synapse_core
from synapse_certify import Approval, CertifiedIdentity, IdentityMismatch, VectorSpace
from synapse_certify import plugin as certify_plugin
from synapse_certify.identity import installed_identity, serving_plugins
from synapse_core import PluginHost
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

CHECKPOINT = hashlib.sha256(b"checkpoint").hexdigest()
PARTS: dict[str, Any] = {
    "core_version": "0.1.0",
    "plugins": {"synapse-ane-direct": "0.1.0"},
    "worker_implementation": "synapse-ane-direct-worker",
    "worker_version": "0.1.0",
    "checkpoint_sha256": CHECKPOINT,
    "conversion_policy": {"precision": "fp16", "layout": "nchw"},
    "os_build": "macOS 14.4 (23E214)",
}
CHANGED: dict[str, Any] = {
    "core_version": "0.1.1",
    "plugins": {"synapse-ane-direct": "0.1.1"},
    "worker_implementation": "other-worker",
    "worker_version": "0.2.0",
    "checkpoint_sha256": hashlib.sha256(b"other").hexdigest(),
    "conversion_policy": {"precision": "fp32", "layout": "nchw"},
    "os_build": "macOS 14.5 (23F79)",
}


def identity(**changes: Any) -> CertifiedIdentity:
    return CertifiedIdentity(**{**PARTS, **changes})


def test_digest_is_stable_and_order_independent() -> None:
    a = identity()
    b = identity(
        conversion_policy={"layout": "nchw", "precision": "fp16"},
        checkpoint_sha256=CHECKPOINT.upper(),
    )
    assert a == b and a.digest == b.digest
    assert len(a.digest) == 64 and a.digest == hashlib.sha256(a.canonical()).hexdigest()
    assert a.to_dict()["digest"] == a.digest


@pytest.mark.parametrize("part", sorted(CHANGED))
def test_every_part_changes_the_digest(part: str) -> None:
    assert identity(**{part: CHANGED[part]}).digest != identity().digest


def test_checkpoint_must_be_a_sha256() -> None:
    with pytest.raises(ValueError, match="64 hexadecimal digits"):
        identity(checkpoint_sha256="abc123")


def test_approval_is_bound_to_one_identity() -> None:
    approval = Approval.issue(identity(), "placement", approved_by="release review")
    approval.require(identity())
    approval.require(identity().digest)
    with pytest.raises(IdentityMismatch) as caught:
        approval.require(identity(os_build=CHANGED["os_build"]))
    assert caught.value.code == "identity-mismatch"
    assert caught.value.bound == identity().digest
    assert "approval of 'placement'" in str(caught.value)


def test_vector_space_is_bound_to_one_identity() -> None:
    space = VectorSpace.bind("mock:mock-minilm:d64:v1", identity())
    space.require(identity(), space="mock:mock-minilm:d64:v1")
    with pytest.raises(IdentityMismatch, match="vector space"):
        space.require(identity(checkpoint_sha256=CHANGED["checkpoint_sha256"]))
    with pytest.raises(IdentityMismatch, match="mock:other"):
        space.require(identity(), space="mock:other")


def test_only_serving_plugins_are_part_of_an_identity() -> None:
    transports = transport_plugin(InProcessFakeTransport("mock"))
    host = PluginHost([certify_plugin, transports])
    # A command-only plugin (synapse-certify itself) cannot change vectors.
    assert serving_plugins(host) == ((transports.__name__, "unknown"),)

    ident = installed_identity(
        checkpoint_sha256=CHECKPOINT,
        worker_implementation="synapse-mock-transport",
        worker_version="0.1.0",
        plugins=host,
        build="test-os",
    )
    assert ident.core_version == synapse_core.__version__
    assert ident.os_build == "test-os"
    assert attrs.evolve(ident, os_build="other-os").digest != ident.digest
