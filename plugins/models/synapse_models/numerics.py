"""The float32 building blocks every family's numpy forward pass shares."""

from __future__ import annotations

import numpy as np

from .weights import F32

_SQRT_HALF = np.float32(np.sqrt(0.5))
# Abramowitz & Stegun 7.1.26: erf to an absolute error below 1.5e-7, enough
# for float32; numpy has no erf and BERT's GELU is the exact (erf) one.
_P = np.float32(0.3275911)
_A = tuple(
    np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
_ONE, _HALF = np.float32(1.0), np.float32(0.5)
#: padding keys get this added to their attention scores: exp() of it is exactly 0
MASKED = np.finfo(np.float32).min


def erf(x: F32) -> F32:
    """The error function of ``x`` to float32 precision."""
    a = np.abs(x)
    t = a * _P
    t += _ONE
    np.reciprocal(t, out=t)
    poly = t * _A[0]
    for coefficient in _A[1:]:
        poly += coefficient
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(_ONE, poly, out=poly)
    np.copysign(poly, x, out=poly)
    return poly


def gelu(x: F32) -> F32:
    """``x * Phi(x)`` with the exact normal CDF, computed in place in ``x``."""
    cdf = erf(x * _SQRT_HALF)
    cdf += _ONE
    cdf *= _HALF
    x *= cdf
    return x


def layer_norm(x: F32, g: F32, b: F32 | None, eps: float) -> F32:
    """LayerNorm over the last axis; ``b`` ``None``: a norm without bias."""
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: F32 = centred / np.sqrt(var + np.float32(eps)) * g
    if b is not None:
        out += b
    return out


def softmax_(scores: F32) -> F32:
    """Softmax over the last axis, in place."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def key_bias(mask: F32) -> F32:
    """(rows, 1, 1, width): what padding keys add to every query's scores."""
    out: F32 = ((np.float32(1.0) - mask) * MASKED)[:, None, None, :]
    return out


_TANH_C = np.float32(np.sqrt(2.0 / np.pi))
_CUBIC = np.float32(0.044715)


def gelu_tanh(x: F32) -> F32:
    """The tanh approximation of GELU (torch's ``gelu(approximate="tanh")``,
    transformers' ``gelu_pytorch_tanh``), computed in place in ``x``."""
    inner = x * x
    inner *= _CUBIC
    inner += _ONE
    inner *= x
    inner *= _TANH_C
    np.tanh(inner, out=inner)
    inner += _ONE
    inner *= _HALF
    x *= inner
    return x


def rms_norm(x: F32, g: F32, eps: float) -> F32:
    """RMSNorm over the last axis: ``x / sqrt(mean(x²) + eps) * g``."""
    mean_square = (x * x).mean(axis=-1, keepdims=True)
    mean_square += np.float32(eps)
    out: F32 = x / np.sqrt(mean_square) * g
    return out


def rotary(positions: int, dims: int, base: float) -> tuple[F32, F32]:
    """The cosines and sines (positions, dims) of rotary position embeddings
    in their rotate-half layout (each frequency twice: once per half), in
    float32 as transformers computes them."""
    exponents = np.arange(0, dims, 2, dtype=np.float32) / np.float32(dims)
    inverse = (np.float32(1.0) / np.power(np.float32(base), exponents)).astype(np.float32)
    angles = np.arange(positions, dtype=np.float32)[:, None] * inverse[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles), np.sin(angles)


def rotate(x: F32, cos: F32, sin: F32) -> F32:
    """``x`` (..., width, dims) turned by its position's angles (rotate-half):
    ``x * cos + (-x₂, x₁) * sin`` with ``cos`` and ``sin`` (width, dims)."""
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    turned *= sin
    out: F32 = x * cos
    out += turned
    return out


def silu(x: F32) -> F32:
    """``x * sigmoid(x)``, with the sigmoid as ``(1 + tanh(x/2)) / 2`` (no overflow)."""
    sigmoid = np.tanh(x * _HALF)
    sigmoid += _ONE
    sigmoid *= _HALF
    out: F32 = x * sigmoid
    return out
