"""A worker process's start: private frame pipes, the host watch, then author code.

The host starts ``python -m synapse_core.worker TARGET --spec JSON`` (see
:func:`synapse_core.process.spawn_worker`). Before any author code runs,
module imports included, the frame pipes move to private descriptors and
descriptor 1 is pointed at stderr: a ``print``, or a C library writing to
fd 1, then lands in the host's log instead of corrupting the channel, and
only the kit writes frames. Descriptor 0 reads ``/dev/null``.

``TARGET`` is ``module:attribute`` (a :class:`~.model.ModelWorker` subclass,
or a function from :class:`~synapse_core.wire.LaunchSpec` to a
:class:`~.loop.WorkerLogic`) or a bare module name, run as ``__main__`` (its
own ``worker_main`` call then finds the pipes already moved).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import BinaryIO

from ..wire import LaunchSpec
from .lifeline import watch_host
from .loop import WorkerLogic, serve_pipes, writer
from .model import ModelWorker, build_logic

Target = type[ModelWorker] | Callable[[LaunchSpec], WorkerLogic]

_pipes: tuple[BinaryIO, BinaryIO] | None = None
_watching = False


def take_pipes() -> tuple[BinaryIO, BinaryIO]:
    """The frame pipes (once: stdin and stdout as this process started).

    Moves them to private descriptors, points fd 1 at stderr and fd 0 at
    ``/dev/null``, and makes ``sys.stdout`` write to stderr.
    """
    global _pipes
    if _pipes is None:
        sys.stdout.flush()
        frames_in = os.fdopen(os.dup(0), "rb", buffering=0)
        frames_out = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = sys.stderr
        _pipes = (frames_in, frames_out)
    return _pipes


def _spec(prog: str, argv: Sequence[str] | None) -> LaunchSpec | int:
    import argparse

    import msgspec

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--spec", required=True, help="launch spec as JSON (set by the host)")
    args = parser.parse_args(argv)
    try:
        return msgspec.json.decode(args.spec, type=LaunchSpec)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        print(f"{prog}: bad launch spec: {exc}", file=sys.stderr)
        return 2


def _watch(spec: LaunchSpec) -> None:
    global _watching
    if not _watching:
        _watching = True
        watch_host(spec.host_pid)


def worker_main(
    target: Target, argv: Sequence[str] | None = None, *, prog: str | None = None
) -> int:
    """The ``main`` of a worker module: read ``--spec``, build, serve; the exit status.

    ``target`` is a :class:`~.model.ModelWorker` subclass (or a function
    building a :class:`~.loop.WorkerLogic`). A ``ValueError`` or
    ``ConfigError`` while building (bad options) exits 2 with the message
    on stderr.
    """
    take_pipes()
    name = prog or str(getattr(target, "__module__", "worker"))
    spec = _spec(name, argv)
    if isinstance(spec, int):
        return spec
    return _serve(target, spec, name)


def _serve(target: Target, spec: LaunchSpec, prog: str) -> int:
    from ..errors import SynapseError

    _watch(spec)
    logic: WorkerLogic
    frames_in, frames_out = take_pipes()
    try:
        if isinstance(target, type) and issubclass(target, ModelWorker):
            logic = build_logic(target, spec, notify=writer(frames_out))
        else:
            assert not isinstance(target, type)
            logic = target(spec)
    except (SynapseError, ValueError) as exc:
        print(f"{prog}: cannot start: {exc}", file=sys.stderr)
        return 2
    status = serve_pipes(logic, frames_in, frames_out)
    # The host closed the channel without a shutdown frame: release the device
    # now. (A worker that ends itself, with SystemExit, has released it.)
    close = getattr(logic, "close", None)
    if close is not None:
        close()
    return status


def resolve(target: str) -> Target:
    """``module:attribute`` to the object it names."""
    module, _, attribute = target.partition(":")
    found: Target = getattr(importlib.import_module(module), attribute)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m synapse_core.worker TARGET --spec JSON``."""
    take_pipes()
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print(
            "usage: python -m synapse_core.worker MODULE[:ATTRIBUTE] --spec JSON", file=sys.stderr
        )
        return 2
    target, rest = args[0], args[1:]
    spec = _spec(target, rest)
    if isinstance(spec, int):
        return spec
    _watch(spec)  # before any author code runs, imports included
    if ":" in target:
        return _serve(resolve(target), spec, target)
    import runpy

    sys.argv = [target, *rest]
    try:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
