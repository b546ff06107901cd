"""Helpers of the push consumer that are simpler in Python: running batches of ``async def``
listener calls on an event loop, and the private loop thread used when an async listener is
started from blocking code."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from . import _hooks


class _Completion(Protocol):
    def done(self, i: int, result: object) -> None: ...
    def error(self, i: int, error: BaseException) -> None: ...


def run_batch(
    listener: Callable[[Any], Awaitable[object]],
    views: Sequence[object],
    completion: _Completion,
    attributes: dict[str, object] | None = None,
) -> None:
    """Start one task per message on the running loop; each reports to ``completion``. While
    tracing is enabled, each call runs inside its process span (``_hooks.process_async``,
    given the consumer's span ``attributes``)."""
    hook = _hooks.process_async
    for i, view in enumerate(views):
        try:
            task = asyncio.ensure_future(
                listener(view) if hook is None else hook(listener, view, attributes or {})
            )
        except BaseException as exc:  # the listener raised before its first await
            completion.error(i, exc)
            continue
        task.add_done_callback(functools.partial(_report, completion, i))


def _report(completion: _Completion, i: int, task: asyncio.Future[object]) -> None:
    if task.cancelled():
        completion.error(i, asyncio.CancelledError("the listener task was cancelled"))
        return
    exc = task.exception()
    if exc is not None:
        completion.error(i, exc)
    else:
        completion.done(i, task.result())


def start_private_loop() -> asyncio.AbstractEventLoop:
    """An event loop running forever on a daemon thread (``ferrymq-listener-loop``)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()
        loop.close()

    threading.Thread(target=run, name="ferrymq-listener-loop", daemon=True).start()
    ready.wait()
    return loop


def stop_private_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop a loop made by :func:`start_private_loop` (from any thread)."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
