"""The live clients that exporters read: every client facade with a native
``metrics_snapshot()`` registers itself here when created (a weak reference and its creation
time, nothing else), so that :func:`ferrymq.telemetry.enable` sees the clients created before
and after it. A garbage-collected client leaves by itself; a closed one is reported once more
(its final figures) by each reader, then skipped. Imports nothing (not OpenTelemetry: ``import
ferrymq`` must not)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

__all__ = ["clients", "register"]


_lock = threading.Lock()
#: Client facade → its creation time (ns since the epoch: the start of its cumulative series).
_clients: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _after_fork_in_child() -> None:
    """A fresh lock: an exporter's thread may have held the parent's while the process forked,
    and no thread of the child would ever release it (the next client would hang)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def register(client: object) -> None:
    """Make ``client`` (a facade whose ``_impl`` has ``metrics_snapshot()``) visible to
    exporters until it is garbage-collected. Cheap: one weak reference."""
    with _lock:
        _clients[client] = time.time_ns()


def clients() -> list[tuple[Any, int]]:
    """The registered clients still alive, with their creation times."""
    with _lock:
        return list(_clients.items())
