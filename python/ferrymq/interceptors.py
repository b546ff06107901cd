"""Interceptors: user hooks at the hook points of the Java client (before and after a send, a
receive, a listener's call, an ack, a nack, a dead-letter forward and a transaction's end).

An :class:`Interceptor` overrides ``before(context, messages)`` and/or
``after(context, messages, error)``; the clients take a list of them as ``interceptors=[...]``
and call them in order (``after`` in reverse order) around each operation, once per call with
the call's messages (a batch is one call with the list). ``context`` is a :class:`HookContext`;
``error`` is the exception the operation raised, or ``None``. Hooks read; they cannot change
the messages or the outcome: an exception raised in a hook is logged with its traceback on the
``ferrymq`` logger and the operation goes on as if the hook had returned.

A hook may be an ``async def``. In the ``*_async`` methods and in an ``async def`` listener's
call it is awaited there, on the caller's event loop. Anywhere else (the blocking methods, a
plain-callable listener's thread, :meth:`ferrymq.Producer.poll`) it runs on ferrymq's hook
loop (one daemon thread with its own event loop) and the calling thread waits for it to finish
(the GIL released), so ``before`` has always finished when the operation starts. A hook that
waits for the client it intercepts from that loop would wait for itself.

This module holds the public types (:class:`Interceptor`, :class:`HookPoint`,
:class:`HookContext`) and ``Chain``, what each client keeps when interceptors are registered
(``None`` otherwise: no interceptor costs one attribute read per call).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .exceptions import InvalidArgumentError

__all__ = ["HookContext", "HookPoint", "Interceptor"]

_log = logging.getLogger("ferrymq")
_T = TypeVar("_T")


class HookPoint(enum.Enum):
    """Where a hook runs."""

    #: a send: ``send``, ``send_batch`` (one call, the list), ``produce`` (``after`` when the
    #: delivery is reported, in ``poll``/``flush``), a transaction's half message
    SEND = "send"
    #: a simple consumer's receive (``before`` with no messages, ``after`` with those received)
    RECEIVE = "receive"
    #: a push consumer's listener call (one message)
    CONSUME = "consume"
    #: an acknowledgement: a simple consumer's ``ack``; a push consumer's acks are made by its
    #: engine, which reports each attempt (one call with the messages of one ``AckMessage``)
    ACK = "ack"
    #: a change of invisible duration (the message is delivered again later): a simple
    #: consumer's ``nack``, or a push consumer's engine after a failed consumption
    NACK = "nack"
    #: a push consumer's forward of a message to the dead-letter queue (FIFO groups, at the
    #: last attempt)
    DEAD_LETTER = "dead_letter"
    #: a transaction's commit (with the messages it sent)
    COMMIT = "commit"
    #: a transaction's rollback (with the messages it sent)
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class HookContext:
    """What a hook is told about the operation besides its messages.

    Attributes:
        point: the :class:`HookPoint`.
        protocol: ``"rocketmq"``, ``"remoting"``, ``"jmq"`` or ``"nats"``.
        client_id: the client's id (``None`` before a consumer is started).
        topic: the topic (NATS: subject) of the call's first message; ``None`` without one
            (a receive's ``before``).
        group: the consumer group (``None`` for producers).
        attempt: the first message's delivery attempt (consumer hook points), else ``None``.
        duration: seconds the operation took (``after`` only; for ``produce``, from the call
            to the delivery report).
        outcome: ``after`` only: the receipts of a send (a list, in order), the
            :class:`ferrymq.ConsumeResult` or ``None`` a listener returned; else ``None``.
    """

    point: HookPoint
    protocol: str
    client_id: str | None
    topic: str | None
    group: str | None
    attempt: int | None = None
    duration: float | None = None
    outcome: object = None


class Interceptor:
    """Base class of interceptors: override ``before``, ``after`` or both (each may be an
    ``async def``). Any object with a callable ``before`` and/or ``after`` of these signatures
    is accepted too."""

    def before(self, context: HookContext, messages: Sequence[Any]) -> object:
        """Called before the operation with its messages (a list)."""
        return None

    def after(
        self, context: HookContext, messages: Sequence[Any], error: BaseException | None
    ) -> object:
        """Called after the operation: ``error`` is what it raised (or ``None``),
        ``context.duration`` its time and ``context.outcome`` its result."""
        return None


def _hook(interceptor: object, name: str) -> Callable[..., object] | None:
    """The bound hook ``name`` of ``interceptor`` if it has one that does something."""
    if isinstance(interceptor, Interceptor) and getattr(type(interceptor), name) is getattr(
        Interceptor, name
    ):
        return None
    method = getattr(interceptor, name, None)
    return method if callable(method) else None


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
#: Hook loops inherited from a parent process: their threads did not survive the fork, so they
#: can neither run nor be closed; kept here so that they are never collected half-alive.
_orphans: list[asyncio.AbstractEventLoop] = []


def _after_fork_in_child() -> None:
    """A forked child starts its own hook loop on first use (the parent's has no thread here)."""
    global _loop, _loop_lock
    if _loop is not None:
        _orphans.append(_loop)
    _loop = None
    _loop_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _hook_loop() -> asyncio.AbstractEventLoop:
    """ferrymq's hook loop, started on first use (a daemon thread ``ferrymq-hook-loop``)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="ferrymq-hook-loop", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def _failed(hook: Callable[..., object], context: HookContext, when: str) -> None:
    _log.exception(
        "ferrymq: interceptor %r raised in %s of %s; the operation goes on",
        getattr(hook, "__self__", hook),
        when,
        context.point.value,
    )


async def _awaited(result: Awaitable[object]) -> None:
    await result


class Chain:
    """The interceptors of one client, with what its contexts say about it."""

    __slots__ = ("_after", "_before", "_client_id", "group", "protocol")

    def __init__(
        self,
        interceptors: Sequence[object],
        protocol: str,
        client_id: Callable[[], str | None],
        group: str | None = None,
    ) -> None:
        self._before = tuple(h for i in interceptors if (h := _hook(i, "before")) is not None)
        self._after = tuple(
            h for i in reversed(interceptors) if (h := _hook(i, "after")) is not None
        )
        self.protocol = protocol
        self._client_id = client_id
        self.group = group

    def context(self, point: HookPoint, messages: Sequence[Any]) -> HookContext:
        first = messages[0] if messages else None
        try:
            client_id = self._client_id()
        except Exception:  # a client id is information, never a reason to fail
            client_id = None
        return HookContext(
            point,
            self.protocol,
            client_id,
            getattr(first, "topic", None),
            self.group,
            getattr(first, "delivery_attempt", None),
        )

    # -- blocking -------------------------------------------------------------------------

    def _run(self, hook: Callable[..., object], ctx: HookContext, when: str, *args: Any) -> None:
        try:
            result = hook(ctx, *args)
            if inspect.isawaitable(result):
                asyncio.run_coroutine_threadsafe(_awaited(result), _hook_loop()).result()
        except Exception:
            _failed(hook, ctx, when)

    def before(self, ctx: HookContext, messages: Sequence[Any]) -> None:
        for hook in self._before:
            self._run(hook, ctx, "before", messages)

    def after(
        self,
        ctx: HookContext,
        messages: Sequence[Any],
        error: BaseException | None,
        started: float,
        outcome: object = None,
    ) -> None:
        if not self._after:
            return
        done = replace(ctx, duration=time.perf_counter() - started, outcome=outcome)
        for hook in self._after:
            self._run(hook, done, "after", messages, error)

    def report(
        self,
        point: HookPoint,
        before: bool,
        messages: Sequence[Any],
        error: BaseException | None,
        duration: float | None,
    ) -> None:
        """The hooks of a step something else performed: a push consumer's engine reports its
        acks, nacks and dead-letter forwards (before and after each attempt) afterwards."""
        hooks = self._before if before else self._after
        if not hooks:
            return
        ctx = self.context(point, messages)
        if before:
            for hook in hooks:
                self._run(hook, ctx, "before", messages)
            return
        done = replace(ctx, duration=duration)
        for hook in hooks:
            self._run(hook, done, "after", messages, error)

    def run_reported(
        self, next_events: Callable[[], Sequence[tuple[str, bool, Any, Any, Any]] | None]
    ) -> None:
        """Run the hooks of every event ``next_events`` returns (a batch per call, waiting for
        the first) until it returns ``None`` (or fails, which is logged)."""
        while True:
            try:
                events = next_events()
            except Exception:
                _log.exception("ferrymq: the settle hooks stop: reading settle events failed")
                return
            if events is None:
                return
            for point, before, messages, error, duration in events:
                self.report(HookPoint(point), before, messages, error, duration)

    def call(
        self,
        point: HookPoint,
        messages: Sequence[Any],
        fn: Callable[[], _T],
        outcome: Callable[[_T], object] | None = None,
    ) -> _T:
        """``fn()`` between the hooks of ``point``; its result is the outcome (through
        ``outcome`` if given), or the messages of a receive."""
        ctx = self.context(point, messages)
        self.before(ctx, messages)
        started = time.perf_counter()
        try:
            result = fn()
        except BaseException as exc:
            self.after(ctx, messages, exc, started)
            raise
        if point is HookPoint.RECEIVE:
            got: Sequence[Any] = result  # type: ignore[assignment]
            self.after(replace(ctx, **_first(got)), got, None, started)
        else:
            self.after(ctx, messages, None, started, outcome(result) if outcome else result)
        return result

    # -- async ----------------------------------------------------------------------------

    async def _run_async(
        self, hook: Callable[..., object], ctx: HookContext, when: str, *args: Any
    ) -> None:
        try:
            result = hook(ctx, *args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            _failed(hook, ctx, when)

    async def before_async(self, ctx: HookContext, messages: Sequence[Any]) -> None:
        for hook in self._before:
            await self._run_async(hook, ctx, "before", messages)

    async def after_async(
        self,
        ctx: HookContext,
        messages: Sequence[Any],
        error: BaseException | None,
        started: float,
        outcome: object = None,
    ) -> None:
        if not self._after:
            return
        done = replace(ctx, duration=time.perf_counter() - started, outcome=outcome)
        for hook in self._after:
            await self._run_async(hook, done, "after", messages, error)

    async def call_async(
        self,
        point: HookPoint,
        messages: Sequence[Any],
        fn: Callable[[], Awaitable[_T]],
        outcome: Callable[[_T], object] | None = None,
    ) -> _T:
        """:meth:`call` for a coroutine: the hooks are awaited on the running loop."""
        ctx = self.context(point, messages)
        await self.before_async(ctx, messages)
        started = time.perf_counter()
        try:
            result = await fn()
        except BaseException as exc:
            await self.after_async(ctx, messages, exc, started)
            raise
        if point is HookPoint.RECEIVE:
            got: Sequence[Any] = result  # type: ignore[assignment]
            await self.after_async(replace(ctx, **_first(got)), got, None, started)
        else:
            await self.after_async(
                ctx, messages, None, started, outcome(result) if outcome else result
            )
        return result


def _first(messages: Sequence[Any]) -> dict[str, Any]:
    """The context fields a receive's result gives its ``after``."""
    first = messages[0] if messages else None
    return {
        "topic": getattr(first, "topic", None),
        "attempt": getattr(first, "delivery_attempt", None),
    }


def chain_of(
    interceptors: object,
    protocol: str,
    client_id: Callable[[], str | None],
    group: str | None = None,
) -> Chain | None:
    """The ``Chain`` of a client's ``interceptors=`` argument (``None`` for none), checked:
    a list (or tuple) of :class:`Interceptor` or objects with a callable ``before`` or
    ``after``; anything else raises :class:`InvalidArgumentError` naming ``interceptors``."""
    if interceptors is None:
        return None
    if not isinstance(interceptors, (list, tuple)):
        raise InvalidArgumentError(
            f"interceptors: must be a list of ferrymq.Interceptor, not "
            f"{type(interceptors).__name__}"
        )
    for i, item in enumerate(interceptors):
        if isinstance(item, Interceptor):
            continue
        if isinstance(item, type) or not any(
            callable(getattr(item, name, None)) for name in ("before", "after")
        ):
            raise InvalidArgumentError(
                f"interceptors[{i}]: {item!r} is not a ferrymq.Interceptor (an instance with a "
                f"callable before or after)"
            )
    if not interceptors:
        return None
    return Chain(interceptors, protocol, client_id, group)
