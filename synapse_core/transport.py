"""What a transport gives the host: the types a transport author implements.

A transport is registered through the ``synapse_register_transports`` hook
(see :mod:`synapse_core.hookspecs`). It subclasses :class:`Transport`, sets
:attr:`Transport.name` and :attr:`Transport.worker` (the
``"package.module:WorkerClass"`` of a :class:`~synapse_core.plugin.ModelWorker`
subclass), optionally :attr:`Transport.options_type`, and keeps the default
:meth:`Transport.launch`, which starts that worker with ``spawn_worker``.
Only a transport whose workers are not such a class overrides
:meth:`Transport.launch` instead. Transport authors import all of this from
:mod:`synapse_core.plugin` (see ``docs/writing-a-transport.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from .config import ModelSpec
from .errors import ConfigError
from .kinds import Kind
from .launch import LaneInfo, LaneSession, Launched, LaunchRequest, ProcessGroup, WorkerProcess
from .tokenizer import BasicTokenizer, Tokenizer

# The launch types are defined in .launch (the default launcher, .process,
# needs them without needing this module) and published here with the class.
__all__ = [
    "Availability",
    "Conversion",
    "LaneInfo",
    "LaneSession",
    "LaunchRequest",
    "Launched",
    "ModelSource",
    "ModelTraits",
    "ProcessGroup",
    "Scorer",
    "Transport",
    "WorkerProcess",
]


@attrs.frozen
class Availability:
    """Whether a transport can run here; ``reason`` says why not, for users."""

    available: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@attrs.frozen
class Conversion:
    """A lossy conversion a model is served through (:meth:`Transport.model_conversion`),
    and what it was measured to cost."""

    #: what it is, as the model's options name it (e.g. ``"int8"``)
    name: str
    #: the worst and the mean cosine of its vectors to the unconverted
    #: model's on the transport's fixed text set; ``None`` until measured
    min_cosine: float | None = None
    mean_cosine: float | None = None
    #: a cross-encoder's: the worst and the mean absolute difference of its
    #: scores (logits) to the unconverted model's (one value has no cosine)
    max_score_delta: float | None = None
    mean_score_delta: float | None = None


#: how a rerank model scores: see :class:`ModelTraits`
Scorer = Literal["cross-encoder", "bi-encoder", "llm-reranker", "maxsim"]


@attrs.frozen
class ModelTraits:
    """What a transport knows of a model from its files before any worker
    starts (:meth:`Transport.traits`); every field may be left at its default."""

    #: prompts by name that the model's files carry (sentence-transformers'
    #: ``prompts``); the catalog entry's own ``prompts`` win over them
    prompts: Mapping[str, str] = attrs.field(factory=dict)
    #: the prompt sentence-transformers applies when a caller names none
    #: (``synapse serve`` applies it too; ``Host.embed`` only when named)
    default_prompt: str | None = None
    #: a rerank model's scorer. ``"cross-encoder"``: the worker's ``rerank``
    #: returns the logit of each (query, document) pair and the host's
    #: ``RerankResult.scores`` are its sigmoid (``raw_scores`` the logits), as
    #: sentence-transformers' ``CrossEncoder.predict`` and TEI give them.
    #: ``"llm-reranker"``: a causal language model scoring the pair in its
    #: prompt; the worker returns ``logit(yes) - logit(no)`` at the prompt's
    #: end, and the scores are its sigmoid (``P(yes)`` of the two) as for a
    #: cross-encoder. ``"bi-encoder"``: a similarity of separate embeddings,
    #: returned as is. ``"maxsim"``: late interaction of token vectors (a
    #: ColBERT head's), each query token's best cosine over the document's
    #: tokens, averaged over the query's tokens (FlagEmbedding's
    #: ``colbert_score``), returned as is. ``None``: not said (scores are
    #: returned as the worker gives them).
    scorer: Scorer | None = None
    #: an embed model's pooling (``"mean"``, ``"cls"``...), for ``/info``
    pooling: str | None = None
    #: the memory one of its workers holds, in MiB, as estimated from its
    #: files (``/info`` shows it); ``None``: not said
    worker_mib: int | None = None
    #: the sizes the model was trained to be cut to (Matryoshka), as its
    #: files say; the catalog entry's ``matryoshka_dims`` win over them
    matryoshka_dims: tuple[int, ...] = ()
    #: whether an embed model's vectors are unit length (its files end in a
    #: normalisation): a vector cut to fewer dimensions is normalised again
    #: unless this is ``False``; ``None``: not said
    normalized: bool | None = None
    #: the outputs the model computes (dense vectors, sparse vectors, token
    #: vectors...), when its files say: a call for another one is refused
    #: before any worker starts; ``None``: not said (the worker's hello says)
    outputs: frozenset[Kind] | None = None
    #: an LLM reranker's instruction, the one its prompt holds (the model
    #: card's or the catalog's), for ``synapse catalog`` and ``/info``
    instruction: str | None = None
    #: a classify model's labels, one per value of its rows, in order
    #: (``Host.classify``); empty: not said (``LABEL_0``, ``LABEL_1``...)
    labels: tuple[str, ...] = ()
    #: a classify model's labels are independent: each one's probability is
    #: the sigmoid of its logit, not the softmax over the labels
    multi_label: bool = False


@attrs.frozen
class ModelSource:
    """A model given on the command line (``--model``) rather than in a
    catalog: a folder or a hub id, and the name it is served under. Exactly
    one of ``folder`` and ``hub_id`` is set."""

    name: str
    #: an existing folder, as an absolute path
    folder: Path | None = None
    #: a hub id (``ORG/NAME``), to be found in the local hub cache
    hub_id: str | None = None

    @property
    def given(self) -> str:
        """What the user gave, for messages."""
        return str(self.folder) if self.folder is not None else str(self.hub_id)


class Transport:
    """Base class for transports. Set :attr:`name`, and either :attr:`worker`
    (with :attr:`options_type`) or override :meth:`launch`."""

    #: Name used in catalog entries (``transport = "mock"``).
    name: str = ""
    #: ``"package.module:WorkerClass"``, a :class:`~synapse_core.plugin.ModelWorker`
    #: subclass: the default :meth:`launch` starts it with ``spawn_worker``.
    worker: str = ""
    #: The class a model's options are structured into (an attrs class, e.g.
    #: derived from :class:`~synapse_core.plugin.WorkerOptions`): the default
    #: :meth:`validate_model` checks options with it, and the default
    #: :meth:`buckets` reads its ``buckets`` field if it has one.
    options_type: type[Any] | None = None

    def model_options(self, model: ModelSpec) -> Any:
        """``model.options`` structured into :attr:`options_type`; a
        :class:`~synapse_core.errors.ConfigError` names each bad option's path."""
        from .worker.options import parse_options

        if self.options_type is None:
            raise TypeError(f"transport {self.name!r} has no options_type")
        return parse_options(model.options, self.options_type, source=f"model {model.name!r}")

    def model_from_source(self, source: ModelSource) -> ModelSpec:
        """The catalog entry serving ``source`` (``--model PATH_OR_HUB_ID``), as a
        user would have written it: the task and the options come from the
        model's files. Keep it cheap (read small files, never load weights); a
        model that cannot be read raises
        :class:`~synapse_core.errors.ConfigError` naming the file. The default
        refuses: a transport that takes models by folder or hub id overrides it."""
        raise ConfigError(
            f"--model {source.given}",
            [
                f"transport {self.name!r} does not take a model by folder or hub id; "
                "write a catalog entry for it (docs/configuration.md)"
            ],
        )

    def availability(self) -> Availability:
        """Whether this transport can run on this machine, and if not why."""
        return Availability.yes()

    def catalog_models(self) -> Sequence[ModelSpec]:
        """Models this transport ships; a user's catalog entry of the same name wins."""
        return ()

    def validate_model(self, model: ModelSpec) -> None:
        """Check ``model.options``; raise :class:`~synapse_core.errors.ConfigError`
        naming the bad option's path. Called when a host opens, never spawning.
        The default structures them into :attr:`options_type`, if set."""
        if self.options_type is not None:
            self.model_options(model)

    def describe(self) -> str:
        """One line for ``synapse plugins`` about what runs here (e.g. which
        backends are installed); empty for none. Keep it cheap."""
        return ""

    def model_note(self, model: ModelSpec) -> str:
        """One line ``synapse catalog`` shows under the model (e.g. what a lossy
        conversion costs); empty for none. Called only to list a catalog:
        keep it cheap (read a file, never load or spawn)."""
        return ""

    def model_conversion(self, model: ModelSpec) -> Conversion | None:
        """The lossy conversion ``model`` is served through (``/info`` shows it),
        ``None`` for the model as its files hold it. Keep it cheap, as
        :meth:`model_note`."""
        return None

    def model_availability(self, model: ModelSpec) -> Availability:
        """Whether ``model`` can run here when the transport can (its files are
        installed...); ``reason`` tells a user what to install. Called when a
        catalog is built: keep it cheap (no hashing, no loading)."""
        return Availability.yes()

    def buckets(self, model: ModelSpec) -> Sequence[int] | None:
        """The buckets ``model``'s workers will report, if known from its options.

        With them the catalog knows the effective ceiling, ``min(ceiling,
        largest bucket)``, before any worker starts: longer inputs are refused
        without starting one, and ``synapse catalog`` shows both. ``None``
        (the default): known only from a worker's hello. Called when a
        catalog opens, after :meth:`validate_model`; never spawn here. The
        default reads the ``buckets`` option of :attr:`options_type`, if any.
        """
        if self.options_type is None:
            return None
        declared = getattr(self.model_options(model), "buckets", None)
        return None if declared is None else sorted(declared)

    def max_batch_tokens(self, model: ModelSpec) -> int | None:
        """The default budget of one request of ``model``, in positions
        (bucket x sequences), for an entry that sets no ``max_batch_tokens``.

        A call's work is cut into requests within it, and between two of them
        the worker goes to whichever call has waited longest, so choose it from
        the model's measured speed: one request should take about 100 ms.
        ``None`` (the default): requests are bounded by ``max_batch`` alone.
        Called for every call's cut, after :meth:`validate_model`: keep it
        cheap (no files, no parsing of the options again); never spawn here.
        """
        return None

    def traits(self, model: ModelSpec) -> ModelTraits:
        """What ``model``'s files say of it: prompts, a rerank model's scorer.
        Called when a catalog is built, after :meth:`validate_model`: keep it
        cheap, and return the default for a model that cannot run here."""
        return ModelTraits()

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        """The lane ``model`` runs on."""
        return LaneInfo(f"{self.name}:0")

    def tokenizer(self, model: ModelSpec) -> Tokenizer:
        """The tokenizer whose lengths decide buckets and ceilings for ``model``."""
        return BasicTokenizer()

    async def open_lane(self, lane: LaneInfo) -> LaneSession | None:
        """Take hold of a ``hardware_lock`` lane before its first launch.

        Raise :class:`~synapse_core.errors.LaneLocked` naming the holder if
        another host holds it. Never bypass or kill a live holder.
        """
        return None

    async def launch(self, request: LaunchRequest) -> Launched:
        """Start a worker for ``request.model`` at ``request.generation``.

        The worker must send a :class:`~synapse_core.wire.Hello` frame first.
        The default starts :attr:`worker` with ``spawn_worker``.
        """
        if not self.worker:
            raise NotImplementedError(
                f"transport {self.name!r} sets no worker and does not override launch"
            )
        from .process import spawn_worker

        return await spawn_worker(self.worker, request)
