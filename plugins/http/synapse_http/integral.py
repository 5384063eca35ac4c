"""Whole numbers written as floats (``65.0``) where a body takes an integer.

JSON has one number type, and JSON Schema counts ``65.0`` as an integer, so a
client (or a generated one) may send ``"dimensions": 65.0`` or token ids that
went through a float array. msgspec decodes integer fields strictly; a body it
refuses for a float is decoded again here with every whole float made an int.
Only that refusal pays for the second decoding: the usual body decodes once.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

#: how msgspec's refusal of a float where an int (or a union with one) goes ends
FLOAT_REFUSED = "got `float`"


def refused_a_float(exc: msgspec.DecodeError) -> bool:
    """Whether ``exc`` is msgspec refusing a float where the schema has no float."""
    return isinstance(exc, msgspec.ValidationError) and FLOAT_REFUSED in str(exc)


def decode_whole(body: bytes, schema: type[T]) -> T:
    """``body`` as ``schema``, each float with no fractional part taken as an
    int; raises msgspec's error naming the field when that is not enough."""
    return msgspec.convert(_whole(msgspec.json.decode(body)), schema)


def _whole(value: Any) -> Any:
    if type(value) is float:
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if type(value) is list:
        return [_whole(item) for item in value]
    if type(value) is dict:
        return {key: _whole(item) for key, item in value.items()}
    return value
