"""Host configuration and catalog entries, structured from TOML with cattrs.

Errors name the path of the bad field (``models[2].ceiling: expected int``) so
a user can find it in their file without reading a traceback.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs

from .errors import ConfigError, FieldInvalid
from .wire import Task as Task  # the one literal; config re-exports it

_T = TypeVar("_T")


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise FieldInvalid(attribute.name, f"must be greater than 0, got {value!r}")


def _duration(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    _positive(instance, attribute, value)
    # inf would make every bound it sets unbounded: a close could then hang forever
    if value == math.inf:
        raise FieldInvalid(attribute.name, f"must be a finite number of seconds, got {value!r}")


def _not_negative(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise FieldInvalid(attribute.name, f"must be 0 or more, got {value!r}")


def _budget(instance: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value <= 0:
        raise FieldInvalid(
            attribute.name,
            f"must be a number of positions greater than 0 (or left out for the "
            f"transport's default), got {value!r}",
        )


def _idle(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None:
        _duration(instance, attribute, value)


def _dims(instance: ModelSpec, attribute: attrs.Attribute[Any], value: list[int]) -> None:
    if value and instance.task != "embed":
        raise FieldInvalid(
            attribute.name, f"only an embed model's vectors are cut, not a {instance.task} model's"
        )
    for i, dims in enumerate(value):
        if type(dims) is not int or dims <= 0:
            raise FieldInvalid(
                f"{attribute.name}[{i}]", f"must be a vector size greater than 0, got {dims!r}"
            )


def _prompt_names(instance: object, attribute: attrs.Attribute[Any], value: dict[str, str]) -> None:
    for name in value:
        if not name.strip():
            raise FieldInvalid(attribute.name, "a prompt needs a name; got an empty one")


def _name(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value.strip():
        raise FieldInvalid(attribute.name, f"a model needs a name; got {value!r}")


def _named(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value.strip():
        raise FieldInvalid(attribute.name, "must name an encoding; got an empty string")


@attrs.frozen
class ModelSpec:
    """One catalog entry. Two entries may name the same ``package``: they are
    then two separate workers, each with its own shapes and reservations."""

    name: str = attrs.field(validator=_name)
    task: Task
    transport: str
    package: str
    ceiling: int = attrs.field(validator=_positive)
    options: dict[str, Any] = attrs.field(factory=dict)
    #: shown by ``synapse catalog``: what the model is, in a line
    description: str = ""
    #: texts put in front of an input by name (``query = "query: "``), as
    #: sentence-transformers' prompts; a caller asks for one by name
    prompts: dict[str, str] = attrs.field(factory=dict, validator=_prompt_names)
    #: the tiktoken encoding whose ids OpenAI-style clients send for this
    #: model (LangChain's ``OpenAIEmbeddings`` pre-tokenises with it); ``synapse
    #: serve``'s ``/v1/embeddings`` decodes token arrays with it
    tiktoken_encoding: str = attrs.field(default="cl100k_base", validator=_named)
    #: most positions (bucket x sequences) one request of a call carries, so a
    #: request takes a bounded time and other calls get the worker between a
    #: large call's requests; ``None``: the transport's default
    #: (:meth:`~synapse_core.transport.Transport.max_batch_tokens`)
    max_batch_tokens: int | None = attrs.field(default=None, validator=_budget)
    #: how many workers serve the model, each with its own shapes and
    #: reservations: a call goes to an idle one, so short calls need not wait
    #: behind a long call's request on another (see architecture.md, fair
    #: sharing); each costs a worker's memory and cold start
    workers: int = attrs.field(default=1, validator=_positive)
    #: seconds without a call after which the model's workers are retired
    #: (exits confirmed, reservations refunded) until its next call starts
    #: them again; ``None``: the host's ``idle_unload_s``
    idle_unload_s: float | None = attrs.field(default=None, validator=_idle)
    #: the sizes the model was trained to be cut to (Matryoshka): a call may
    #: ask for its vectors cut to one of them (``dimensions``); empty: what
    #: the model's files say (see :mod:`synapse_core.matryoshka`)
    matryoshka_dims: list[int] = attrs.field(factory=list, validator=_dims)


@attrs.frozen
class RestartBudget:
    """At most ``max_restarts`` restarts of one model within ``window_s``."""

    max_restarts: int = attrs.field(default=5, validator=_not_negative)
    window_s: float = attrs.field(default=60.0, validator=_duration)


@attrs.frozen
class LaneConfig:
    capacity: int = attrs.field(default=1_000_000, validator=_positive)


@attrs.frozen
class HostConfig:
    """Everything a host needs; every field has a sensible default."""

    models: tuple[ModelSpec, ...] = ()
    exchange_timeout_s: float = attrs.field(default=30.0, validator=_duration)
    max_concurrent: int = attrs.field(default=64, validator=_positive)
    max_waiting: int = attrs.field(default=1024, validator=_positive)
    exit_grace_s: float = attrs.field(default=5.0, validator=_duration)
    restart_budget: RestartBudget = RestartBudget()
    certify_observation: bool = False
    lanes: dict[str, LaneConfig] = attrs.field(factory=dict)
    max_frame_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_positive)
    #: serve small embed calls that wait for a busy model together (see coalesce.py)
    coalesce: bool = False
    #: the default of every model's ``idle_unload_s``; ``None``: workers stay
    #: until retired or the host closes
    idle_unload_s: float | None = attrs.field(default=None, validator=_idle)
    source: str = attrs.field(default="<code>", eq=False)

    @classmethod
    def from_toml(cls, path: str | Path) -> HostConfig:
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(str(path), [f"cannot read file: {exc.strerror or exc}"]) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise ConfigError(
                str(path),
                [
                    f"not UTF-8 text at byte offset {exc.start} (line {line}): {exc.reason}; "
                    "TOML files must be UTF-8, so re-save it as UTF-8"
                ],
            ) from None
        return cls.from_toml_text(text, source=str(path))

    @classmethod
    def from_toml_text(cls, text: str, *, source: str = "<string>") -> HostConfig:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, [f"not valid TOML: {exc}"]) from None
        return cls.from_dict(data, source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> HostConfig:
        config = structure(data, cls, source)
        _check_unique_names(config, source)
        return attrs.evolve(config, source=source)

    def idle_unload_of(self, spec: ModelSpec) -> float | None:
        """How long ``spec``'s model may go without a call before its workers go."""
        return spec.idle_unload_s if spec.idle_unload_s is not None else self.idle_unload_s

    def model(self, name: str) -> ModelSpec | None:
        for spec in self.models:
            if spec.name == name:
                return spec
        return None

    def with_models(self, extra: tuple[ModelSpec, ...]) -> HostConfig:
        """Add models (e.g. contributed by transports) whose names are not taken."""
        taken = {m.name for m in self.models}
        added = tuple(m for m in extra if m.name not in taken)
        return attrs.evolve(self, models=self.models + added)


_converter = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type, accepts: tuple[type, ...]) -> None:
    """Refuse values of another type instead of coercing (no int(1.5), bool("false"))."""

    def structure_value(value: Any, _: type) -> Any:
        if isinstance(value, bool) and bool not in accepts:
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        if not isinstance(value, accepts):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return kind(value)

    _converter.register_structure_hook(kind, structure_value)


_strict(int, (int,))
_strict(float, (int, float))
_strict(str, (str,))
_strict(bool, (bool,))
# ``source`` is bookkeeping, not a key a user writes.
_converter.register_structure_hook(
    HostConfig,
    cattrs.gen.make_dict_structure_fn(
        HostConfig,
        _converter,
        _cattrs_forbid_extra_keys=True,
        source=cattrs.gen.override(omit=True),
    ),
)

_PATH = re.compile(r"^(?P<what>.*) @ \$(?P<path>.*)$", re.DOTALL)
_FIELD_MARK = "\x1f"


def structure(data: Any, cls: type[_T], source: str, root: str = "") -> _T:
    """Structure ``data`` into ``cls``, raising :class:`ConfigError` with paths."""
    try:
        return _converter.structure(data, cls)
    except Exception as exc:  # cattrs raises ExceptionGroups and plain errors
        raise ConfigError(source, structuring_problems(exc, root)) from None


def structuring_problems(exc: BaseException, root: str = "") -> list[str]:
    """Turn a cattrs structuring error into ``path: problem`` lines, worded as
    the catalog's errors are (a :class:`FieldInvalid` names its own field);
    ``root`` is put in front of every path. For a plugin with a converter of
    its own: ``raise ConfigError(source, structuring_problems(exc))``."""
    lines: list[str] = []
    for message in cattrs.transform_error(exc, format_exception=_format):
        match = _PATH.match(message)
        if match is None:
            lines.append(message)
            continue
        path, what = root + match["path"], match["what"]
        if what.startswith(_FIELD_MARK):
            # A validator names its own field: point at it, not at its object.
            field, what = what[1:].split(_FIELD_MARK, 1)
            path = f"{path}.{field}"
        lines.append(f"{path.lstrip('.') or '(top level)'}: {_plain(what)}")
    return lines


def _format(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, FieldInvalid):
        return f"{_FIELD_MARK}{exc.field}{_FIELD_MARK}{exc}"
    if isinstance(exc, TypeError) and str(exc).startswith("expected "):
        return str(exc)
    if type(exc).__name__ == "LiteralError" or "not in literal" in str(exc):
        return _expected(type_) or str(exc)
    return cattrs.v.format_exception(exc, type_)


def _expected(type_: object) -> str:
    """What a literal type (or an optional one) takes, as a user writes it."""
    args = getattr(type_, "__args__", ())
    optional = type(None) in args
    values = [
        repr(value)
        for arg in args
        if arg is not type(None)
        for value in (arg.__args__ if hasattr(arg, "__args__") else (arg,))
    ]
    if not values:
        return ""
    what = f"expected {values[0]}" if len(values) == 1 else f"expected one of {', '.join(values)}"
    return what + (", or leave the key out" if optional else "")


def _plain(what: str) -> str:
    return what.replace("invalid value for type, ", "")


def _check_unique_names(config: HostConfig, source: str) -> None:
    seen: dict[str, int] = {}
    problems = []
    for i, spec in enumerate(config.models):
        if spec.name in seen:
            problems.append(
                f"models[{i}].name: {spec.name!r} is already used by models[{seen[spec.name]}]"
            )
        seen.setdefault(spec.name, i)
    if problems:
        raise ConfigError(source, problems)
