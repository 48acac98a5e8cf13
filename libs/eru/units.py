"""Quantities at the user edge: exact CPU → pieces, human byte strings, percentages.

CPU amounts are converted through `decimal.Decimal` of their shortest repr, never through float multiplication, so
0.29 cores at share_base 100 is 29 pieces (float arithmetic gives 28.999…).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from eru.bounded import clip
from eru.errors import InvalidInput

_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_BYTES_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def to_decimal(value: object, field: str) -> Decimal:
    """A number (int, float, decimal string) as an exact Decimal; floats go through their shortest repr."""
    if isinstance(value, bool):
        raise InvalidInput(field, f"expected a number, got {clip(str(value))!r}")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            result = Decimal(value.strip())
        except InvalidOperation:
            raise InvalidInput(field, f"expected a number, got {clip(str(value))!r}") from None
    else:
        raise InvalidInput(field, f"expected a number, got {type(value).__name__}")
    if not result.is_finite():
        raise InvalidInput(field, f"expected a finite number, got {clip(str(value))!r}")
    return result


def cpu_to_pieces(cores: object, share_base: int, field: str = "cpu") -> int:
    """Cores (decimal) → whole pieces at `share_base` pieces per core; an inexact amount is an error."""
    amount = to_decimal(cores, field) * share_base
    if amount != amount.to_integral_value():
        raise InvalidInput(
            field,
            f"{cores} cores is not a whole number of pieces at share_base {share_base} "
            f"(1 piece = {Decimal(1) / share_base} cores)",
            share_base=share_base,
        )
    return int(amount)


def pieces_to_cores(pieces: int, share_base: int) -> float:
    """Pieces → cores, for display and JSON answers."""
    return pieces / share_base


MAX_BYTE_AMOUNT = 2**63 - 1  # PostgreSQL's bigint; no machine comes close


def parse_bytes(value: object, field: str = "memory") -> int:
    """Bytes from an integer or a human string (`512MiB`, `2G`, `1.5GiB`); fractional bytes are an error."""
    if isinstance(value, bool):
        raise InvalidInput(field, f"expected bytes (integer or string such as '512MiB'), got {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_BYTE_AMOUNT:
            raise InvalidInput(field, f"must be within ±{MAX_BYTE_AMOUNT} bytes")
        return value
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= MAX_BYTE_AMOUNT:
            return int(value)
        if value.is_integer():
            raise InvalidInput(field, f"must be within ±{MAX_BYTE_AMOUNT} bytes")
        raise InvalidInput(field, f"expected a whole number of bytes, got {value!r}")
    if not isinstance(value, str):
        raise InvalidInput(field, f"expected bytes (integer or string such as '512MiB'), got {type(value).__name__}")
    if len(value) > 64:
        raise InvalidInput(field, f"{len(value)} characters is too long for an amount of bytes (examples: '512MiB')")
    match = _BYTES_RE.match(value)
    if match is None:
        raise InvalidInput(field, f"cannot read {value!r} as bytes (examples: 1073741824, '512MiB', '2G')")
    number, unit = match.groups()
    multiplier = _BYTE_UNITS.get(unit.lower())
    if multiplier is None:
        raise InvalidInput(field, f"unknown unit {unit!r} in {value!r} (use B, K, M, G, T, KiB, MiB, GiB, TiB)")
    total = Decimal(number) * multiplier
    if total != total.to_integral_value():
        raise InvalidInput(field, f"{value!r} is not a whole number of bytes")
    return int(total)


def format_bytes(value: int) -> str:
    """A byte count for people: the largest binary unit that keeps at least one whole unit."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value}B"


def parse_percent(value: object, field: str) -> int:
    """An integer percentage in 0..100."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, f"expected an integer percentage, got {value!r}")
    if not 0 <= value <= 100:
        raise InvalidInput(field, f"percentage must be within 0..100, got {value}")
    return value


_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SECOND_UNITS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def parse_seconds(value: object, field: str) -> float:
    """A duration in seconds: a number of seconds or one with a unit (`500ms`, `5s`, `1.5m`, `1h`)."""
    match = _SECONDS.match(str(value))
    if match is None:
        raise InvalidInput(field, f"cannot read {value!r} as a duration (examples: 5, '5s', '500ms', '1m')")
    number, unit = match.groups()
    return float(Decimal(number) * _SECOND_UNITS[unit or "s"])
