"""Conformance checks of a transport under the host: refusals start no
worker, a crash mid-call restarts one generation, retirement leaves no process."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import pytest

from ...errors import OutcomeUnknown, Refused
from ...host import Host
from ...transport import Launched, LaunchRequest
from .. import pid_exists
from .harness import TEXTS, host_for
from .subject import Subject, specs


class LifecycleChecks:
    """Refusals, faults and retirement."""

    async def test_refusals_start_no_worker(
        self, subject: Subject, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        entry = subject.model("embed")
        name = entry["name"]
        launched: list[str] = []
        launch = subject.transport.launch

        async def counting(request: LaunchRequest) -> Launched:
            launched.append(request.model.name)
            return await launch(request)

        monkeypatch.setattr(subject.transport, "launch", counting)
        (spec,) = specs(entry)
        # The transport may declare buckets before a worker starts: the
        # longest one then caps the ceiling, and is refused up front too.
        declared = getattr(subject.transport, "buckets", lambda spec: None)(spec)
        ceiling = min(spec.ceiling, max(declared)) if declared else spec.ceiling
        too_long = " ".join(f"w{i}" for i in range(ceiling + 1))
        calls: list[tuple[Callable[[Host], Awaitable[object]], str]] = [
            (lambda host: host.embed("no-such-model", ["x"]), "unknown-model"),
            (lambda host: host.rerank(name, "q", ["x"]), "wrong-task"),
            (lambda host: host.embed(name, ["fine", ""]), "empty-sequence"),
            (lambda host: host.embed(name, ["fine", too_long]), "over-ceiling"),
            # Token ids no model has: refused whatever the tokenizer says of its size.
            (lambda host: host.embed(name, ["fine", [-1]]), "invalid-token"),
            (lambda host: host.embed(name, ["fine", [2**31]]), "invalid-token"),
        ]
        async with host_for(subject) as host:
            for call, code in calls:
                with pytest.raises(Refused) as refused:
                    await call(host)
                assert refused.value.code == code
            assert launched == [], f"a refused call started a worker for {launched}"
            assert all(not lane.workers for lane in host.snapshot().lanes.values())

    async def test_crash_mid_call_is_outcome_unknown_then_next_generation(
        self, subject: Subject
    ) -> None:
        if not subject.faults:
            pytest.skip("the subject says its options have no fault knobs")
        entry = dict(subject.model("embed"))
        faults = {"crash_on_infer": 1, "only_generation": 1}
        entry["options"] = {**entry.get("options", {}), "faults": faults}
        async with host_for(subject, None, models=[entry]) as host:
            with pytest.raises(OutcomeUnknown):
                await host.embed(entry["name"], TEXTS)
            result = await host.embed(entry["name"], TEXTS)
            snap = host.snapshot().worker(entry["name"])
        assert len(result.vectors) == len(TEXTS)
        assert (snap.generation, snap.restarts) == (2, 1)

    async def test_retirement_leaves_no_process(self, subject: Subject) -> None:
        name = subject.model("embed")["name"]
        async with host_for(subject) as host:
            await host.embed(name, TEXTS)
            pid = host.snapshot().worker(name).pid
            assert pid is not None and pid != os.getpid()
            await host.retire(name)
            assert not pid_exists(pid), f"worker {pid} is still running after retire"
            snap = host.snapshot().worker(name)
            assert snap.state == "exited" and snap.pid is None
            lane = next(iter(host.snapshot().lanes.values()))
            assert lane.reserved == 0, "a retired worker's reservations are refunded"
