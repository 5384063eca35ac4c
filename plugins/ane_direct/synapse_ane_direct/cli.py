"""``synapse ane``: commands of the direct Neural Engine transport."""

from __future__ import annotations

from pathlib import Path

import click

from .selftest import BUCKETS, run_selftest


def make_group() -> click.Group:
    @click.group("ane")
    def ane() -> None:
        """The direct Apple Neural Engine transport (ane-direct)."""

    ane.add_command(selftest)
    return ane


def _buckets(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        buckets = tuple(sorted({int(part) for part in value.split(",")}))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give sizes like 32,64,128,256") from None
    if not buckets or any(not 0 < b <= 512 for b in buckets):
        raise click.BadParameter(f"{value!r}: each bucket must be within 1..512")
    return buckets


@click.command("selftest")
@click.option(
    "--simulated",
    is_flag=True,
    help="Run the whole flow with the simulated device (the MIL interpreter), not the engine.",
)
@click.option(
    "--texts",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many reference texts per bucket (default: every text that fits).",
)
@click.option(
    "--buckets",
    default=",".join(map(str, BUCKETS)),
    show_default=True,
    callback=_buckets,
    help="Comma-separated sequence buckets to compile.",
)
@click.option(
    "--runtime-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where lane locks live (default, as for a host: $XDG_RUNTIME_DIR/synapse, "
    "else /tmp/synapse-<uid>).",
)
def selftest(
    simulated: bool, texts: int | None, buckets: tuple[int, ...], runtime_dir: Path | None
) -> None:
    """Compile each bucket on the Neural Engine, run the reference texts, compare with the CPU lane.

    Run it as `env -u TMPDIR synapse ane selftest` on an Apple-silicon Mac.
    Exit 0: every cosine >= 0.999; 1: a lower cosine or a failed worker;
    2: it cannot run on this machine (the reason is printed).
    """
    status = run_selftest(
        simulated=simulated, texts=texts, buckets=buckets, runtime_dir=runtime_dir, echo=click.echo
    )
    raise click.exceptions.Exit(status)
