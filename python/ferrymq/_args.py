"""Argument helpers shared by the facades."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

__all__ = ["as_list"]

_T = TypeVar("_T")


def as_list(value: Iterable[_T], field: str, what: str) -> list[_T]:
    """``list(value)``, or a ``TypeError`` naming ``field`` when ``value`` is not iterable."""
    if not isinstance(value, Iterable):
        raise TypeError(f"{field}: must be {what}, not {type(value).__name__}")
    return list(value)
