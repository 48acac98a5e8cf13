"""Resource amounts at the user edge → exact `Fraction`s, and back to JSON numbers.

`cpu` is in cores (a decimal number), `memory` in bytes (an integer or a human string such as "18GB"), any other
resource name a plain non-negative number in its own unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from eru.bounded import clip
from eru.errors import InvalidInput
from eru.units import parse_bytes, to_decimal


def parse_amount(resource: str, value: object, field: str) -> Fraction:
    """One amount, exact; negative is an `InvalidInput` naming `field`."""
    amount = Fraction(parse_bytes(value, field)) if resource == "memory" else Fraction(to_decimal(value, field))
    if amount < 0:
        raise InvalidInput(field, f"must be ≥ 0, got {value!r}")
    return amount


def parse_resources(raw: object, field: str) -> dict[str, Fraction]:
    """A JSON object {resource: amount} → exact amounts, keeping the given order."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object {{resource: amount}}, got {type(raw).__name__}")
    result: dict[str, Fraction] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(field, f"resource names must be non-empty strings, got {name!r}")
        result[name] = parse_amount(name, value, f"{field}.{name}")
    return result


def parse_weight(value: object, field: str) -> Fraction:
    """A fairness weight: a number > 0."""
    weight = Fraction(to_decimal(value, field))
    if weight <= 0:
        raise InvalidInput(field, f"must be > 0, got {clip(str(value))!r}")
    if weight > MAX_WEIGHT:
        raise InvalidInput(field, f"must not exceed {MAX_WEIGHT:,}")
    return weight


MAX_WEIGHT = 10**9  # beyond any sensible ratio; far larger weights only make shares unprintable


def json_number(amount: Fraction) -> int | float:
    """An exact amount as a JSON number: an int when whole, else a float."""
    if amount.denominator == 1:
        return int(amount)
    return float(amount)


def json_resources(amounts: Mapping[str, Fraction]) -> dict[str, int | float]:
    """{resource: JSON number}."""
    return {name: json_number(amount) for name, amount in amounts.items()}


def json_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """Nested numbers (Fractions anywhere) as JSON numbers."""
    result: dict[str, Any] = {}
    for key, value in details.items():
        if isinstance(value, Fraction):
            result[key] = json_number(value)
        elif isinstance(value, Mapping):
            result[key] = json_details(value)
        else:
            result[key] = value
    return result
