"""Plugin discovery and a typed facade over the pluggy hooks.

Entry points are loaded one at a time inside ``try`` so one broken plugin is
reported by name instead of taking the host down (pluggy's own
``load_setuptools_entrypoints`` lets import errors escape).
"""

from __future__ import annotations

import importlib.metadata as md
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from . import defaults, hookspecs
from .errors import PluginError
from .transport import Availability, Transport

if TYPE_CHECKING:
    import click

    from .config import ModelSpec
    from .observation import Event
    from .residency.policy import AdmissionRequest, Decision, LaneView
    from .wire import Shape

ENTRY_POINT_GROUP = "synapse"
ENV_SELECT = "SYNAPSE_PLUGINS"
#: groups an author may put a plugin in by mistake (lower-cased, ``-`` as ``_``);
#: ``synapse.apps`` is a group of its own, read elsewhere
_NEAR_GROUPS = frozenset(
    f"{ENTRY_POINT_GROUP}{suffix}"
    for suffix in ("", "_core", "_plugins", ".plugins", ".plugin", ".transports", ".transport")
)


def _fitting(bucket: Any, length: int, buckets: Sequence[int]) -> int:
    """``bucket`` if the bucket hook chose one of ``buckets`` that fits ``length``."""
    if bucket not in buckets or bucket < length:
        raise PluginError(
            f"synapse_select_bucket chose {bucket!r} for length {length}; "
            f"expected one of {list(buckets)} that fits"
        )
    return int(bucket)


def _misplaced(allowed: set[str] | None, found: set[str]) -> list[str]:
    """Entry points that look meant for Synapse but sit in another group
    (``synapse.transports``, say), so they were never loaded: those of a
    group in :data:`_NEAR_GROUPS`, and those named in ``SYNAPSE_PLUGINS`` in
    any other ``synapse``-like group (not ``console_scripts``: a plugin's
    name may well be some other tool's too)."""
    misplaced: dict[tuple[str, str, str], str] = {}  # editable installs list one twice
    for dist in md.distributions():
        for ep in dist.entry_points:
            group = ep.group.lower().replace("-", "_")
            if ep.group == ENTRY_POINT_GROUP or ep.name in found:
                continue
            named = allowed is not None and ep.name in allowed
            if group in _NEAR_GROUPS or (named and group.startswith(ENTRY_POINT_GROUP)):
                misplaced[(ep.name, ep.value, ep.group)] = (
                    f"entry point {ep.name!r} ({ep.value}) is in group {ep.group!r}, not "
                    f"{ENTRY_POINT_GROUP!r}, the group Synapse loads plugins from"
                )
    return list(misplaced.values())


def _not_a_transport(registered: object) -> str:
    """Why what a plugin registered cannot serve as a transport, or ``""``."""
    if isinstance(registered, type) and issubclass(registered, Transport):
        name = registered.__name__
        return f"registered the class {name}, not an instance: register({name}())"
    if not isinstance(registered, Transport):
        return f"registered {registered!r:.80}, which is not a synapse_core.plugin.Transport"
    if not isinstance(registered.name, str) or not registered.name.strip():
        return f"{type(registered).__name__} has no name: set its class attribute name"
    return ""


@attrs.define
class PluginInfo:
    """What ``synapse plugins`` shows about one plugin."""

    name: str
    distribution: str = ""
    version: str = ""
    hooks: list[str] = attrs.field(factory=list)
    error: str = ""


@attrs.define
class TransportInfo:
    transport: Transport
    plugin: str
    availability: Availability


def selected_names(env: dict[str, str] | os._Environ[str] | None = None) -> set[str] | None:
    """Entry-point names allowed by ``SYNAPSE_PLUGINS`` (``None``: all)."""
    value = (os.environ if env is None else env).get(ENV_SELECT)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


class PluginHost:
    """The plugin manager plus typed calls; the rest of Synapse uses only this."""

    def __init__(self, plugins: Iterable[object] = (), *, load_entry_points: bool = False) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.register(defaults, name="synapse-defaults")
        self.infos: list[PluginInfo] = []
        self.problems: list[str] = []
        if load_entry_points:
            self._load_entry_points()
        for plugin in plugins:
            self.add(plugin)
        self._transports: dict[str, TransportInfo] | None = None

    # -- collection --------------------------------------------------------

    def add(self, plugin: object, name: str | None = None, info: PluginInfo | None = None) -> None:
        """Register ``plugin``; an invalid one is recorded, not raised."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        info = info or PluginInfo(name)
        try:
            self.pm.register(plugin, name=name)
        except (pluggy.PluginValidationError, ValueError) as exc:
            info.error = f"invalid hook implementation: {exc}"
        else:
            unknown = self._unknown_hooks(plugin)
            if unknown:
                self.pm.unregister(plugin)
                info.error = "unknown hooks (misspelled?): " + ", ".join(unknown)
            else:
                info.hooks = sorted(
                    impl_name
                    for impl_name, caller in vars(self.pm.hook).items()
                    if isinstance(caller, pluggy.HookCaller)
                    and any(i.plugin is plugin for i in caller.get_hookimpls())
                )
                self.problems.extend(f"plugin {name!r}: {p}" for p in self._unmarked(plugin))
        if info.error:
            self.problems.append(f"plugin {name!r}: {info.error}")
        self.infos.append(info)
        self._transports = None

    def _unmarked(self, plugin: object) -> list[str]:
        """Functions named as hooks but not marked as implementations: pluggy
        passes over them without a word, and the plugin would do nothing."""
        return [
            f"{attr} is not marked with @hookimpl (synapse_core.plugin.hookimpl), "
            "so it is never called"
            for attr in dir(plugin)
            if attr.startswith(f"{hookspecs.PROJECT}_")
            and hasattr(self.pm.hook, attr)
            and callable(getattr(plugin, attr, None))
            and self.pm.parse_hookimpl_opts(plugin, attr) is None
        ]

    def _unknown_hooks(self, plugin: object) -> list[str]:
        unknown = []
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.spec is None:
                unknown.append(caller.name)
        return unknown

    def _load_entry_points(self) -> None:
        allowed = selected_names()
        seen: set[str] = set()
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            # Editable installs can list an entry point twice.
            if ep.name in seen or (allowed is not None and ep.name not in allowed):
                continue
            seen.add(ep.name)
            dist = getattr(ep, "dist", None)
            info = PluginInfo(
                ep.name,
                distribution=dist.name if dist else "",
                version=dist.version if dist else "",
            )
            try:
                plugin = ep.load()
            except Exception as exc:  # any import-time failure of a plugin
                info.error = f"failed to import {ep.value}: {type(exc).__name__}: {exc}"
                self.problems.append(f"plugin {ep.name!r}: {info.error}")
                self.infos.append(info)
                continue
            self.add(plugin, name=ep.name, info=info)
        self.problems.extend(_misplaced(allowed, seen))

    def _each_impl(
        self, hook_name: str, before: Callable[[], None] = lambda: None, **kwargs: Any
    ) -> Iterable[tuple[str, object]]:
        """Call each plugin's implementation of a hook on its own, isolating
        failures; ``before`` runs before each call.

        Each call goes through pluggy's hook caller for that plugin alone, so
        wrappers (``wrapper=True`` or ``hookwrapper=True``) of every plugin
        wrap it, as they would a call of the whole hook.
        """
        caller: pluggy.HookCaller = getattr(self.pm.hook, hook_name)
        plain = [i for i in caller.get_hookimpls() if not (i.wrapper or i.hookwrapper)]
        for impl in reversed(plain):  # pluggy's order: the latest registered first
            plugin_name = self.pm.get_name(impl.plugin) or repr(impl.plugin)
            others = [i.plugin for i in plain if i.plugin is not impl.plugin]
            before()
            try:
                result = self.pm.subset_hook_caller(hook_name, others)(**kwargs)
            except Exception as exc:
                self.problems.append(f"plugin {plugin_name!r}: {hook_name} failed: {exc!r}")
                continue
            yield plugin_name, result

    # -- transports ----------------------------------------------------------

    def transports(self) -> dict[str, TransportInfo]:
        """Every registered transport by name, with its availability (cached)."""
        if self._transports is None:
            found: dict[str, TransportInfo] = {}
            for plugin_name, transports in self._collect("synapse_register_transports"):
                for transport in transports:
                    if problem := _not_a_transport(transport):
                        self.problems.append(f"plugin {plugin_name!r}: {problem}; ignored")
                        continue
                    if transport.name in found:
                        self.problems.append(
                            f"plugin {plugin_name!r}: transport {transport.name!r} is already "
                            f"provided by {found[transport.name].plugin!r}; ignored"
                        )
                        continue
                    if not transport.worker and type(transport).launch is Transport.launch:
                        self.problems.append(
                            f"plugin {plugin_name!r}: transport {transport.name!r} sets no "
                            "worker and does not override launch: its models cannot start"
                        )
                    found[transport.name] = TransportInfo(
                        transport, plugin_name, self._availability(transport)
                    )
            self._transports = found
        return self._transports

    def _collect(self, hook_name: str) -> Iterable[tuple[str, list[Any]]]:
        """Call a ``register``-style hook per plugin; yield what each registered."""
        bag: list[Any] = []
        # Cleared before each plugin: what one registered before it raised is dropped.
        for plugin_name, returned in self._each_impl(hook_name, bag.clear, register=bag.append):
            if isinstance(returned, list) and returned:  # pluggy's non-None results
                self.problems.append(
                    f"plugin {plugin_name!r}: {hook_name} returned {returned[0]!r:.200}; "
                    "call register(...) with each instead (what a hook returns is not registered)"
                )
            yield plugin_name, list(bag)

    def _availability(self, transport: Transport) -> Availability:
        try:
            availability: object = transport.availability()  # a plugin's: checked
        except Exception as exc:
            return Availability.no(f"availability probe failed: {exc!r}")
        if not isinstance(availability, Availability):
            return Availability.no(
                f"availability() returned {availability!r:.80}, not an Availability "
                "(Availability.yes() or Availability.no(reason))"
            )
        return availability

    def transport(self, name: str) -> TransportInfo | None:
        return self.transports().get(name)

    # -- residency policy, buckets, observation, commands ----------------------

    def admission_cost(
        self, model: ModelSpec, shape: Shape, lane: LaneView, worker_id: str = ""
    ) -> int:
        cost = self.pm.hook.synapse_admission_cost(
            model=model, shape=shape, lane=lane, worker_id=worker_id
        )
        if not isinstance(cost, int) or cost < 0:
            raise PluginError(f"synapse_admission_cost returned {cost!r}; expected an int >= 0")
        return cost

    def lane_full(self, request: AdmissionRequest, lane: LaneView) -> Decision:
        decision: Decision = self.pm.hook.synapse_lane_full(request=request, lane=lane)
        return decision

    def bucket_selector(self, buckets: Sequence[int], model: ModelSpec) -> Callable[[int], int]:
        """``select_bucket`` for one worker's buckets and model: each choice
        asked through pluggy's hook caller, so every implementation and
        wrapper registered at the time of the choice takes part."""
        return lambda length: self.select_bucket(length, buckets, model)

    def select_bucket(self, length: int, buckets: Sequence[int], model: ModelSpec) -> int:
        bucket = self.pm.hook.synapse_select_bucket(length=length, buckets=buckets, model=model)
        return _fitting(bucket, length, buckets)

    @property
    def observing(self) -> bool:
        """True when some plugin implements ``synapse_observe``."""
        return bool(self.pm.hook.synapse_observe.get_hookimpls())

    def observer(self) -> Callable[[Event], None] | None:
        """The function to report events to, or ``None`` to report nothing."""
        if not self.observing:
            return None
        hook = self.pm.hook.synapse_observe
        return lambda event: hook(event=event)

    def register_commands(self, cli: click.Group) -> None:
        for _ in self._each_impl("synapse_register_commands", cli=cli):
            pass
