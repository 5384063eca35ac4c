"""The worker half of ``synapse ane selftest``: ``python -m synapse_ane_direct.selftest_worker``.

Started by :mod:`.selftest` as a host starts a worker: the lane lock's
descriptor inherited, ``TMPDIR`` removed. It opens the device, compiles each
bucket's program, embeds the reference texts that fit, and prints one JSON
object on stdout (compile times, latencies, vectors). Everything else goes to
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from synapse_core.plugin import Shape

from .device import DeviceUnavailable
from .lanelock import holds_lane
from .programs import ProgramDevice
from .transport import ENV_LANE_FD, ENV_LANE_LOCK

EXIT_UNAVAILABLE = 3


def lane_lock_inherited(env: Mapping[str, str]) -> bool:
    fd, path = env.get(ENV_LANE_FD, ""), env.get(ENV_LANE_LOCK, "")
    return fd.isdigit() and bool(path) and holds_lane(int(fd), path)


def pick(lengths: Sequence[int], bucket: int, limit: int | None) -> list[int]:
    """Indices of the texts that fit ``bucket``, longest first, at most ``limit``."""
    fitting = sorted(
        (i for i, n in enumerate(lengths) if n <= bucket), key=lambda i: (-lengths[i], i)
    )
    return fitting if limit is None else fitting[:limit]


def open_device(kind: str, lane_locked: bool) -> ProgramDevice:
    from .model_files import load_minilm

    if kind == "simulated":
        from .programs import simulated_program_device

        return simulated_program_device(load_minilm(), 384)
    from .hardware import HardwareDevice

    return HardwareDevice(384, lane_locked=lane_locked)


def run(spec: Mapping[str, Any], env: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
    from .model_files import load_tokenizer
    from .selftest import reference_items

    facts: dict[str, Any] = {
        "tmpdir_set": "TMPDIR" in env,
        "lane_lock_inherited": lane_lock_inherited(env),
    }
    try:
        device = open_device(spec["device"], facts["lane_lock_inherited"])
        tokenizer = load_tokenizer(device.model.directory)
    except DeviceUnavailable as exc:
        return EXIT_UNAVAILABLE, {**facts, "error": str(exc)}
    # positions: the special tokens included, as the program sees them
    ids = [device.model.positions(tokenizer.encode(item["text"])) for item in reference_items()]
    buckets = []
    try:
        for bucket in spec["buckets"]:
            start = time.perf_counter()
            device.compile(Shape(bucket, 1))
            compile_s = time.perf_counter() - start
            latencies, vectors = [], {}
            for i in pick([len(x) for x in ids], bucket, spec.get("texts")):
                start = time.perf_counter()
                vector = device.embed(bucket, ids[i])
                latencies.append((time.perf_counter() - start) * 1000)
                vectors[str(i)] = vector.tolist()
            buckets.append(
                {
                    "bucket": bucket,
                    "compile_s": compile_s,
                    "latency_ms": latencies,
                    "vectors": vectors,
                }
            )
    except DeviceUnavailable as exc:
        return EXIT_UNAVAILABLE, {**facts, "error": str(exc), "buckets": buckets}
    finally:
        device.close()
    return 0, {
        **facts,
        "device": device.kind,
        "identity": device.identity,
        "ids": ids,
        "buckets": buckets,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="synapse_ane_direct.selftest_worker")
    parser.add_argument("--spec", required=True, help="JSON: device, buckets, texts")
    args = parser.parse_args(argv)
    status, result = run(json.loads(args.spec), os.environ)
    sys.stdout.write(json.dumps(result) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
