"""The ``synapse`` command: built-in commands plus those plugins add.

Plugins are collected once per invocation (honouring ``SYNAPSE_PLUGINS``);
their ``synapse_register_commands`` hooks run before arguments are parsed, so
their commands appear in ``synapse --help``. A plugin that fails there is
reported as a warning and the rest of the command line still works.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from .. import __version__
from ..plugins import PluginHost
from .classify import classify_command
from .commands import BUILTIN, AppState
from .report import EXIT_FAILED, EXIT_OK, PROG, fail, warn

LoadPlugins = Callable[[], PluginHost]


def installed_plugins() -> PluginHost:
    """The plugins installed as ``synapse`` entry points (see ``SYNAPSE_PLUGINS``)."""
    return PluginHost(load_entry_points=True)


class SynapseGroup(click.Group):
    """A click group that loads plugins first and reports errors in one line."""

    load_plugins: LoadPlugins = staticmethod(installed_plugins)
    _builtin: dict[str, click.Command] | None = None

    def prepare(self) -> PluginHost:
        """Load plugins and let them add their commands (to this invocation only)."""
        plugins = self.load_plugins()
        if self._builtin is None:
            self._builtin = dict(self.commands)
        self.commands = dict(self._builtin)
        plugins.register_commands(self)
        for name, command in self._builtin.items():
            if self.commands.get(name) is not command:
                self.commands[name] = command
                plugins.problems.append(f"a plugin replaced the built-in command {name!r}; ignored")
        return plugins

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        status = self.run(args, prog_name or PROG, complete_var, **extra)
        if standalone_mode:
            sys.exit(status)
        return status

    def run(
        self, args: Sequence[str] | None, prog_name: str, complete_var: str | None, **extra: Any
    ) -> int:
        """Parse ``args`` and run the command; return the exit status."""
        try:
            state = AppState(self.prepare())
            rv = super().main(
                args, prog_name, complete_var, standalone_mode=False, obj=state, **extra
            )
        except SystemExit:
            raise
        except BrokenPipeError:
            # The reader went away (``synapse catalog | head``): nothing to say.
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # silence the flush at exit
            return EXIT_FAILED
        except BaseException as exc:
            return fail(exc)
        return rv if isinstance(rv, int) else EXIT_OK


def _start(ctx: click.Context) -> None:
    """Serve embedding and rerank models in out-of-process workers."""
    state = ctx.find_object(AppState)
    # ``synapse plugins`` lists problems itself; elsewhere a broken plugin is
    # worth one warning per problem, since its transport or commands are missing.
    if state is not None and ctx.invoked_subcommand != "plugins":
        state.plugins.transports()  # its problems too: a registration that failed
        for problem in state.plugins.problems:
            warn(f"{problem} (see '{PROG} plugins')")


def make_cli(load_plugins: LoadPlugins | None = None) -> SynapseGroup:
    """A fresh ``synapse`` group; ``load_plugins`` replaces entry-point loading (tests)."""
    group = click.group(
        name=PROG,
        cls=SynapseGroup,
        context_settings={"help_option_names": ["-h", "--help"]},
    )(click.version_option(__version__, prog_name=PROG)(click.pass_context(_start)))
    if load_plugins is not None:
        group.load_plugins = load_plugins
    for command in (*BUILTIN, classify_command):
        group.add_command(command)
    return group


def main() -> None:
    """Console-script entry point (``synapse``)."""
    make_cli().main(prog_name=PROG)
