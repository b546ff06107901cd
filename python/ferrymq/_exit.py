"""Interpreter exit: finish every client whose threads call into Python, before CPython
finalizes.

A program may return with a push consumer still consuming or a publisher still delivering
events. Once CPython finalizes, a thread that takes the GIL is ended in the middle of whatever it
runs, which through ferrymq's Rust frames aborts the process. So, at exit:

1. every tracked client is closed, newest first (``_close_at_exit``: a push consumer closes with
   its ``shutdown_timeout``, waiting for running callbacks; a publisher drains up to its
   ``wait_timeout`` and then stops, and its event thread finishes);
2. then, as ferrymq's last ``atexit`` callback, the native module is told: from then on the
   log forwarder and the transaction checkers stop calling into Python, and the listener
   threads of a consumer whose close timed out park instead of calling the listener again.
   Blocking calls and async methods keep working: ``atexit`` callbacks registered before
   ferrymq was imported (``logging``'s, for one) still run after this one.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from typing import Protocol

from . import _native

_log = logging.getLogger("ferrymq")


class _ClosesAtExit(Protocol):
    def _close_at_exit(self) -> None: ...


# Clients by the order they started; weak, so that tracking never keeps one alive.
_clients: weakref.WeakValueDictionary[int, _ClosesAtExit] = weakref.WeakValueDictionary()
_tracked: weakref.WeakSet[_ClosesAtExit] = weakref.WeakSet()
_next = 0


def track(client: _ClosesAtExit) -> None:
    """Close `client` at interpreter exit if it is still open then (closing twice is harmless)."""
    global _next
    if client not in _tracked:
        _tracked.add(client)
        _next += 1
        _clients[_next] = client


# atexit runs callbacks last-registered first: clients close (and may still log or call
# listeners), and only then do ferrymq's threads stop calling into the interpreter.
atexit.register(_native.python_exiting)


@atexit.register
def _close_clients() -> None:
    for key in sorted(_clients.keys(), reverse=True):
        client = _clients.get(key)
        if client is None:
            continue
        try:
            client._close_at_exit()
        except Exception:  # best effort at exit
            _log.exception("interpreter exit: closing %r failed", client)
