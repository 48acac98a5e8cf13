"""Exact quantities: CPU → pieces without float truncation, human byte strings, clear errors."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eru.errors import InvalidInput
from eru.units import cpu_to_pieces, parse_bytes, parse_percent


@pytest.mark.parametrize(
    ("cores", "share_base", "pieces"),
    [(0.29, 100, 29), (1.7, 100, 170), ("1.5", 100, 150), (0.001, 1000, 1), (2, 100, 200), (0.57, 100, 57)],
)
def test_cpu_converts_exactly(cores: object, share_base: int, pieces: int) -> None:
    assert cpu_to_pieces(cores, share_base) == pieces


@given(st.integers(min_value=0, max_value=100_000))
def test_every_two_decimal_amount_is_exact_at_share_base_100(hundredths: int) -> None:
    cores = float(Decimal(hundredths) / 100)
    assert cpu_to_pieces(cores, 100) == hundredths


def test_an_inexact_amount_says_so() -> None:
    with pytest.raises(InvalidInput) as caught:
        cpu_to_pieces(0.333, 100, field="cpu_request")
    assert caught.value.field == "cpu_request"
    assert "not a whole number of pieces" in caught.value.reason


@pytest.mark.parametrize("bad", [True, None, "abc", float("nan"), float("inf"), [1]])
def test_cpu_rejects_non_numbers(bad: object) -> None:
    with pytest.raises(InvalidInput):
        cpu_to_pieces(bad, 100)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("512MiB", 512 * 1024**2),
        ("2G", 2 * 10**9),
        ("18GB", 18 * 10**9),
        ("1.5GiB", 3 * 1024**3 // 2),
        (1024, 1024),
        ("1024", 1024),
        ("4 KiB", 4096),
        (2.0, 2),
    ],
)
def test_bytes_read_human_strings(text: object, value: int) -> None:
    assert parse_bytes(text) == value


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("12XB", "unknown unit"),
        ("lots", "cannot read"),
        (1.5, "whole"),
        ("0.5B", "whole number"),
        (True, "expected bytes"),
    ],
)
def test_bytes_errors_name_the_problem(bad: object, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        parse_bytes(bad, "memory_request")


def test_percent_range() -> None:
    assert parse_percent(65, "cpu_evict") == 65
    with pytest.raises(InvalidInput, match=r"0\.\.100"):
        parse_percent(101, "cpu_evict")
