"""Waiting for a condition in tests: poll until it holds or fail with what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``cond`` every 20 ms until it is true; ``AssertionError`` naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


async def async_wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """`wait_for` for coroutines: yields to the event loop between polls."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def first_batch(receive: Callable[[], Sequence[T]], tries: int = 20) -> list[T]:
    """The first non-empty answer of ``receive`` (each call waits by itself), in at most
    ``tries`` calls; empty if every call was."""
    for _ in range(tries):
        got = receive()
        if got:
            return list(got)
    return []
