"""What a model folder says about the model, read from its JSON files alone.

Everything the catalog needs comes from the folder, as sentence-transformers
and transformers read it: the architecture from ``config.json``, the
pooling and normalisation from ``modules.json`` and ``1_Pooling/config.json``,
the longest input from ``sentence_bert_config.json`` (``max_seq_length``),
the prompts from ``config_sentence_transformers.json``. A ``config.json``
naming a ``*ForSequenceClassification`` architecture with one label is a
cross-encoder (a rerank model), with more than one a classifier (its labels
from ``id2label``, softmaxed or, for ``multi_label_classification``, each
one's sigmoid); a causal language model whose family has a
pair prompt (:class:`~synapse_models.packing.PairTemplate`), in a folder with
no sentence-transformers modules, is an LLM reranker (Qwen3-Reranker).
Cheap: no weights are read, nothing is hashed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from .errors import ModelFilesError
from .families import Family, cross_encoders, family_for
from .heads import POOLINGS as POOLINGS
from .heads import Activation, Pooling
from .packing import PairTemplate

_POOLING_KEYS: dict[str, Pooling | None] = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
    "pooling_mode_mean_sqrt_len_tokens": None,
    "pooling_mode_weightedmean_tokens": None,
}
#: bge-m3's extra heads, as FlagEmbedding saves them (``torch.save`` of a Linear's state)
SPARSE_LINEAR, COLBERT_LINEAR = "sparse_linear.pt", "colbert_linear.pt"
_MODULE = "sentence_transformers.models."
TRANSFORMER, POOLING, DENSE, NORMALIZE = (
    _MODULE + name for name in ("Transformer", "Pooling", "Dense", "Normalize")
)
#: a Dense module's activation, by the class name its config gives
_ACTIVATIONS: dict[str, Activation] = {
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
}

CONFIG = "config.json"
MODULES_FILE = "modules.json"
POOLING_CONFIG = "1_Pooling/config.json"
ST_CONFIG = "sentence_bert_config.json"
ST_PROMPTS = "config_sentence_transformers.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
#: a ``model_max_length`` at least this large means "no limit" (transformers' sentinel)
_NO_LIMIT = 1 << 24
#: buckets a derived bucket list is cut from; the ceiling itself closes it
BUCKET_STEPS = (32, 64, 128, 256, 512, 1024, 2048, 4096)


@attrs.frozen
class DenseModule:
    """A sentence-transformers ``Dense`` module's folder and config."""

    folder: str
    in_features: int
    out_features: int
    bias: bool
    activation: Activation


@attrs.frozen
class Layout:
    """A model folder's model: what is computed, and the longest input served."""

    #: the family's name (``bert``, ``xlm-roberta``, ``modernbert``, ...)
    architecture: str
    #: a ``*ForSequenceClassification`` head (or an LLM reranker's): reads a
    #: text or a pair; one label: a cross-encoder scoring pairs, more: a classifier
    cross_encoder: bool
    #: how token vectors become one vector (a cross-encoder's head reads the first token)
    pooling: Pooling
    #: a ``Normalize`` module follows the pooling: unit vectors
    normalize: bool
    #: positions the position table has room for (after XLM-R's and MPNet's offset)
    positions: int
    #: the longest sequence served, special tokens included: ``max_seq_length``,
    #: never more than ``positions``
    max_tokens: int
    hidden: int
    #: the position table's row of a sequence's first token (XLM-R and MPNet
    #: skip the padding index's rows: ``pad_token_id + 1``)
    offset: int = 0
    #: sentence-transformers' prompts by name, and the one used when none is named
    prompts: dict[str, str] = attrs.field(factory=dict)
    default_prompt: str | None = None
    #: sentence-transformers ``Dense`` modules after the pooling, in order
    dense: tuple[DenseModule, ...] = ()
    #: a sparse head: ``"splade"`` (a SparseEncoder folder: its masked-LM
    #: head, and no dense output), ``"m3"`` (bge-m3's ``sparse_linear.pt``)
    sparse: Literal["splade", "m3"] | None = None
    #: bge-m3's ``colbert_linear.pt``: ColBERT token vectors
    colbert: bool = False
    #: a decoder: causal attention, no start token needed (:class:`Sizes`)
    causal: bool = False
    #: an LLM reranker (``cross_encoder`` too): the prompt a pair is scored in
    template: PairTemplate | None = None
    #: an LLM reranker's instruction given in place of the model card's
    #: (:meth:`with_instruction`); ``None``: the card's
    instruction: str | None = None
    #: a classifier's labels (``id2label``, in id order); empty for any other model
    labels: tuple[str, ...] = ()
    #: a classifier whose labels are independent (``multi_label_classification``:
    #: each label's sigmoid), not exclusive (softmax over the labels)
    multi_label: bool = False
    #: the sizes an embedder was trained to be cut to (Matryoshka):
    #: ``config.json``'s ``matryoshka_dimensions``, the key vLLM reads
    matryoshka: tuple[int, ...] = ()

    @property
    def classifier(self) -> bool:
        """A ``*ForSequenceClassification`` head of more than one label."""
        return bool(self.labels)

    @property
    def family(self) -> Family:
        """The family module that computes this model."""
        from .families import FAMILIES

        return next(f for f in FAMILIES.values() if f.name == self.architecture)

    @property
    def strips_texts(self) -> bool:
        """Texts lose their surrounding spaces before they are encoded, unless
        the family keeps them (:func:`~synapse_models.families.strips_texts`)."""
        from .families import strips_texts

        return strips_texts(self.family)

    @property
    def dims(self) -> int:
        """An embedder's vector size: the last Dense module's, else the hidden
        size; a classifier's labels."""
        if self.classifier:
            return len(self.labels)
        return self.dense[-1].out_features if self.dense else self.hidden

    @property
    def kind(self) -> str:
        """Names what the model computes, for its identity: ``bert-mean-norm``,
        ``xlm-roberta-cls-raw``, ``bert-cross-encoder``."""
        if self.template is not None:
            # Another instruction scores pairs differently: its own identity.
            return f"{self.architecture}-llm-reranker{self.instruction_mark}"
        if self.classifier:
            return f"{self.architecture}-classifier{len(self.labels)}"
        if self.cross_encoder:
            return f"{self.architecture}-cross-encoder"
        if self.sparse == "splade":
            return f"{self.architecture}-splade"
        dense = f"-dense{len(self.dense)}" if self.dense else ""
        return f"{self.architecture}-{self.pooling}{dense}-{'norm' if self.normalize else 'raw'}"

    @property
    def instruction_mark(self) -> str:
        """``-i`` and eight hex digits of the catalog's instruction, which an
        LLM reranker scores pairs in; empty for the model card's."""
        told = self.instruction
        return "" if told is None else f"-i{hashlib.sha256(told.encode()).hexdigest()[:8]}"

    @property
    def graph_end(self) -> str:
        """What the model's graph ends in, for its cached file's name:
        ``head``, or the pooling, its Dense modules and Normalize
        (``mean-norm``, ``mean-dense2-norm``)."""
        if self.cross_encoder:
            return "head"
        dense = f"-dense{len(self.dense)}" if self.dense else ""
        return f"{self.pooling}{dense}{'-norm' if self.normalize else ''}"

    def with_instruction(self, instruction: str | None) -> Layout:
        """An LLM reranker's layout with ``instruction`` in its prompt in place
        of the model card's (``None``: this layout). Any other model has no
        instruction to replace: :class:`ValueError`."""
        if instruction is None:
            return self
        if self.template is None:
            raise ValueError(
                "an instruction is an LLM reranker's (a causal LM folder served with "
                f'task = "rerank"); this folder is a {self.kind}'
            )
        if not instruction.strip():
            raise ValueError("an LLM reranker's instruction must not be blank")
        template = self.template.with_instruction(instruction)
        return attrs.evolve(self, template=template, instruction=instruction)

    def buckets(self) -> tuple[int, ...]:
        """The default buckets: powers of two below the ceiling, and the ceiling."""
        return (*(b for b in BUCKET_STEPS if b < self.max_tokens), self.max_tokens)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFilesError(str(path), f"cannot read it as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFilesError(str(path), "expected a JSON object")
    return data


def read_layout(root: Path) -> Layout:
    """The layout of the folder ``root``; :class:`ModelFilesError` names the
    file at fault and says what is supported."""
    config_path = root / CONFIG
    config = read_json(config_path)
    family = family_for(config, str(config_path))
    head = _sequence_head(config, config_path, family)
    sizes = family.sizes(config, str(config_path))
    name, hidden, positions, offset = family.name, sizes.hidden, sizes.positions, sizes.offset
    if head is not None:
        ceiling = _ceiling(_tokenizer_limit(root), positions)
        labels, multi = head
        return Layout(
            name, True, "cls", False, positions, ceiling, hidden, offset,
            labels=labels, multi_label=multi,
        )  # fmt: skip
    if sizes.template is not None and not _sentence_transformer(root):
        # A causal LM with no sentence-transformers modules: an LLM reranker
        # (Qwen3-Reranker); Qwen3-Embedding names the same architecture but
        # has modules.json and its pooling.
        ceiling = _ceiling(_tokenizer_limit(root), positions)
        return Layout(
            name,
            True,
            "lasttoken",
            False,
            positions,
            ceiling,
            hidden,
            offset,
            causal=sizes.causal,
            template=sizes.template,
        )
    limit = _max_seq_length(root)
    prompts, default = _prompts(root)
    if _splade(root):
        ceiling = _ceiling(limit, positions)
        return Layout(
            name, False, "max", False, positions, ceiling, hidden, offset, prompts, default,
            sparse="splade",
        )  # fmt: skip
    pooling, dense, normalize = _modules(root)
    m3 = {"sparse": "m3" if (root / SPARSE_LINEAR).is_file() else None}
    return Layout(
        name,
        False,
        pooling,
        normalize,
        positions,
        _ceiling(limit, positions),
        hidden,
        offset,
        prompts,
        default,
        dense,
        causal=sizes.causal,
        colbert=(root / COLBERT_LINEAR).is_file(),
        matryoshka=_matryoshka(config, config_path),
        **m3,  # type: ignore[arg-type]
    )


def _matryoshka(config: dict[str, Any], path: Path) -> tuple[int, ...]:
    """``config.json``'s ``matryoshka_dimensions``: sizes greater than 0."""
    given = config.get("matryoshka_dimensions")
    if given is None:
        return ()
    if not isinstance(given, list) or not all(type(d) is int and d > 0 for d in given):
        raise ModelFilesError(
            str(path), "matryoshka_dimensions must be a list of vector sizes greater than 0"
        )
    return tuple(sorted(set(given)))


def _splade(root: Path) -> bool:
    """Whether ``modules.json`` is a SparseEncoder's: ``MLMTransformer``, then
    ``SpladePooling`` (max pooling of ReLU; others are refused)."""
    path = root / MODULES_FILE
    if not path.is_file():
        return False
    types = [str(m.get("type", "")) for m in read_modules(path)]
    if not types or not types[0].endswith("MLMTransformer"):
        return False
    pooling = next((m for m in read_modules(path) if "SpladePooling" in str(m.get("type"))), None)
    folder = str(pooling.get("path") or "1_SpladePooling") if pooling else "1_SpladePooling"
    config = read_json(root / folder / "config.json")
    if (config.get("pooling_strategy"), config.get("activation_function", "relu")) != (
        "max",
        "relu",
    ):
        raise ModelFilesError(
            str(path), "a SparseEncoder folder needs SpladePooling with max pooling of relu"
        )
    return True


def read_modules(path: Path) -> list[dict[str, Any]]:
    """``modules.json``'s modules."""
    raw = read_json_any(path)
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ModelFilesError(str(path), "expected a JSON list of modules")
    return [cast(dict[str, Any], m) for m in raw]


def read_json_any(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFilesError(str(path), f"cannot read it as JSON: {exc}") from None


def _sentence_transformer(root: Path) -> bool:
    """Whether the folder has sentence-transformers modules (or an early
    export's bare pooling config)."""
    return (root / MODULES_FILE).is_file() or (root / POOLING_CONFIG).is_file()


def _ceiling(limit: int | None, positions: int) -> int:
    return positions if limit is None else min(limit, positions)


def task_of(root: Path) -> Literal["embed", "rerank", "classify"]:
    """What the folder's model does: ``"classify"`` for a
    ``*ForSequenceClassification`` model of several labels, ``"rerank"`` for
    one of one label (a cross-encoder) or an LLM reranker (a causal LM of a
    family with a pair prompt, without sentence-transformers modules), else
    ``"embed"``. A folder :func:`read_layout` refuses is judged by
    ``config.json``'s ``architectures`` (and its labels) alone (whether the
    family is served is for :func:`read_layout` to say)."""
    config = read_json(root / CONFIG)
    try:
        layout = read_layout(root)
        if layout.cross_encoder:
            return "classify" if layout.classifier else "rerank"
    except ModelFilesError:
        pass
    named = config.get("architectures")
    names = named if isinstance(named, list) else []
    heads = [a for a in names if isinstance(a, str) and a.endswith("ForSequenceClassification")]
    if not heads:
        return "embed"
    return "classify" if _label_count(config) > 1 else "rerank"


def _label_count(config: dict[str, Any]) -> int:
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels", 2)
    return count if isinstance(count, int) else 2


def _sequence_head(
    config: dict[str, Any], path: Path, family: Family
) -> tuple[tuple[str, ...], bool] | None:
    """The labels (empty for one: a cross-encoder) and whether they are
    multi-label, of the ``*ForSequenceClassification`` head ``config.json``
    names and ``family`` serves; ``None``: it names none."""
    named = config.get("architectures") or []
    heads = [a for a in named if isinstance(a, str) and a.endswith("ForSequenceClassification")]
    if not heads:
        return None
    if heads[0] not in family.cross_encoders:
        raise ModelFilesError(
            str(path),
            f"architecture {heads[0]} is not supported; cross-encoders and classifiers "
            f"supported: {', '.join(cross_encoders())}",
        )
    count = _label_count(config)
    if count == 1:
        return (), False
    problem = config.get("problem_type")
    if problem not in (None, "single_label_classification", "multi_label_classification"):
        raise ModelFilesError(
            str(path),
            f"problem_type {problem!r} is not supported; supported: "
            "single_label_classification, multi_label_classification",
        )
    given = config.get("id2label")
    names = given if isinstance(given, dict) else {}
    try:
        by_id = {int(key): str(value) for key, value in names.items()}
    except ValueError:
        raise ModelFilesError(str(path), "id2label's keys must be label ids") from None
    if by_id and sorted(by_id) != list(range(count)):
        raise ModelFilesError(str(path), f"id2label must name the ids 0 to {count - 1}")
    labels = tuple(by_id.get(i, f"LABEL_{i}") for i in range(count))
    return labels, problem == "multi_label_classification"


def _modules(root: Path) -> tuple[Pooling, tuple[DenseModule, ...], bool]:
    """The pooling, the Dense modules and whether a Normalize module follows,
    from ``modules.json`` (a folder without one: a Transformer, then
    ``1_Pooling``, then Normalize, as sentence-transformers' early exports
    such as the MiniLM wheel's are)."""
    path = root / MODULES_FILE
    pooling_path = root / POOLING_CONFIG
    if not path.is_file():
        return _pooling(pooling_path), (), True
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFilesError(str(path), f"cannot read it as JSON: {exc}") from None
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ModelFilesError(str(path), "expected a JSON list of modules")
    modules = [cast(dict[str, Any], m) for m in raw]
    types = [str(m.get("type", "")) for m in modules]
    middle = types[2:-1] if types[-1:] == [NORMALIZE] else types[2:]
    ok = types[:2] == [TRANSFORMER, POOLING] and all(t == DENSE for t in middle)
    if not ok:
        raise ModelFilesError(
            str(path),
            f"modules {types} are not supported; supported: Transformer, Pooling, any "
            "Dense modules and an optional Normalize, in that order",
        )
    folder = str(modules[1].get("path") or "1_Pooling")
    dense = tuple(
        _dense(root, str(m.get("path") or f"{i + 2}_Dense"))
        for i, m in enumerate(modules[2 : 2 + len(middle)])
    )
    return _pooling(root / folder / "config.json"), dense, types[-1] == NORMALIZE


def _dense(root: Path, folder: str) -> DenseModule:
    path = root / folder / "config.json"
    if not path.is_file():
        raise ModelFilesError(str(path), "missing the Dense module's config")
    config = read_json(path)
    name = str(config.get("activation_function", "torch.nn.modules.linear.Identity"))
    activation = _ACTIVATIONS.get(name)
    if activation is None:
        raise ModelFilesError(
            str(path),
            f"activation_function {name!r} is not supported; supported: {', '.join(_ACTIVATIONS)}",
        )
    try:
        sizes = int(config["in_features"]), int(config["out_features"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(str(path), f"missing or bad {exc}") from None
    if not (root / folder / "model.safetensors").is_file():
        raise ModelFilesError(
            str(root / folder / "model.safetensors"),
            "missing the Dense module's weights (safetensors; pytorch_model.bin is not read)",
        )
    return DenseModule(folder, *sizes, bool(config.get("bias", True)), activation)


def _pooling(path: Path) -> Pooling:
    if not path.is_file():
        raise ModelFilesError(
            str(path),
            "missing the sentence-transformers pooling config; a sentence-transformer "
            "folder needs it (or is this a cross-encoder without "
            "*ForSequenceClassification in config.json?)",
        )
    config = read_json(path)
    chosen = [mode for key, mode in _POOLING_KEYS.items() if config.get(key)]
    if len(chosen) != 1 or chosen[0] is None:
        on = [key for key in _POOLING_KEYS if config.get(key)]
        raise ModelFilesError(
            str(path),
            f"pooling {on or 'none'} is not supported; supported: exactly one of "
            "pooling_mode_cls_token, pooling_mode_mean_tokens, pooling_mode_max_tokens, "
            "pooling_mode_lasttoken",
        )
    if config.get("include_prompt", True) is False:
        raise ModelFilesError(
            str(path), "include_prompt false is not supported; supported: prompts pooled"
        )
    return chosen[0]


def _max_seq_length(root: Path) -> int | None:
    path = root / ST_CONFIG
    if not path.is_file():
        return _tokenizer_limit(root)
    value = read_json(path).get("max_seq_length")
    if value is None:
        return _tokenizer_limit(root)
    if not isinstance(value, int) or value < 3:
        raise ModelFilesError(str(path), f"max_seq_length {value!r} is not a length of 3 or more")
    return value


def _tokenizer_limit(root: Path) -> int | None:
    """``model_max_length`` of ``tokenizer_config.json``, what a cross-encoder
    (and a sentence-transformer without ``max_seq_length``) is cut at."""
    path = root / TOKENIZER_CONFIG
    if not path.is_file():
        return None
    value = read_json(path).get("model_max_length")
    if isinstance(value, int | float) and 3 <= value < _NO_LIMIT:
        return int(value)
    return None


def _prompts(root: Path) -> tuple[dict[str, str], str | None]:
    path = root / ST_PROMPTS
    if not path.is_file():
        return {}, None
    data = read_json(path)
    prompts = data.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(
        isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in prompts.items()
    ):
        raise ModelFilesError(str(path), "prompts must map names to texts")
    default = data.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ModelFilesError(
            str(path), f"default_prompt_name {default!r} is none of the prompts {sorted(prompts)}"
        )
    return dict(prompts), default
