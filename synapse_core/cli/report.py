"""How the command line reports failures: one line on stderr and an exit status.

0 is success; 2 is a usage error or a refusal (the caller can fix the call:
``Refused``, ``ConfigError``, bad options or input files); 1 is everything
else. ``SYNAPSE_DEBUG=1`` adds the traceback for when the line is not enough.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from ..errors import ConfigError, Refused, SynapseError

PROG = "synapse"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
ENV_DEBUG = "SYNAPSE_DEBUG"


class InputError(click.ClickException):
    """An input file the user gave is unusable (names the file and line)."""

    exit_code = EXIT_USAGE


def debugging() -> bool:
    return os.environ.get(ENV_DEBUG, "") not in ("", "0")


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def unwrap(exc: BaseException) -> BaseException:
    """The single error inside (nested) exception groups, if there is one.

    Task groups wrap errors raised in their body; the user cares about the
    error, not the group it travelled in.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit status and message (without the ``synapse:`` prefix) for ``exc``."""
    exc = unwrap(exc)
    if isinstance(exc, Refused):
        return EXIT_USAGE, f"refused ({exc.code}): {exc.message}"
    if isinstance(exc, ConfigError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, SynapseError):
        return EXIT_FAILED, f"{exc.code}: {exc}"
    if isinstance(exc, click.UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else PROG
        return EXIT_USAGE, f"usage error: {exc.format_message()} (see '{where} --help')"
    if isinstance(exc, click.ClickException):
        return exc.exit_code, exc.format_message()
    if isinstance(exc, click.Abort | KeyboardInterrupt):
        return EXIT_FAILED, "aborted"
    if isinstance(exc, BaseExceptionGroup):
        parts = "; ".join(describe(e)[1] for e in exc.exceptions)
        return EXIT_FAILED, f"{len(exc.exceptions)} errors: {parts}"
    hint = "" if debugging() else f" (set {ENV_DEBUG}=1 for a traceback)"
    return EXIT_FAILED, f"internal error: {type(exc).__name__}: {exc}{hint}"


def fail(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr (plus a traceback when debugging)."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        exc.show()  # a bare ``synapse`` (or group) asks for help, not an error line
        return EXIT_USAGE
    status, message = describe(exc)
    if debugging():
        traceback.print_exception(exc, file=sys.stderr)
    click.echo(f"{PROG}: {one_line(message)}", err=True)
    return status


def warn(message: str) -> None:
    click.echo(f"{PROG}: warning: {one_line(message)}", err=True)
