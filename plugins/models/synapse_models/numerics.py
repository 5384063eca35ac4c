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
