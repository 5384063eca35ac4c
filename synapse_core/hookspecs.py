"""Hook specifications: everything a Synapse plugin can provide.

A plugin is a module (or object) with functions decorated by
``@hookimpl`` (``synapse_core.plugin.hookimpl``, the same marker as
``synapse_core.hookimpl``) and named after the hooks below. The decorator is
what makes a function a hook: a function with a hook's name but without it is
never called (``synapse plugins`` reports it as not marked with
``@hookimpl``). A plugin is found through the ``synapse`` entry-point group::

    # pyproject.toml of your distribution
    [project.entry-points.synapse]
    my_transport = "my_package.plugin"

    # my_package/plugin.py
    from synapse_core.plugin import hookimpl

    @hookimpl
    def synapse_register_transports(register):
        register(MyTransport())  # call register for each; return nothing

``synapse_register_transports`` hands its transports to ``register``, one
call per transport instance; what the hook returns is not registered
(``synapse plugins`` reports a returned value).

Hook implementations may accept any subset of a hook's arguments, by name.
Hooks marked *firstresult* stop at the first implementation that returns
something other than ``None``; plugins registered later are asked first, and
Synapse's own defaults are asked last.

Set ``SYNAPSE_PLUGINS=name1,name2`` to load only those entry points (an empty
value loads none). A plugin that fails to import or declares an invalid hook
is reported by ``synapse plugins`` and skipped; the host keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from .config import ModelSpec
    from .observation import Event
    from .residency.policy import AdmissionRequest, Decision, LaneView
    from .transport import Transport
    from .wire import Shape

PROJECT = "synapse"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- transport ---------------------------------------------------------------


# Long because its docstring is all a transport author needs, in one place.
@hookspec
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    """Register the transports this plugin provides.

    Called once when a host (or the CLI) collects plugins. Call ``register``
    with an instance of a :class:`synapse_core.plugin.Transport` subclass
    for each transport. A transport:

    - has a ``name``, which catalog entries use (``transport = "mock"``);
    - answers ``availability()`` with an
      :class:`~synapse_core.plugin.Availability` whose ``reason`` tells a
      user why it cannot run here (wrong OS, missing framework...);
    - may ship models through ``catalog_models()`` and check a model's
      ``options`` in ``validate_model()`` (raise ``ConfigError`` naming the
      option's path);
    - may declare a model's buckets from its options with ``buckets()``, so
      the catalog knows the effective ceiling (``min(ceiling, largest
      bucket)``) and refuses longer inputs before any worker starts;
    - may say what a model's files hold with ``traits()``: a
      :class:`~synapse_core.plugin.ModelTraits` with prompts by name, and
      for a rerank model its ``scorer``: a ``"cross-encoder"`` worker's
      ``rerank(query, batch)`` scores each (query, document) pair together
      and returns the logit, whose sigmoid the host returns as the score
      (the logits as ``raw_scores``); an ``"llm-reranker"`` returns a
      language model's ``logit(yes) - logit(no)``, treated the same; a
      ``"bi-encoder"`` returns a similarity of separate embeddings, as is,
      and a ``"maxsim"`` one the MaxSim of token vectors (ColBERT), as is;
    - says which lane a model runs on with ``lane_for()``: a
      :class:`~synapse_core.plugin.LaneInfo` with a lane id such as
      ``"ane:0"``, a default capacity in reservation units, and whether the
      lane needs a cross-process hardware lock (then ``open_lane()`` is awaited
      once, before the lane's first launch, and its ``pass_fds`` are
      inherited by every worker launched on the lane);
    - starts a worker with ``async launch(request)`` and returns a
      :class:`~synapse_core.plugin.Launched`: the host's ends of a byte
      channel (speaking Synapse's worker protocol, the worker sends ``Hello``
      first) and a process whose ``wait()`` returns only once the process is
      reaped. The default ``launch`` does all of this with
      :func:`synapse_core.plugin.spawn_worker` for the transport's
      ``worker``, a :class:`~synapse_core.plugin.ModelWorker` subclass, so
      a transport normally sets ``worker`` (and ``options_type``) and keeps
      it; one that starts something else overrides ``launch``. Then a
      process class of its own whose worker leads its own process group
      (started in a new session, as ``spawn_worker``'s are) also subclasses
      :class:`~synapse_core.plugin.ProcessGroup` and answers
      ``group_alive()``, so the host confirms the worker's exit only once
      every process of that group is gone (a child cannot keep the device or
      a lane lock), and its ``terminate()`` and ``kill()`` signal the group.

    Call ``register`` once per transport instance; return nothing (a
    returned value is not registered, and ``synapse plugins`` reports it).
    When two plugins register a transport of the same name, the transport
    of the plugin registered *last* is kept (pluggy calls the latest
    registered plugin first) and the other is ignored, reported by
    ``synapse plugins`` as "plugin 'a': transport 'x' is already provided by
    'b'; ignored". Installed entry points are registered in an order you
    cannot count on, so give every transport a distinct name. Within one
    plugin, the first ``register`` of a name wins.

    :param register: call with each transport instance.
    """


# -- residency policy ----------------------------------------------------------


@hookspec(firstresult=True)
def synapse_admission_cost(
    model: ModelSpec, shape: Shape, lane: LaneView, worker_id: str
) -> int | None:
    """Return the reservation units admitting ``shape`` costs on ``lane``.

    Called (under the lane's grant decision, so do not block) before every
    admission of a shape by a worker. Stops at the first non-``None`` result.
    The default charges ``shape.bucket * shape.batch`` units. A cost that
    belongs to the worker rather than to one shape (its loaded weights) can
    ride on an admission when none of ``worker_id``'s reservations in
    ``lane.reservations`` carries it yet.

    :param model: the catalog entry of the worker asking.
    :param shape: the compiled shape (bucket, batch) to admit.
    :param lane: a read-only picture of the lane.
    :param worker_id: the worker asking, as its reservations name it.
    """


@hookspec(firstresult=True)
def synapse_lane_full(request: AdmissionRequest, lane: LaneView) -> Decision | None:
    """Decide what to do when ``request.units`` do not fit on ``lane``.

    Return one of :class:`~synapse_core.policy.Wait` (wait for a
    refund, within the caller's deadline; then ``CapacityExhausted``),
    :class:`~synapse_core.policy.Evict` naming an *unleased*
    reservation of ``lane.reservations`` whose ``evictable`` is true (the
    host evicts it, refunds it, and decides again), or
    :class:`~synapse_core.policy.Refuse`. Stops at the first
    non-``None`` result. The default evicts the least recently used evictable
    reservation and waits when there is none.

    :param request: the worker, generation, model, shape and units asked for.
    :param lane: a read-only picture of the lane, with every reservation.
    """


# -- bucket selection ------------------------------------------------------------


@hookspec(firstresult=True)
def synapse_select_bucket(length: int, buckets: Sequence[int], model: ModelSpec) -> int | None:
    """Choose the bucket a sequence of ``length`` positions runs in.

    ``buckets`` are the ones the worker reported in its hello frame, sorted
    ascending. Return one of them that is ``>= length``. Stops at the first
    non-``None`` result; the default returns the smallest bucket that fits.
    A sequence longer than every bucket is refused before this is called.
    It is asked once per distinct length in each call.

    :param length: positions the sequence occupies, special tokens included.
    :param buckets: the worker's buckets, ascending.
    :param model: the catalog entry being served.
    """


# -- observation -----------------------------------------------------------------


@hookspec
def synapse_observe(event: Event) -> None:
    """Receive a supervisor event (:class:`synapse_core.events.Event`).

    Called synchronously on the serving path: record and return quickly; do
    not block or raise. Every implementation is called. When no plugin
    implements this hook the supervisor builds no events at all.

    :param event: one of the event kinds of ``synapse_core.events`` (``AnyEvent``).
    """


# -- command line ----------------------------------------------------------------


@hookspec
def synapse_register_commands(cli: click.Group) -> None:
    """Add commands to the ``synapse`` command line.

    Called once when the CLI starts. Add a group or command to ``cli`` with
    ``cli.add_command`` or the ``@cli.command()`` decorator. A failure here is
    reported and the CLI starts without the plugin's commands.

    :param cli: the top-level ``synapse`` click group.
    """
