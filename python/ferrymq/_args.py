"""Argument helpers shared by the facades: the checks several classes make, stated once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from .exceptions import InvalidArgumentError

__all__ = ["as_list", "known_options", "nonblank", "refuse"]

_T = TypeVar("_T")


def as_list(value: Iterable[_T], field: str, what: str) -> list[_T]:
    """``list(value)``, or a ``TypeError`` naming ``field`` when ``value`` is not iterable."""
    if not isinstance(value, Iterable):
        raise TypeError(f"{field}: must be {what}, not {type(value).__name__}")
    return list(value)


def refuse(why: str, options: Mapping[str, object], unset: tuple[object, ...] = (None,)) -> None:
    """Options that mean nothing to the protocol at hand are refused rather than ignored: an
    ``InvalidArgumentError("<name>: <why>")`` for the first one whose value is not (identical
    to) one of ``unset``."""
    for name, value in options.items():
        if not any(value is u for u in unset):
            raise InvalidArgumentError(f"{name}: {why}")


def known_options(
    field: str, options: Mapping[str, Any] | None, known: frozenset[str]
) -> dict[str, Any]:
    """A copy of the ``options`` mapping passed through to a native client (``jmq_options``,
    ``nats_options``); an unknown name raises ``InvalidArgumentError`` naming ``field``."""
    extra = dict(options or {})
    unknown = sorted(set(extra) - known)
    if unknown:
        names = ", ".join(sorted(known))
        raise InvalidArgumentError(f"{field}: unknown option {unknown[0]!r} (known: {names})")
    return extra


def nonblank(group: object, why: str) -> None:
    """Check that ``group`` is a string with more than white space, else
    ``InvalidArgumentError("group: <why>")``."""
    if not isinstance(group, str) or not group.strip():
        raise InvalidArgumentError(f"group: {why}")
