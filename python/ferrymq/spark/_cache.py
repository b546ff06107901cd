"""A per-process cache of native clients for the Spark data source.

Spark pickles the data source, its readers and writers, and runs ``read()`` / ``write()`` in
Python worker processes that it reuses across tasks and micro-batches. Native clients cannot be
pickled, so they are created inside those methods and kept here, one per configuration and
process: the Python equivalent of the Kafka connector's consumer and producer pools. After a
``fork()`` the cache starts empty (the parent's clients belong to the parent).

A client is used through a lease (``with lease(key, factory) as client``). One that no lease
has held for the idle timeout is closed by a daemon thread, like the Kafka connector's
``spark.kafka.consumer.cache.timeout``: a reused worker must not keep connections (and
reconnection attempts to a server that went away) for queries that ended long ago. The timeout
is ``FERRYMQ_SPARK_CLIENT_IDLE_TIMEOUT`` seconds (default 300), read from the worker's
environment (``spark.executorEnv.FERRYMQ_SPARK_CLIENT_IDLE_TIMEOUT`` on a cluster).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from ..exceptions import InvalidArgumentError

__all__ = ["DEFAULT_IDLE_TIMEOUT", "IDLE_TIMEOUT_ENV", "clear", "idle_timeout", "lease", "size"]

T = TypeVar("T")

#: The environment variable holding the idle timeout in seconds.
IDLE_TIMEOUT_ENV = "FERRYMQ_SPARK_CLIENT_IDLE_TIMEOUT"
#: Seconds a client may stay unused before it is closed, when the variable is not set.
DEFAULT_IDLE_TIMEOUT = 300.0


class _Entry:
    __slots__ = ("client", "idle_since", "leases", "timeout")

    def __init__(self, client: Any, timeout: float) -> None:
        self.client = client
        self.leases = 0
        self.idle_since = time.monotonic()
        self.timeout = timeout  # the idle timeout of the latest lease


_lock = threading.Lock()
_wake = threading.Condition(_lock)
_clients: dict[Hashable, _Entry] = {}
_janitor: threading.Thread | None = None


def _after_fork_in_child() -> None:
    """The child starts empty, with fresh locks and no janitor: the parent's clients are the
    parent's (their connections and tasks did not survive the fork)."""
    global _lock, _wake, _janitor
    _lock = threading.Lock()
    _wake = threading.Condition(_lock)
    _clients.clear()
    _janitor = None


# Fork with the lock held by this thread, so no other thread holds it mid-update in the child.
os.register_at_fork(
    before=lambda: _lock.acquire(),
    after_in_parent=lambda: _lock.release(),
    after_in_child=_after_fork_in_child,
)


def idle_timeout() -> float:
    """The idle timeout in seconds, from :data:`IDLE_TIMEOUT_ENV` (or the default)."""
    raw = os.environ.get(IDLE_TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_IDLE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InvalidArgumentError(
            f"{IDLE_TIMEOUT_ENV}={raw!r}: expected a positive number of seconds"
        )
    return value


def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):  # best effort: the client is unused and unwanted
            close()


def _evict_idle() -> tuple[list[Any], float | None]:
    """Remove the entries idle for their timeout (under the lock): their clients, and the
    seconds until the next one could be due (``None``: every entry is leased)."""
    now = time.monotonic()
    due: list[Any] = []
    wait: float | None = None
    for key, entry in list(_clients.items()):
        if entry.leases:
            continue
        left = entry.timeout - (now - entry.idle_since)
        if left <= 0:
            due.append(entry.client)
            del _clients[key]
        else:
            wait = left if wait is None else min(wait, left)
    return due, wait


def _run_janitor() -> None:
    global _janitor
    me = threading.current_thread()
    while True:
        with _lock:
            if _janitor is not me:
                return
            due, wait = _evict_idle()
            if not due and not _clients:
                _janitor = None
                return
            if not due:
                _wake.wait(wait)  # a release or a new entry wakes it early
                continue
        for client in due:  # closing may wait for the network: never under the lock
            _close(client)


def _ensure_janitor() -> None:
    """Start the janitor thread if this process has none (called under the lock)."""
    global _janitor
    if _janitor is None:
        _janitor = threading.Thread(target=_run_janitor, name="ferrymq-spark-cache", daemon=True)
        _janitor.start()


@contextlib.contextmanager
def lease(key: Hashable, factory: Callable[[], T]) -> Iterator[T]:
    """The client cached under ``key`` in this process (created by ``factory`` on first use),
    held for the ``with`` block: a leased client is never closed for idleness.

    Keys should include everything that makes clients differ (kind, endpoints, credentials
    digest, group...). A factory that raises caches nothing.
    """
    timeout = idle_timeout()
    with _lock:
        entry = _clients.get(key)
        if entry is None:
            entry = _Entry(factory(), timeout)
            _clients[key] = entry
        entry.leases += 1
        entry.timeout = timeout
        _ensure_janitor()
    try:
        yield entry.client
    finally:
        with _lock:
            entry.leases -= 1
            entry.idle_since = time.monotonic()
            _wake.notify_all()


def size() -> int:
    """How many clients this process holds."""
    with _lock:
        return len(_clients)


def clear() -> None:
    """Close and forget every client of this process."""
    with _lock:
        clients = [e.client for e in _clients.values()]
        _clients.clear()
        _wake.notify_all()
    for c in clients:
        _close(c)


atexit.register(clear)
