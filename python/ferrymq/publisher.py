"""The managed async publisher ("Managed Async Publisher" design).

:class:`AsyncPublisher` keeps at most ``max_in_flight`` messages waiting for their publish ack.
When the window is full a *hold* stops publishing until no more than ``refill_allowed_at`` are in
flight. Every message becomes a :class:`Flight` (id ``<id_prefix>-<n>``, subject, headers, body,
options, publish time, ack future) and ends exactly once: acked, failed or timed out. A listener
hears about every step: ``published``, ``acked``, ``completed_exceptionally``, ``timeout``.

The window, the retries and the time-outs run in Rust on tokio. This module only dispatches
events: a helper thread fetches them in batches (with the GIL released) and delivers them, in
order, on the publisher's event loop when it has one, or on the helper thread otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, Union

from . import _exit, _hooks, _native
from ._lifecycle import Lifecycle
from ._native import EventBatch, FlightCore, PublishAck
from ._stats import StatsCallback, stats_reporter
from .exceptions import FerryTimeoutError, InvalidArgumentError
from .interceptors import Chain, HookPoint, chain_of
from .producer import Producer

if TYPE_CHECKING:
    from ._native import Message

__all__ = [
    "AsyncPublisher",
    "Flight",
    "PublisherListener",
    "RetryConfig",
]

_log = logging.getLogger("ferrymq.publisher")

_KINDS = ("published", "acked", "completed_exceptionally", "timeout")
_EVENT_BATCH = 1024
_EVENT_WAIT = 5.0
# How long interpreter exit waits for the event thread once the publisher has finished.
_EXIT_JOIN = 10.0

AckFuture = Union["asyncio.Future[PublishAck]", "concurrent.futures.Future[PublishAck]"]


def _of_core(name: str, doc: str | None = None) -> Any:
    """A read-only property that is attribute ``name`` of ``self._core``, the native object
    behind a :class:`Flight` or an :class:`AsyncPublisher` (a C-level getter: no Python frame
    per read)."""
    return property(attrgetter(f"_core.{name}"), doc=doc)


@dataclass(frozen=True)
class RetryConfig:
    """Retries of one message; without one each message is attempted once.

    Only retriable errors are retried (no responders / 503, time-outs, connection errors);
    expectation failures (JetStream 10060, 10070, 10071) never are. Every attempt carries the
    same message id, so the broker de-duplicates (keep the whole horizon below the stream's
    ``duplicate_window``, 2 minutes by default).

    Attributes:
        attempts: total attempts, the first included.
        backoff: seconds to wait before the n-th retry; the last value repeats.
        deadline: no retry starts later than this many seconds after the first attempt.
        attempt_timeout: give up on one attempt's ack after this many seconds and retry;
            ``None`` lets an attempt wait until ``wait_timeout``.
    """

    attempts: int = 2
    backoff: tuple[float | timedelta, ...] = field(default=(0.25, 0.25, 0.5, 0.5, 3.0, 5.0))
    deadline: float | timedelta | None = None
    attempt_timeout: float | timedelta | None = None

    def _native_args(
        self,
    ) -> tuple[int, list[float | timedelta], float | timedelta | None, float | timedelta | None]:
        return (
            self.attempts,
            list(self.backoff),
            self.deadline,
            self.attempt_timeout,
        )


class PublisherListener:
    """Base class of listeners; override the methods you need (all are optional).

    Methods run on the publisher's event loop when it has one, otherwise on a ferrymq helper
    thread; always one at a time and in order. An exception raised by a method is logged on the
    ``ferrymq.publisher`` logger and does not stop the publisher. A slow listener slows the
    publisher down (events are never dropped).
    """

    def published(self, flight: Flight) -> None:
        """The message was handed to the connection."""

    def acked(self, flight: Flight) -> None:
        """The broker acknowledged the message (``flight.ack``)."""

    def completed_exceptionally(self, flight: Flight) -> None:
        """The publish failed (``flight.exception``), including lower-level request time-outs."""

    def timeout(self, flight: Flight) -> None:
        """No ack arrived within ``wait_timeout`` of the publish."""


class Flight:
    """One message on its way: what was published and what became of it.

    Flights returned by :meth:`AsyncPublisher.publish_async` and those passed to the listener
    for the same message compare equal and share one ack future.
    """

    __slots__ = ("_core", "_publisher")

    def __init__(self, core: FlightCore, publisher: AsyncPublisher) -> None:
        self._core = core
        self._publisher = publisher

    id: Final[str] = _of_core(
        "id", "``<id_prefix>-<n>``, or the caller's ``message_id``; sent as ``Nats-Msg-Id``."
    )

    subject: Final[str] = _of_core(
        "subject", "The subject (or topic) the message was published to."
    )

    topic: Final[str] = _of_core("subject", "Alias of :attr:`subject`.")

    headers: Final[dict[str, str]] = _of_core("headers", "The message headers (or properties).")

    body: Final[bytes] = _of_core("body", "The payload.")

    options: Final[dict[str, Any]] = _of_core(
        "options", "The publish options given (message id and expectations)."
    )

    message: Final[Message | None] = _of_core(
        "message", "The :class:`ferrymq.Message` given instead of subject and body, if any."
    )

    publish_time: Final[float | None] = _of_core(
        "publish_time",
        "Unix seconds when the message was handed to the connection; ``None`` before.",
    )

    attempts: Final[int] = _of_core(
        "attempts", "Attempts started so far (more than 1 after retries)."
    )

    done: Final[bool] = _of_core("done", "Whether the flight has ended.")

    @property
    def state(self) -> str:
        """``"in_flight"``, ``"acked"``, ``"failed"`` or ``"timeout"``."""
        return self._core.state or "in_flight"

    ack: Final[PublishAck | None] = _of_core("ack", "The ack of an acked flight.")

    @property
    def exception(self) -> BaseException | None:
        """The error of a failed or timed-out flight."""
        exc = self._core.exception
        return exc if isinstance(exc, BaseException) else None

    expectation_failed: Final[bool] = _of_core(
        "expectation_failed", "Whether it failed on a JetStream expectation (never retried)."
    )

    @property
    def ack_future(self) -> AckFuture:
        """The future of the :class:`PublishAck` (raises the flight's error if it failed).

        An :class:`asyncio.Future` on the publisher's event loop when it has one, otherwise a
        :class:`concurrent.futures.Future`. Created on first access.
        """
        fut: Any = self._core._waiter
        if fut is None:
            fut, done = self._core._watch(self._publisher._new_future())
            if done:
                _settle(fut, self._core)
        return fut  # type: ignore[no-any-return]

    def result(self, timeout: float | timedelta | None = None) -> PublishAck:
        """Block (without holding the GIL) until the flight ends; return the ack or raise."""
        if not self._core.wait(timeout):
            raise FerryTimeoutError(f"flight {self.id} still in flight after {timeout} s")
        exc = self.exception
        if exc is not None:
            raise exc
        ack = self._core.ack
        assert ack is not None
        return ack

    def __await__(self) -> Generator[Any, None, PublishAck]:
        fut = self.ack_future
        if isinstance(fut, concurrent.futures.Future):
            return asyncio.wrap_future(fut).__await__()
        return fut.__await__()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Flight) and self._core == other._core

    def __hash__(self) -> int:
        return hash(self._core)

    def __repr__(self) -> str:
        return repr(self._core)


_new_flight = object.__new__


def _result_of(core: FlightCore) -> tuple[PublishAck | None, BaseException | None]:
    exc = core.exception
    if isinstance(exc, BaseException):
        return None, exc
    return core.ack, None


def _settle_here(fut: Any, core: FlightCore) -> None:
    """Complete `fut` from `core`'s outcome on the current thread (idempotent)."""
    if fut.done():
        return
    ack, exc = _result_of(core)
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(ack)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):
        pass


def _settle(fut: Any, core: FlightCore) -> None:
    """Complete `fut` from `core`'s outcome, on the future's own loop for asyncio futures."""
    if isinstance(fut, asyncio.Future):
        loop = fut.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            _settle_here(fut, core)
        else:
            # A closed loop raises RuntimeError: nobody can await the future any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_here, fut, core)
    else:
        _settle_here(fut, core)


class _Batch:
    """A batch of events that exactly one of two paths (loop or helper thread) delivers."""

    __slots__ = ("_events", "_lock", "done")

    def __init__(self, events: EventBatch) -> None:
        self._events: EventBatch | None = events
        self._lock = threading.Lock()
        self.done = threading.Event()

    def take(self) -> EventBatch | None:
        with self._lock:
            events, self._events = self._events, None
            return events


class AsyncPublisher(Lifecycle):
    """A managed async publisher over a started ``ferrymq.Producer`` (RocketMQ 5, ``jmq://`` or
    ``nats://``).

    Args:
        producer: the producer to publish with.
        id_prefix: prefix of message ids (``<id_prefix>-<n>``); a NUID by default.
        max_in_flight: most messages waiting for their ack at once.
        refill_allowed_at: once the window is full, publishing resumes when at most this many
            are in flight (0: full sawtooth; ``max_in_flight - 1``: sliding window).
        retry: a :class:`RetryConfig`; ``None`` attempts each message once.
        poll_time: seconds; the longest the Rust runner sleeps without re-checking its state
            (it is event driven, so this is only a safety net).
        hold_pause_time: seconds; the longest the runner waits between checks of the hold (the
            hold is lifted as soon as an ack brings the count down to ``refill_allowed_at``).
        wait_timeout: seconds a message may wait for its ack after it was published; then its
            future fails with :class:`ferrymq.FerryTimeoutError` and the listener's ``timeout``
            is called.
        listener: an object with any of the :class:`PublisherListener` methods.
        stats_callback: ``f(stats)``, called with :meth:`stats` every ``stats_interval``
            seconds on a ferrymq thread (never under a ferrymq lock) from construction until
            :meth:`close`, :meth:`stop` or the end of :meth:`drain`; an exception in it is
            logged on the ``ferrymq`` logger.
        stats_interval: seconds (or timedelta) between two calls, above 0 (default 5).
        interceptors: a list of :class:`ferrymq.Interceptor`: SEND hooks with the
            :class:`Flight` objects as messages, run on the publisher's event thread (the
            caller's loop when one is bound), one call per delivered batch of events: ``before``
            with the flights handed to the connection, ``after`` with those acked (``outcome``:
            their :class:`PublishAck` list) and one call per failed or timed-out flight (its
            error). See :mod:`ferrymq.interceptors`.

    Use it as ``async with AsyncPublisher(producer) as pub:`` (drains on exit) or call
    :meth:`start` and then :meth:`drain` / :meth:`close` / :meth:`stop`. A publisher still
    running when the interpreter exits is drained then (for up to ``wait_timeout`` seconds,
    after which what is left is stopped), and its listener hears of every message before
    Python shuts down.
    """

    def __init__(
        self,
        producer: Any,
        *,
        id_prefix: str | None = None,
        max_in_flight: int = 50,
        refill_allowed_at: int = 0,
        retry: RetryConfig | None = None,
        poll_time: float | timedelta = 0.1,
        hold_pause_time: float | timedelta = 0.1,
        wait_timeout: float | timedelta = 5.0,
        listener: PublisherListener | Any | None = None,
        stats_callback: StatsCallback | None = None,
        stats_interval: float | timedelta | None = None,
        interceptors: Sequence[object] | None = None,
    ) -> None:
        reporter = stats_reporter(self, stats_callback, stats_interval)
        self._chain = chain_of(
            interceptors,
            producer.protocol if isinstance(producer, Producer) else "rocketmq",
            lambda: getattr(producer, "client_id", None),
        )
        if retry is not None and not isinstance(retry, RetryConfig):
            raise InvalidArgumentError(
                f"retry: must be a ferrymq.RetryConfig, not {type(retry).__name__}"
            )
        methods: dict[str, Any] = {}
        if listener is not None:
            for kind in _KINDS:
                m = getattr(listener, kind, None)
                if m is not None and not callable(m):
                    raise InvalidArgumentError(f"listener: {kind} is not callable")
                methods[kind] = m
            if not any(methods.values()):
                raise InvalidArgumentError("listener: has none of the methods " + ", ".join(_KINDS))
        self._producer = producer
        # ferrymq.Producer is a facade over the native client of its backend.
        native = producer._publisher_target() if isinstance(producer, Producer) else producer
        self._core = _native.PublisherCore(
            native,
            id_prefix=id_prefix,
            max_in_flight=max_in_flight,
            refill_allowed_at=refill_allowed_at,
            retry=None if retry is None else retry._native_args(),
            poll_time=poll_time,
            hold_pause_time=hold_pause_time,
            wait_timeout=wait_timeout,
            listener=listener is not None or self._chain is not None,
        )
        self._retry = retry
        self._wait_timeout = _native.seconds("wait_timeout", wait_timeout)
        self._listener = listener
        self._methods = methods
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._pump_lock = threading.Lock()
        self._pump: threading.Thread | None = None
        self._pump_done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stats_reporter = reporter
        if reporter is not None:
            reporter.start()

    # -- properties ------------------------------------------------------------------------

    @property
    def producer(self) -> Any:
        """The producer messages are published with."""
        return self._producer

    id_prefix: Final[str] = _of_core("id_prefix", "The prefix of generated message ids.")

    max_in_flight: Final[int] = _of_core("max_in_flight")

    refill_allowed_at: Final[int] = _of_core("refill_allowed_at")

    in_flight: Final[int] = _of_core(
        "in_flight", "Messages published and not yet acked, failed or timed out."
    )

    held: Final[bool] = _of_core(
        "held", "Whether the hold is on (the window filled and has not refilled yet)."
    )

    queued: Final[int] = _of_core("queued", "Messages accepted and waiting for room in the window.")

    @property
    def state(self) -> str:
        """``"idle"``, ``"running"``, ``"draining"``, ``"stopping"`` or ``"finished"``."""
        return self._core.state

    def stats(self, percentiles: Sequence[float] | None = None) -> dict[str, Any]:
        """Live figures as a plain dict: those of its producer's ``stats()`` (``sent``,
        ``failed``, ``retried``, ``in_flight``, ``client``, ``operations``, ``overflowed``;
        every attempt is one ``send`` there, recorded once by the producer, and the
        publisher's retries count in ``retried``; no ``pending``) plus what only the
        publisher knows: ``state``, ``queued`` (accepted, waiting for room in the window),
        ``in_flight_messages`` (published and not yet acked, failed or timed out) and
        ``max_in_flight`` (the bound of its intake and window). The producer's figures
        include its other sends. ``percentiles`` as for ``Producer.stats``.
        """
        return self._core.stats(percentiles)

    def _stop_stats(self) -> None:
        if self._stats_reporter is not None:
            self._stats_reporter.stop()

    # -- lifecycle -------------------------------------------------------------------------

    def _bind_loop(self) -> None:
        if self._loop is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def _on_loop_thread(self) -> bool:
        return self._loop is not None and self._loop_thread == threading.get_ident()

    def _ensure_pump(self) -> None:
        if self._pump is not None:
            return
        with self._pump_lock:
            if self._pump is not None:
                return
            t = threading.Thread(
                target=self._run_pump, name="ferrymq-publisher-events", daemon=True
            )
            t.start()
            self._pump = t
            _exit.track(self)

    def start(self) -> AsyncPublisher:
        """Start publishing. Inside a running event loop, that loop becomes the publisher's:
        listener calls and ack futures are delivered on it. Returns the publisher."""
        self._bind_loop()
        self._core.start()
        self._ensure_pump()
        return self

    async def start_async(self) -> AsyncPublisher:
        """:meth:`start` on the running event loop (which becomes the publisher's)."""
        return self.start()

    def stop(self) -> None:
        """Stop now: refuse new messages and end every queued or in-flight message with
        :class:`ferrymq.ClientClosedError` (futures and listener still hear about each)."""
        self._ensure_pump()
        self._core.stop()
        self._stop_stats()

    async def drain(self) -> None:
        """Refuse new messages, publish what is queued, and return once every flight has been
        acked, has failed or has timed out, and the listener has seen every event."""
        self._bind_loop()
        self._ensure_pump()
        await self._core.drain_async()
        await asyncio.wrap_future(self._pump_done)
        self._stop_stats()

    def close(self, timeout: float | timedelta | None = None) -> bool:
        """Blocking drain for code without asyncio: wait up to `timeout` seconds, then
        :meth:`stop` whatever is left. Returns whether the drain finished in time."""
        if self._on_loop_thread():
            raise RuntimeError(
                "AsyncPublisher.close() blocks; inside the event loop use `await drain()`"
            )
        self._ensure_pump()
        finished = self._core.drain(timeout)
        if not finished:
            self._core.stop()
        self._pump_done.result()
        self._stop_stats()
        return finished

    async def close_async(self, timeout: float | timedelta | None = None) -> bool:
        """:meth:`close` for asyncio: :meth:`drain` for up to ``timeout`` seconds, then
        :meth:`stop` whatever is left. Returns whether the drain finished in time."""
        limit = None if timeout is None else _native.seconds("timeout", timeout, zero=True)
        drain = asyncio.ensure_future(self.drain())
        try:
            await asyncio.wait_for(asyncio.shield(drain), limit)
            return True
        except asyncio.TimeoutError:
            self.stop()
            await drain
            return False

    # Entering starts it (Lifecycle); leaving drains it, or stops it when cancelled.
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: object, tb: object
    ) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.stop()  # cancelled or interrupted: do not wait for acks
            return
        try:
            await self.drain()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.stop()
            return
        self.close()

    # -- publishing ------------------------------------------------------------------------

    async def publish_async(
        self,
        subject: str | Message,
        body: bytes | bytearray | memoryview | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        message_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_msg_id: str | None = None,
    ) -> Flight:
        """Publish asynchronously; the JetStream ``publishAsync`` of the design.

        Waits only while the publisher's bounded intake is full (that is the back-pressure a
        fast caller feels when the window is held) and returns the :class:`Flight`; the message
        is sent as soon as the window allows. Await the flight (or its ``ack_future``) for the
        :class:`PublishAck`, or let the listener report the outcome.

        ``subject`` may be a :class:`ferrymq.Message` (then ``body`` must be omitted).
        """
        if self._loop is None:
            self._bind_loop()
        if _hooks.stamp is not None:
            subject, headers = _traced(subject, headers)
        core, waiter = self._core.publish(
            subject,
            body,
            headers,
            message_id,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
        )
        if waiter is not None:
            await waiter
        if self._pump is None:
            self._ensure_pump()
        # Flight(core, self) without the __init__ call: this is the per-message hot path.
        flight = _new_flight(Flight)
        flight._core = core
        flight._publisher = self
        return flight

    def submit(
        self,
        subject: str | Message,
        body: bytes | bytearray | memoryview | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        message_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_msg_id: str | None = None,
    ) -> concurrent.futures.Future[PublishAck]:
        """Publish from code without asyncio: returns a :class:`concurrent.futures.Future` of
        the :class:`PublishAck`. Blocks (without the GIL) while the intake is full."""
        if _hooks.stamp is not None:
            subject, headers = _traced(subject, headers)
        core = self._core.prepare(
            subject,
            body,
            headers,
            message_id,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
        )
        fut: concurrent.futures.Future[PublishAck] = concurrent.futures.Future()
        core._watch(fut)
        if not self._core.try_enqueue(core):
            if self._on_loop_thread():
                raise RuntimeError(
                    "AsyncPublisher.submit() would block the event loop while the intake is "
                    "full; inside the loop use `await publish_async()`"
                )
            self._core.enqueue(core)
        self._ensure_pump()
        return fut

    # -- event delivery --------------------------------------------------------------------

    def _new_future(self) -> Any:
        if self._loop is not None and not self._loop.is_closed():
            return self._loop.create_future()
        return concurrent.futures.Future()

    def _run_pump(self) -> None:
        core = self._core
        try:
            while True:
                events = core.next_events(_EVENT_BATCH, _EVENT_WAIT)
                if events is None:
                    break
                if events:
                    self._dispatch(_Batch(events))
        except BaseException:  # pragma: no cover - only on interpreter shutdown or a bug
            _log.exception("publisher event delivery stopped")
        finally:
            self._pump_done.set_result(None)

    def _dispatch(self, batch: _Batch) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._deliver_on_loop, batch)
            except RuntimeError:
                pass  # closed meanwhile
            else:
                # One batch at a time on the loop: a slow loop slows the publisher down.
                while not batch.done.wait(0.05):
                    if loop.is_closed() or not loop.is_running():
                        break
                if batch.done.is_set():
                    return
        events = batch.take()
        if events is not None:
            self._deliver(events, on_loop=False)

    def _deliver_on_loop(self, batch: _Batch) -> None:
        try:
            events = batch.take()
            if events is not None:
                self._deliver(events, on_loop=True)
        finally:
            batch.done.set()

    def _deliver(self, events: EventBatch, on_loop: bool) -> None:
        methods = self._methods
        chain = self._chain
        if not methods and chain is None and (on_loop or self._loop is None):
            # Only futures to complete, and this thread may complete them (asyncio futures
            # exist only with a loop, and then this is its thread): one native call.
            events.settle()
            return
        pairs = events.pairs()
        if chain is not None:
            _intercept(chain, pairs, self)
        for kind, core in pairs:
            method = methods.get(kind) if methods else None
            if method is not None:
                try:
                    method(Flight(core, self))
                except Exception:
                    _log.exception("publisher listener %s(%s) raised", kind, core.id)
            if kind != "published":
                fut = core._waiter
                if fut is not None:
                    _settle(fut, core)

    def _close_at_exit(self) -> None:
        """Interpreter exit: drain (up to ``wait_timeout``), stop what is left, and let the
        event thread deliver every event before Python shuts down (a daemon thread running
        listener code or completing futures during finalization can crash CPython)."""
        core = self._core
        if core.state != "finished":
            limit = self._wait_timeout
            if not core.drain(limit):
                _log.warning(
                    "interpreter exit: %s did not drain within %.1f s; stopping it", self, limit
                )
                core.stop()
        pump = self._pump
        if pump is not None and pump is not threading.current_thread():
            pump.join(_EXIT_JOIN)
            if pump.is_alive():
                _log.warning("interpreter exit: %s is still delivering events", self)

    def __repr__(self) -> str:
        return (
            f"AsyncPublisher({self._core.backend}, state={self.state!r}, "
            f"in_flight={self.in_flight}, max_in_flight={self.max_in_flight})"
        )


def _intercept(chain: Chain, pairs: Sequence[tuple[str, FlightCore]], pub: AsyncPublisher) -> None:
    """The SEND hooks of one batch of events: ``before`` with the flights sent for the first
    time, ``after`` with those acked, and with each failed one."""
    sent = [Flight(core, pub) for kind, core in pairs if kind == "published" and core.attempts <= 1]
    if sent:
        chain.before(chain.context(HookPoint.SEND, sent), sent)
    acked = [core for kind, core in pairs if kind == "acked"]
    if acked:
        flights = [Flight(core, pub) for core in acked]
        chain.after(
            chain.context(HookPoint.SEND, flights),
            flights,
            None,
            _started(acked),
            [core.ack for core in acked],
        )
    for kind, core in pairs:
        if kind in ("completed_exceptionally", "timeout"):
            flights = [Flight(core, pub)]
            chain.after(
                chain.context(HookPoint.SEND, flights), flights, core.exception, _started([core])
            )


def _traced(
    subject: str | Message, headers: Mapping[str, str] | None
) -> tuple[str | Message, Mapping[str, str] | None]:
    """``subject`` and ``headers`` carrying the current span's context (tracing is on): a
    ``Message`` as ``produce`` stamps it, else in the ``traceparent`` / ``tracestate`` headers
    (properties on RocketMQ and JMQ4, where consumers read them as the context too)."""
    # Each hook read once: tracing may be turned off meanwhile.
    if isinstance(subject, str):
        stamp_headers = _hooks.stamp_headers
        return subject, headers if stamp_headers is None else stamp_headers(headers)
    stamp = _hooks.stamp
    return subject if stamp is None else stamp([subject])[0], headers


def _started(cores: Sequence[FlightCore]) -> float:
    """A ``perf_counter`` reading as long ago as the earliest of ``cores`` was published."""
    first = min((c.publish_time for c in cores if c.publish_time is not None), default=None)
    now = time.perf_counter()
    return now if first is None else now - max(0.0, time.time() - first)
