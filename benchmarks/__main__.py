"""``python -m benchmarks [--quick] [--smoke] [--only GROUP] [--without SHORTCUT] [--check]``.

Runs every benchmark group, prints a table and writes the results file:
``benchmarks/results/latest.json`` for a full run of every group (the
committed reference), ``benchmarks/results/partial.json`` for any other run,
unless ``--output`` says otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from . import (
    composed,
    cpu,
    fairness,
    grants,
    http_cpu,
    http_serving,
    latency,
    machine,
    observation,
    outputs,
    report,
    scaling,
    shortcut_switches,
    shortcuts,
    soak,
    stall,
    workers,
)
from .harness import FULL, QUICK, SMOKE, Figure, Mode

Group = Callable[[Mode], list[Figure]]

# Spawn-heavy groups first, while the machine is quiet.
GROUPS: dict[str, Group] = {
    "workers": workers.measure,
    "grants": grants.measure,
    "latency": lambda mode: latency.measure(mode, "asyncio"),
    "latency_trio": lambda mode: latency.measure(mode, "trio"),
    "observation": observation.measure,
    "composed": composed.measure,
    "scaling": scaling.measure,
    "soak": soak.measure,
    "cpu": cpu.measure,
    "outputs": outputs.measure,
    "fairness": fairness.measure,
    "shortcuts": shortcuts.measure,
}
# synapse serve's figures, when the synapse-http plugin is installed.
if importlib.util.find_spec("synapse_http") is not None:
    GROUPS["http"] = lambda mode: http_serving.measure(mode) + http_cpu.measure(mode)
# /health under big bodies; says why it is skipped where it cannot run.
GROUPS["stall"] = stall.measure


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer repetitions (under 2 minutes)")
    size.add_argument("--full", action="store_true", help="the full run (the default)")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny run that only proves everything works"
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(GROUPS), help="run only this group (repeatable)"
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=shortcut_switches.SHORTCUTS,
        help="switch a speed shortcut off in the latency groups (repeatable)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="results file (default: results/latest.json for a full run of every group, "
        "else results/partial.json)",
    )
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 if a target is missed"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    mode = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.output is None:
        whole = mode is FULL and not args.only and not args.without
        args.output = report.LATEST if whole else report.PARTIAL
    shortcut_switches.WITHOUT.update(args.without)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.perf_counter()
    load_before = machine.load_average()
    cpu_before = machine.cpu_times()
    figures: list[Figure] = []
    for name in args.only or GROUPS:
        group_start = time.perf_counter()
        print(f"[{mode.name}] {name} ...", end=" ", flush=True, file=sys.stderr)
        figures.extend(GROUPS[name](mode))
        print(f"{time.perf_counter() - group_start:.1f}s", file=sys.stderr)
    duration = time.perf_counter() - started
    described = machine.describe()
    described["load_average"] = {"before": load_before, "after": machine.load_average()}
    described["steal_fraction"] = machine.steal_fraction(cpu_before, machine.cpu_times())
    described["shortcuts_off"] = sorted(shortcut_switches.WITHOUT)
    doc = report.results(figures, mode, described, created, duration)
    report.write(doc, args.output)
    print(report.table(figures))
    if args.markdown:
        print()
        print(report.markdown(figures))
    steal = described["steal_fraction"]
    stolen = "" if steal is None else f"; {steal:.1%} of CPU time stolen by the hypervisor"
    idle = described["cpu_idle"] or {}
    halts = "; idle CPUs halt without polling" if idle.get("guest_halt_poll_ns") == 0 else ""
    print(f"\n{mode.name} run: {duration:.1f}s{stolen}{halts}; results in {args.output}")
    missed = [f.key for f in figures if report.met(f, figures) is False]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
