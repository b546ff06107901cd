"""Delivery reports of ``Producer.produce`` for the backends that send at once (JMQ4, NATS).

The message is sent inside ``produce``; its report waits here, bounded by ``max_pending``, until
``poll``/``flush`` runs the callback on the caller's thread, as the RocketMQ producer's batcher
does for its own reports.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from datetime import timedelta

from . import _native
from .exceptions import FerryError

__all__ = ["Deliveries"]

Callback = Callable[[FerryError | None, object], object]


class Deliveries:
    """Reports of sent messages not yet handed to their callbacks."""

    def __init__(self, max_pending: int) -> None:
        self._max_pending = max_pending
        self._reports: collections.deque[tuple[Callback, FerryError | None, object]] = (
            collections.deque()
        )

    def add(self, callback: Callback | None, err: FerryError | None, receipt: object) -> None:
        """Keep one report; a full queue first runs the callbacks waiting."""
        if callback is None:
            return
        if len(self._reports) >= self._max_pending:
            self.poll(0.0)
        self._reports.append((callback, err, receipt))

    def poll(self, timeout: float | timedelta = 0.0) -> int:
        """Run every waiting callback (the sends already finished: nothing to wait for)."""
        _native.seconds("timeout", timeout, zero=True)
        n = 0
        while self._reports:
            callback, err, receipt = self._reports.popleft()
            callback(err, receipt)
            n += 1
        return n

    def flush(self, timeout: float | timedelta | None = None) -> int:
        """Run every waiting callback; returns how many messages remain (always 0)."""
        if timeout is not None:
            _native.seconds("timeout", timeout, zero=True)
        self.poll(0.0)
        return 0

    def __len__(self) -> int:
        return len(self._reports)
