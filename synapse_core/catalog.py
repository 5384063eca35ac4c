"""The catalog: which models exist, who serves them, and whether they can run here.

Everything here is pure: no download, no worker spawn. Refusals carry a
stable code, the offending index and a message that says what to do.
"""

from __future__ import annotations

import logging
from importlib import resources

import attrs
import msgspec

from .config import HostConfig, ModelSpec, Task
from .errors import ConfigError, Refused
from .naming import listed, shown
from .plugins import PluginHost, TransportInfo
from .tokenizer import BasicTokenizer, Tokenizer
from .transport import Conversion, LaneInfo, ModelTraits
from .wire import MAX_BATCH, bucket_problem

log = logging.getLogger(__name__)

DEFAULT_CATALOG = "default_catalog.toml"
#: models a refusal names as the ones to pick instead (the rest are counted)
NAMES_SHOWN = 8
#: where errors in the shipped catalog say they are (its ``HostConfig.source``)
DEFAULT_CATALOG_SOURCE = f"synapse_core/{DEFAULT_CATALOG}"


def default_catalog_text() -> str:
    """The TOML text of the catalog shipped with synapse-core, for a tool
    that hands a catalog's text on (to another machine) rather than a config."""
    return resources.files("synapse_core").joinpath(DEFAULT_CATALOG).read_text(encoding="utf-8")


def default_config() -> HostConfig:
    """The catalog shipped with synapse-core (mock models that work out of the box)."""
    return HostConfig.from_toml_text(default_catalog_text(), source=DEFAULT_CATALOG_SOURCE)


@attrs.frozen
class Entry:
    """A catalog model as the host resolved it (``Host.catalog.entries[name]``):
    its spec, its transport and lane, its tokenizer, and why it cannot run
    here when it cannot."""

    spec: ModelSpec
    transport: TransportInfo | None
    lane: LaneInfo | None
    tokenizer: Tokenizer
    #: why the model cannot run here ("" when it can)
    problem: str = ""
    #: the buckets its workers will report, when the transport knows them
    #: before one starts (``Transport.buckets``); else ``None``
    buckets: tuple[int, ...] | None = None
    #: what the transport read in the model's files (``Transport.traits``);
    #: their prompts are in ``spec.prompts`` already
    traits: ModelTraits = attrs.field(factory=ModelTraits)
    #: the longest sequence served: the catalog ceiling, capped by the
    #: largest known bucket (worked out once: every call reads it)
    ceiling: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        ceiling = self.spec.ceiling
        if self.buckets:
            ceiling = min(ceiling, self.buckets[-1])
        object.__setattr__(self, "ceiling", ceiling)

    @property
    def available(self) -> bool:
        return not self.problem

    def conversion(self) -> Conversion | None:
        """The lossy conversion the model is served through and its measured
        cost (``Transport.model_conversion``), ``None`` for none; it may read a
        file, so call it off the event loop. A transport's failure is logged
        and reads as ``None``: describing a model must not stop serving it."""
        if self.transport is None or not self.available:
            return None
        try:
            return self.transport.transport.model_conversion(self.spec)
        except Exception:
            log.exception(
                "transport %r failed to describe model %r", self.spec.transport, self.spec.name
            )
            return None


class Catalog:
    def __init__(self, config: HostConfig, plugins: PluginHost) -> None:
        self.source = config.source
        transports = plugins.transports()
        contributed = tuple(
            spec for info in transports.values() for spec in _safe_models(info, plugins)
        )
        self.config = config.with_models(contributed)
        #: the models a transport shipped (``catalog_models``), by name, with
        #: its name: not in the catalog file, so listings say where they came
        #: from (``with_models`` appends those whose names are not taken)
        self.shipped: dict[str, str] = {
            spec.name: spec.transport for spec in self.config.models[len(config.models) :]
        }
        self.entries: dict[str, Entry] = {}
        problems: list[str] = []
        for i, spec in enumerate(self.config.models):
            info = transports.get(spec.transport)
            if info is None:
                self.entries[spec.name] = Entry(
                    spec,
                    None,
                    None,
                    BasicTokenizer(),
                    f"no installed transport provides model {spec.name!r} (transport "
                    f"{spec.transport!r}); install its plugin or check SYNAPSE_PLUGINS",
                )
                continue
            buckets = None
            try:
                info.transport.validate_model(spec)
                buckets = _known_buckets(info, spec)
                _check_options_size(spec)
                problems.extend(f"models[{i}].{p}" for p in _frame_problems(info, spec, config))
            except ConfigError as exc:
                problems.extend(f"models[{i}].{p}" for p in exc.problems)
            problem = (
                _model_problem(info, spec)
                if info.availability.available
                else (f"transport {spec.transport!r} cannot run here: {info.availability.reason}")
            )
            lane, lane_problem = _lane(info, spec)
            tokenizer, tokenizer_problem = _tokenizer(info, spec)
            problem = problem or lane_problem or tokenizer_problem
            traits = _traits(info, spec) if not problem else ModelTraits()
            if traits.prompts:
                spec = attrs.evolve(spec, prompts={**traits.prompts, **spec.prompts})
            self.entries[spec.name] = Entry(
                spec,
                info,
                lane,
                tokenizer,
                problem,
                buckets,
                traits,
            )
        problems.extend(_unknown_lanes(self.config, self.entries))
        if problems:
            raise ConfigError(self.source, problems)

    def _names(self, task: Task | None) -> str:
        """The models a refusal points to instead: those that can run here (of
        ``task``). Named, not a command to run, so the words suit every
        surface (the command line, HTTP, the API)."""
        return listed(
            [
                e.spec.name
                for e in self.entries.values()
                if e.available and (task is None or e.spec.task == task)
            ],
            NAMES_SHOWN,
        )

    def entry(self, name: str, task: Task) -> Entry:
        """The entry serving ``name`` for ``task``, or a :class:`Refused`."""
        entry = self.entries.get(name)
        if entry is None:
            raise Refused(
                "unknown-model",
                f"model {shown(name)} is not in the catalog ({self.source}); "
                f"models that can run here: {self._names(None)}",
                model=name,
            )
        if entry.spec.task != task:
            raise Refused(
                "wrong-task",
                f"model {shown(name)} serves {entry.spec.task}, not {task}; "
                f"{entry.spec.task} with it, or {task} with one of: {self._names(task)}",
                model=name,
            )
        if entry.problem:
            raise Refused("transport-unavailable", entry.problem, model=name)
        return entry


def _lane(info: TransportInfo, spec: ModelSpec) -> tuple[LaneInfo | None, str]:
    """The transport's lane for ``spec``, or ``None`` and why there is none
    (a plugin's ``lane_for`` that raised or answered something else)."""
    try:
        lane: object = info.transport.lane_for(spec)
    except Exception as exc:
        return None, f"transport {spec.transport!r}: lane_for failed: {exc!r}"
    if not isinstance(lane, LaneInfo):
        return None, f"transport {spec.transport!r}: lane_for returned {lane!r:.80}, not a LaneInfo"
    return lane, ""


def _tokenizer(info: TransportInfo, spec: ModelSpec) -> tuple[Tokenizer, str]:
    """The transport's tokenizer for ``spec``, or a stand-in and why (it raised)."""
    try:
        return info.transport.tokenizer(spec), ""
    except Exception as exc:
        return BasicTokenizer(), f"transport {spec.transport!r}: tokenizer failed: {exc!r}"


def _model_problem(info: TransportInfo, spec: ModelSpec) -> str:
    try:
        availability = info.transport.model_availability(spec)
    except Exception as exc:
        return f"transport {spec.transport!r} failed to check model {spec.name!r}: {exc!r}"
    if availability.available:
        return ""
    return f"model {spec.name!r} cannot run here: {availability.reason}"


#: bytes of one vector element on the wire (float32)
FLOAT_BYTES = 4
#: bytes of JSON a model's options may take: a worker gets them in one
#: command-line argument, and Linux takes at most 128 KiB in one
MAX_OPTIONS_BYTES = 64 * 1024


def _check_options_size(spec: ModelSpec) -> None:
    """Refuse options too long for a worker's command line."""
    try:
        size = len(msgspec.json.encode(spec.options))
    except (TypeError, msgspec.EncodeError):
        return  # not JSON: the transport's own check says so
    if size > MAX_OPTIONS_BYTES:
        raise ConfigError(
            "",
            [
                f"options: {size} bytes of options, over the {MAX_OPTIONS_BYTES} a worker "
                "can be started with; make them shorter"
            ],
        )


def _frame_problems(info: TransportInfo, spec: ModelSpec, config: HostConfig) -> list[str]:
    """Options that would fail only once a worker answers: a ``max_batch``
    over what a hello may report, vectors (or a full batch of them) too big
    for one frame of ``max_frame_bytes``."""
    if info.transport.options_type is None:
        return []
    options = info.transport.model_options(spec)
    dims, batch = getattr(options, "dims", None), getattr(options, "max_batch", None)
    if type(batch) is int and batch > MAX_BATCH:
        # the worker's hello would report it and every start would fail
        return [
            f"options.max_batch: model {shown(spec.name)} sets max_batch {batch}, over the "
            f"{MAX_BATCH} inputs a host sends a worker at once; lower max_batch"
        ]
    if type(dims) is not int:
        return []
    limit = config.max_frame_bytes
    if dims * FLOAT_BYTES > limit:
        return [
            f"options.dims: one vector of {dims} floats is {dims * FLOAT_BYTES} bytes, over "
            f"the frame limit of {limit} bytes (max_frame_bytes); no answer could carry it"
        ]
    full = batch * dims * FLOAT_BYTES if type(batch) is int else 0
    if full > limit:
        return [
            f"options.max_batch: {batch} vectors of {dims} floats take {full} bytes, over "
            f"the frame limit of {limit} bytes (max_frame_bytes); lower max_batch or raise "
            "max_frame_bytes"
        ]
    return []


def _traits(info: TransportInfo, spec: ModelSpec) -> ModelTraits:
    """The transport's traits of ``spec``; the defaults if it fails to say."""
    try:
        return info.transport.traits(spec)
    except Exception:
        return ModelTraits()


def _known_buckets(info: TransportInfo, spec: ModelSpec) -> tuple[int, ...] | None:
    """The transport's declared buckets for ``spec``, checked as a hello's are."""
    try:
        declared = info.transport.buckets(spec)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            "", [f"options: transport {spec.transport!r} could not declare buckets: {exc!r}"]
        ) from None
    if declared is None:
        return None
    buckets = tuple(declared)
    problem = bucket_problem(buckets)
    if problem:
        raise ConfigError(
            "",
            [f"options: transport {spec.transport!r} declares buckets {list(buckets)}: {problem}"],
        )
    return buckets


def _unknown_lanes(config: HostConfig, entries: dict[str, Entry]) -> list[str]:
    """A ``lanes`` setting naming a lane no model runs on is a typo, not a no-op.

    The lanes of a transport that is not installed are unknown here, so while
    any model's transport is missing, lane settings are left unchecked.
    """
    if any(entry.transport is None for entry in entries.values()):
        return []
    known = sorted({entry.lane.lane_id for entry in entries.values() if entry.lane is not None})
    listing = ", ".join(known) or "none"
    return [
        f"lanes[{lane_id!r}]: no model of the catalog runs on lane {lane_id!r} "
        f"(its lanes: {listing})"
        for lane_id in config.lanes
        if lane_id not in known
    ]


def _safe_models(info: TransportInfo, plugins: PluginHost) -> tuple[ModelSpec, ...]:
    try:
        return tuple(info.transport.catalog_models())
    except Exception as exc:
        plugins.problems.append(
            f"transport {info.transport.name!r}: catalog_models failed: {exc!r}"
        )
        return ()
