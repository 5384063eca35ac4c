"""A model folder as every lane's transport sees it on the host: the checks
that make a catalog entry available or not, the tokenizer the host counts
and cuts with, what a catalog shows of the model (its traits), and the
checks before a worker launches. No lane serves a model any other way, so
the host counts what every lane's worker packs.

Cheap where a catalog is built: JSON files and the safetensors header, with
each tokenizer parsed once and each weights file hashed once per file size
and modification time.
"""

from __future__ import annotations

import functools
from pathlib import Path

from synapse_core.plugin import Kind, ModelTraits, Scorer, Task

from . import files
from .errors import ModelFilesError
from .folder import Layout
from .outputs import offered
from .packing import PairTemplate
from .tokenizer import HFTokenizer, check_fits, tokenizer_of

Framing = tuple[bool, PairTemplate | None, bool, bool]


def layout_of(located: files.ModelFiles, instruction: str | None = None) -> Layout:
    """The folder's layout, with the catalog's LLM-reranker ``instruction``
    (``options.instruction``) in its prompt; :class:`ModelFilesError` names
    the file at fault, or ``options.instruction`` where the folder has no
    prompt to put it in."""
    layout = files.check_present(located)
    try:
        return layout.with_instruction(instruction)
    except ValueError as exc:
        raise ModelFilesError("options.instruction", str(exc)) from None


def host_tokenizer(path: Path, layout: Layout) -> HFTokenizer:
    """The folder's tokenizer, one per file size and modification time and
    way of framing: it frames and encodes as the worker's does
    (``synapse_models.model.layout_tokenizer``), so the host counts and cuts
    what the worker packs; the one the catalog checked is the one that
    serves (the file is parsed once), and a replaced file is read again."""
    stat = path.stat()
    return _tokenizer_at(path, stat.st_size, stat.st_mtime_ns, *framing_of(layout))


def framing_of(layout: Layout) -> Framing:
    """What decides how the folder's tokenizer frames and encodes texts."""
    return layout.cross_encoder, layout.template, layout.causal, layout.strips_texts


@functools.lru_cache(maxsize=64)
def _tokenizer_at(
    path: Path,
    size: int,
    mtime_ns: int,
    pairs: bool,
    template: PairTemplate | None,
    decoder: bool,
    strip: bool,
) -> HFTokenizer:
    return tokenizer_of(path, pairs, template, decoder, strip)


def tokenizer_problem(located: files.ModelFiles, layout: Layout) -> str:
    """Why the folder's ``tokenizer.json`` cannot serve ("" when it can): not
    a ``tokenizers`` file, framing no sequence as the family needs, or
    another model's vocabulary. Remembered per file size and modification
    time (of the tokenizer, and the rows its weights' header gives), so
    listing a catalog parses each file once."""
    path = located.tokenizer
    try:
        stat = path.stat()
        rows = files.vocab_rows(located.weights, layout)
    except ModelFilesError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or exc}"
    padded = layout.family.vocab_padded
    return _tokenizer_problem(
        path, stat.st_size, stat.st_mtime_ns, framing_of(layout), rows, padded
    )


@functools.lru_cache(maxsize=64)
def _tokenizer_problem(
    path: Path, size: int, mtime_ns: int, framing: Framing, rows: int, padded: bool
) -> str:
    try:
        check_fits(_tokenizer_at(path, size, mtime_ns, *framing), rows, padded)
    except ModelFilesError as exc:
        return str(exc)
    return ""


def folder_problem(
    located: files.ModelFiles, layout: Layout, task: Task, buckets: tuple[int, ...] | None
) -> str:
    """Why the folder cannot serve a catalog entry of ``task`` with
    ``buckets`` ("" when it can): a cross-encoder asked to embed, a
    classifier asked for anything but classify (or another model asked to
    classify), a tokenizer that does not fit, buckets longer than the
    model's positions."""
    if layout.classifier and task != "classify":
        return (
            f"{located.config}: a classifier of {len(layout.labels)} labels "
            f"({', '.join(layout.labels)}; {layout.architecture}, ForSequenceClassification) "
            'labels texts and pairs; give it task = "classify"'
        )
    if task == "classify" and not layout.classifier:
        return (
            f"{located.config}: not a classifier (a *ForSequenceClassification "
            f"model of more than one label); this folder is a {layout.kind}, give it "
            f'task = "{"rerank" if layout.cross_encoder else "embed"}"'
        )
    if layout.cross_encoder and task == "embed":
        return (
            f"{located.config}: a cross-encoder ({layout.architecture}, "
            'ForSequenceClassification) scores pairs; give it task = "rerank"'
        )
    if problem := tokenizer_problem(located, layout):
        return problem
    if buckets and max(buckets) > layout.positions:
        return (
            f"options.buckets: {max(buckets)} is longer than the "
            f"{layout.positions} positions the model has ({located.config}); use "
            "shorter buckets, or leave them out to have them from the folder"
        )
    return ""


def traits_of(layout: Layout, task: Task) -> ModelTraits:
    """What a catalog shows of the model: its prompts, its pooling, the
    outputs it computes, a classifier's labels, and whether a rerank model is a cross-encoder, an
    LLM reranker (with the instruction its prompt holds), a multi-vector
    model scoring by MaxSim, or a bi-encoder."""
    scorer: Scorer | None = None
    if task == "rerank":
        scorer = "cross-encoder" if layout.cross_encoder else "bi-encoder"
        if layout.template is not None:
            scorer = "llm-reranker"
        elif layout.colbert and not layout.cross_encoder:
            scorer = "maxsim"
    return ModelTraits(
        prompts=layout.prompts,
        default_prompt=layout.default_prompt,
        scorer=scorer,
        pooling=None if layout.cross_encoder else layout.pooling,
        outputs=frozenset(Kind(name) for name in offered(layout))
        | ({Kind.SCORE} if task == "rerank" else set()),
        instruction=None if layout.template is None else layout.template.instruction,
        labels=layout.labels,
        multi_label=layout.multi_label,
        matryoshka_dims=layout.matryoshka,
        normalized=None if layout.cross_encoder else layout.normalize,
    )


@functools.lru_cache(maxsize=64)
def _verified(path: Path, size: int, mtime_ns: int, expected: str | None) -> str:
    return files.verify_weights(files.ModelFiles(path.parent, "", expected))


def verified_sha256(located: files.ModelFiles) -> str:
    """The weights' sha256, checked against the expected one; remembered per
    file size and modification time."""
    stat = located.weights.stat()
    return _verified(located.weights, stat.st_size, stat.st_mtime_ns, located.sha256)


def verify_before_launch(located: files.ModelFiles, instruction: str | None = None) -> None:
    """The checks a worker would fail on, made on the host so the caller gets
    a typed error naming the file (a worker can only exit)."""
    layout = layout_of(located, instruction)
    verified_sha256(located)
    tokenizer = host_tokenizer(located.tokenizer, layout)
    check_fits(tokenizer, files.vocab_rows(located.weights, layout), layout.family.vocab_padded)
