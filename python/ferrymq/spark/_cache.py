"""A per-process cache of native clients for the Spark data source.

Spark pickles the data source, its readers and writers, and runs ``read()`` / ``write()`` in
Python worker processes that it reuses across tasks and micro-batches. Native clients cannot be
pickled, so they are created inside those methods and kept here, one per configuration and
process: the Python equivalent of the Kafka connector's consumer and producer pools. After a
``fork()`` the cache starts empty (the parent's clients belong to the parent).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["clear", "get_or_create", "size"]

T = TypeVar("T")

_lock = threading.Lock()
_pid = os.getpid()
_clients: dict[Hashable, Any] = {}


def _check_pid() -> None:
    global _pid
    if os.getpid() != _pid:
        _clients.clear()
        _pid = os.getpid()


def get_or_create(key: Hashable, factory: Callable[[], T]) -> T:
    """The client cached under ``key`` in this process, created by ``factory`` on first use.

    Keys should include everything that makes clients differ (kind, endpoints, credentials
    digest, group...). A factory that raises caches nothing.
    """
    with _lock:
        _check_pid()
        client = _clients.get(key)
        if client is None:
            client = factory()
            _clients[key] = client
        return client


def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):  # closing is best effort at shutdown
            close()


def size() -> int:
    """How many clients this process holds."""
    with _lock:
        _check_pid()
        return len(_clients)


def clear() -> None:
    """Close and forget every client of this process."""
    with _lock:
        _check_pid()
        clients = list(_clients.values())
        _clients.clear()
    for c in clients:
        _close(c)


atexit.register(clear)
