"""The periodic stats callback of every client (``stats_callback=`` with ``stats_interval=``),
written once: a daemon thread of ours calls ``callback(client.stats())`` every interval until
the client is closed (or garbage-collected). The dict is built first and the callback runs
after, never under a ferrymq lock; an exception in it is logged on the ``ferrymq`` logger and
the next interval comes as usual."""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from .exceptions import InvalidArgumentError

__all__ = ["DEFAULT_STATS_INTERVAL", "StatsCallback", "StatsReporter", "stats_reporter"]

StatsCallback = Callable[[dict[str, Any]], object]

#: Seconds between two calls of a ``stats_callback`` given without ``stats_interval``.
DEFAULT_STATS_INTERVAL = 5.0

_log = logging.getLogger("ferrymq")


class _HasStats(Protocol):
    def stats(self) -> dict[str, Any]: ...


def _interval(value: float | timedelta | None) -> float:
    if value is None:
        return DEFAULT_STATS_INTERVAL
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgumentError(
            f"stats_interval: must be seconds (int, float or timedelta), not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"stats_interval: must be above 0 seconds, not {seconds}")
    return seconds


class StatsReporter:
    """Calls ``callback(owner.stats())`` every ``interval`` seconds on a thread of its own
    (started by :meth:`start`, ended by :meth:`stop` or when ``owner`` is gone)."""

    def __init__(self, owner: _HasStats, callback: StatsCallback, interval: float) -> None:
        self._owner = weakref.ref(owner)
        self._callback = callback
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; not again after :meth:`stop`)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            name = f"ferrymq-stats-{type(self._owner()).__name__}"
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop calling the callback; waits for a call in progress unless called from it."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        t = self._thread
        return t is not None and t.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            alive, stats = self._read()
            if not alive:
                return
            if stats is None:
                continue
            try:
                self._callback(stats)
            except Exception:
                _log.exception("the stats_callback raised (the client goes on)")

    def _read(self) -> tuple[bool, dict[str, Any] | None]:
        owner = self._owner()
        if owner is None:
            return False, None
        try:
            return True, owner.stats()
        except Exception:
            _log.exception("stats() failed for the stats_callback")
            return True, None


def stats_reporter(
    owner: _HasStats,
    callback: StatsCallback | None,
    interval: float | timedelta | None,
) -> StatsReporter | None:
    """Check ``stats_callback`` and ``stats_interval`` (``InvalidArgumentError`` naming the
    one that is wrong) and make the reporter of ``owner``, not yet started; ``None`` without a
    callback."""
    if callback is None:
        if interval is not None:
            raise InvalidArgumentError("stats_interval: given without a stats_callback")
        return None
    if not callable(callback):
        raise InvalidArgumentError(
            f"stats_callback: must be callable with the stats dict, not {type(callback).__name__}"
        )
    return StatsReporter(owner, callback, _interval(interval))
