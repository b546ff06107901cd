"""The JMQ4 (JoyQueue) backends of :class:`ferrymq.SimpleConsumer` and
:class:`ferrymq.PushConsumer`, chosen by ``jmq://host:port``; both are built on
:class:`ferrymq.JmqConsumer`.

Where the concepts match, the RocketMQ names are kept: ``receive``/``ack`` (and ``_async``),
the listener with ``ConsumeResult``, ``close`` waiting for callbacks. Where they differ:

* the consumer is identified by its JMQ4 **app**: pass it as ``group`` (``app=`` may repeat it)
  with ``token=``;
* subscriptions are topics fixed at construction; JMQ4 has no tag or SQL filters, so only
  ``None`` / ``"*"`` filters are accepted, and ``subscribe``/``unsubscribe`` raise;
* received messages are :class:`ferrymq.JmqMessage` objects, which also answer to the
  :class:`ferrymq.MessageView` names (``queue_id`` = partition, ``offset`` = index,
  ``delivery_attempt`` = 1, or 2 for a delivery from the retry queue);
* ``invisible_duration`` is the fetch's ack timeout. The broker keeps the whole *partition*
  occupied until the fetch is acked, and the first ack releases it: ack the messages of one
  ``receive`` together (``ack(list)``), or the rest may be delivered again;
* ``change_invisible_duration`` has no JMQ4 equivalent and raises; ``nack`` (COMMIT_ACK with a
  retry type) sends messages to the broker's retry queue, from which they come back.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, NoReturn

from . import _consumer, _native
from ._native import ConsumeResult, FilterExpression, JmqMessage
from .exceptions import ClientClosedError, FerryError, InvalidArgumentError

__all__ = ["JmqPushBackend", "JmqSimpleBackend"]

_log = logging.getLogger("ferrymq.consumer")

#: The :class:`ferrymq.JmqConsumer` options a facade passes through ``jmq_options``.
CONSUMER_OPTIONS = frozenset(
    {
        "mode",
        "region",
        "ack_timeout",
        "long_poll",
        "session_timeout",
        "metadata_refresh",
        "client_ip",
    }
)

#: Default long-polling time of ``SimpleConsumer.receive`` (as for RocketMQ).
DEFAULT_AWAIT = 20.0
#: How long one receive of the push consumer waits, so that ``close`` is prompt.
PUSH_POLL = 1.0
#: Default bound of ``PushConsumer.close`` waiting for callbacks and acks.
DEFAULT_SHUTDOWN_TIMEOUT = 30.0


def _seconds(field: str, v: float | timedelta | None, default: float) -> float:
    """A duration argument checked by the binding's one converter (0 allowed)."""
    return default if v is None else _native.seconds(field, v, zero=True)


def _is_all(f: object) -> bool:
    if f is None or f == "*" or f == "":
        return True
    if isinstance(f, FilterExpression):
        return f.type == "TAG" and f.expression == "*"
    return False


def _topics(subscriptions: object) -> list[str]:
    if subscriptions is None:
        raise InvalidArgumentError(
            "subscriptions: a jmq:// consumer needs its topics at construction"
        )
    if isinstance(subscriptions, str):
        topics = [subscriptions]
    elif isinstance(subscriptions, Mapping):
        topics = []
        for topic, f in subscriptions.items():
            if not _is_all(f):
                raise InvalidArgumentError(
                    f"subscriptions: JMQ4 has no tag or SQL filters (topic {topic!r} has {f!r}); "
                    "subscribe with None or '*'"
                )
            topics.append(topic)
    else:
        try:
            topics = list(subscriptions)  # type: ignore[call-overload]
        except TypeError:
            raise InvalidArgumentError(
                "subscriptions: must be a topic, a list of topics or a {topic: filter} mapping"
            ) from None
    if not topics or not all(isinstance(t, str) for t in topics):
        raise InvalidArgumentError("subscriptions: name at least one topic (str)")
    return topics


def consumer_args(
    endpoints: str | Iterable[str],
    group: str,
    *,
    subscriptions: object,
    app: str | None,
    token: str | None,
    namespace: str | None,
    request_timeout: float | timedelta | None,
    credentials: object,
    tls: object,
    options: Mapping[str, Any] | None,
) -> tuple[str, list[str], dict[str, Any]]:
    """Check the facade's arguments for ``jmq://``: ``(endpoint, topics, JmqConsumer kwargs)``."""
    endpoint = endpoints if isinstance(endpoints, str) else next(iter(endpoints), "")
    if not isinstance(group, str) or not group.strip():
        raise InvalidArgumentError("group: must not be blank (for jmq:// it is the JMQ4 app)")
    if app is not None and app != group:
        raise InvalidArgumentError(
            f"app: a JMQ4 consumer is identified by its app, which is the group ({group!r}); "
            f"app={app!r} differs"
        )
    if not token:
        raise InvalidArgumentError("token: a jmq:// endpoint needs token= (the app's token)")
    if credentials is not None:
        raise InvalidArgumentError("credentials: a jmq:// endpoint authenticates with token=")
    if tls:
        raise InvalidArgumentError("tls: ferrymq's JMQ4 client has no TLS")
    extra = dict(options or {})
    unknown = sorted(set(extra) - CONSUMER_OPTIONS)
    if unknown:
        known = ", ".join(sorted(CONSUMER_OPTIONS))
        raise InvalidArgumentError(f"jmq_options: unknown option {unknown[0]!r} (known: {known})")
    kwargs: dict[str, Any] = {
        "app": group,
        "token": token,
        "namespace": namespace,
        "request_timeout": request_timeout,
        **extra,
    }
    return endpoint, _topics(subscriptions), kwargs


def _invisible(v: float | timedelta | None) -> float | None:
    return None if v is None else _seconds("invisible_duration", v, 0.0)


def _no_change_invisible() -> InvalidArgumentError:
    return InvalidArgumentError(
        "change_invisible_duration: JMQ4 has no per-message invisible time (a fetch occupies "
        "its partition for the ack timeout); use nack() for a redelivery, or a longer "
        "invisible_duration in receive()"
    )


def _no_subscribe(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what}: a jmq:// consumer's topics are fixed at construction")


class JmqSimpleBackend:
    """:class:`ferrymq.SimpleConsumer` over JMQ4."""

    def __init__(
        self,
        endpoints: str | Iterable[str],
        group: str,
        *,
        subscriptions: object,
        await_duration: float | timedelta | None,
        app: str | None,
        token: str | None,
        namespace: str | None,
        request_timeout: float | timedelta | None,
        credentials: object,
        tls: object,
        options: Mapping[str, Any] | None,
    ) -> None:
        endpoint, topics, kwargs = consumer_args(
            endpoints,
            group,
            subscriptions=subscriptions,
            app=app,
            token=token,
            namespace=namespace,
            request_timeout=request_timeout,
            credentials=credentials,
            tls=tls,
            options=options,
        )
        self._wait = _seconds("await_duration", await_duration, DEFAULT_AWAIT)
        self._group = group
        self._native = _native.JmqConsumer(endpoint, topics, **kwargs)

    @property
    def native(self) -> _native.JmqConsumer:
        return self._native

    def start(self) -> None:
        self._native.start()

    async def start_async(self) -> None:
        await self._native.start_async()

    def receive(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JmqMessage]:
        return self._native.receive(
            max_messages, self._wait, ack_timeout=_invisible(invisible_duration)
        )

    async def receive_async(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JmqMessage]:
        return await self._native.receive_async(
            max_messages, self._wait, ack_timeout=_invisible(invisible_duration)
        )

    def ack(self, message: JmqMessage | Iterable[JmqMessage]) -> None:
        self._native.ack(message)

    async def ack_async(self, message: JmqMessage | Iterable[JmqMessage]) -> None:
        await self._native.ack_async(message)

    def change_invisible_duration(self, message: object, duration: object) -> NoReturn:
        raise _no_change_invisible()

    async def change_invisible_duration_async(self, message: object, duration: object) -> NoReturn:
        raise _no_change_invisible()

    def subscribe(self, topic: str, filter: object = None) -> NoReturn:
        raise _no_subscribe("subscribe")

    def unsubscribe(self, topic: str) -> NoReturn:
        raise _no_subscribe("unsubscribe")

    def close(self) -> None:
        self._native.close()

    async def close_async(self) -> None:
        await self._native.close_async()

    @property
    def group(self) -> str:
        return self._group

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        return {t: FilterExpression.all() for t in self._native.topics}

    @property
    def client_id(self) -> str | None:
        return f"jmq:{self._group}"

    def __repr__(self) -> str:
        state = "closed" if self._native.closed else "open"
        return (
            f"SimpleConsumer(endpoint={self._native.endpoint!r}, protocol='jmq4', "
            f"app={self._group!r}, topics={self._native.topics!r}, {state})"
        )


def _is_async_listener(listener: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
        type(listener).__call__
    )


class _Batch:
    """The messages of one receive: settled together in one COMMIT_ACK once all are done."""

    __slots__ = ("failed", "messages", "nbytes", "ok", "remaining")

    def __init__(self, messages: list[JmqMessage]) -> None:
        self.messages = messages
        self.nbytes = sum(len(m) for m in messages)
        self.remaining = len(messages)
        self.ok: list[JmqMessage] = []
        self.failed: list[JmqMessage] = []


_STAT_NAMES = (
    "received",
    "consumed_ok",
    "consumed_failed",
    "acked",
    "nacked",
    "receive_failures",
    "settle_failures",
    "max_cached_messages",
    "max_cached_bytes",
)


class JmqPushBackend:
    """:class:`ferrymq.PushConsumer` over JMQ4: ``max_concurrent_receives`` threads receive (the
    long poll runs in Rust without the GIL) into a cache bounded by ``max_cache_messages``
    (slots reserved before each receive) and ``max_cache_bytes``; messages go to the listener
    (a plain callable on ``consumption_threads`` threads, an ``async def`` on an event loop with
    at most ``consumption_threads`` running); when every message of a receive is done, one
    settler thread sends one COMMIT_ACK for them (SUCCESS/``None`` → ack, FAILURE or an
    exception → the retry queue) and frees their cache slots."""

    def __init__(
        self,
        endpoints: str | Iterable[str],
        group: str,
        *,
        subscriptions: object,
        listener: Callable[[Any], object],
        consumption_threads: int,
        max_cache_messages: int,
        max_cache_bytes: int,
        fifo_accelerator: bool,
        receive_batch_size: int | None,
        max_concurrent_receives: int,
        shutdown_timeout: float | timedelta | None,
        app: str | None,
        token: str | None,
        namespace: str | None,
        request_timeout: float | timedelta | None,
        credentials: object,
        tls: object,
        options: Mapping[str, Any] | None,
    ) -> None:
        if not callable(listener):
            raise InvalidArgumentError("listener: must be callable")
        for name, v, hi in (
            ("consumption_threads", consumption_threads, 1024),
            ("max_cache_messages", max_cache_messages, 1 << 31),
            ("max_cache_bytes", max_cache_bytes, 1 << 62),
            ("max_concurrent_receives", max_concurrent_receives, 64),
            ("receive_batch_size", 32 if receive_batch_size is None else receive_batch_size, 32767),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
                raise InvalidArgumentError(f"{name}: must be an integer between 1 and {hi}")
        if fifo_accelerator:
            raise InvalidArgumentError("fifo_accelerator: JMQ4 has no message groups")
        endpoint, topics, kwargs = consumer_args(
            endpoints,
            group,
            subscriptions=subscriptions,
            app=app,
            token=token,
            namespace=namespace,
            request_timeout=request_timeout,
            credentials=credentials,
            tls=tls,
            options=options,
        )
        self._shutdown_timeout = _seconds(
            "shutdown_timeout", shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT
        )
        self._group = group
        self._listener = listener
        self._is_async = _is_async_listener(listener)
        self._threads = consumption_threads
        self._max_messages = max_cache_messages
        self._max_bytes = max_cache_bytes
        self._batch = 32 if receive_batch_size is None else receive_batch_size
        self._receivers_n = max_concurrent_receives
        self._native = _native.JmqConsumer(endpoint, topics, **kwargs)

        self._cond = threading.Condition()
        self._state = "created"  # created → starting → running → closing → closed
        self._receiving = False
        self._reserved = 0  # cache slots reserved by receives in flight
        self._cached = 0  # received and not yet settled
        self._cached_bytes = 0
        self._settle_queue: collections.deque[_Batch] = collections.deque()
        self._stop_settler = False
        self._stats = dict.fromkeys(_STAT_NAMES, 0)
        self._receivers: list[threading.Thread] = []
        self._settler: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._private_loop = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._semaphore: asyncio.Semaphore | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def _claim_start(self) -> bool:
        with self._cond:
            if self._state in ("closing", "closed"):
                raise ClientClosedError("the PushConsumer is closed")
            if self._state != "created":
                return False
            self._state = "starting"
            return True

    def _unclaim(self) -> None:
        with self._cond:
            if self._state == "starting":
                self._state = "created"

    def start(self) -> None:
        if not self._claim_start():
            return
        try:
            self._native.start()
        except BaseException:
            self._unclaim()
            raise
        self._begin(None)

    async def start_async(self) -> None:
        if not self._claim_start():
            return
        try:
            await self._native.start_async()
        except BaseException:
            self._unclaim()
            raise
        self._begin(asyncio.get_running_loop() if self._is_async else None)

    def _begin(self, loop: asyncio.AbstractEventLoop | None) -> None:
        with self._cond:
            if self._state != "starting":  # closed while connecting
                return
            if self._is_async:
                if loop is None:
                    loop = _consumer.start_private_loop()
                    self._private_loop = True
                self._loop = loop
            else:
                self._executor = ThreadPoolExecutor(
                    self._threads, thread_name_prefix="ferrymq-jmq-listener"
                )
            self._state = "running"
            self._receiving = True
        self._settler = threading.Thread(
            target=self._settle_loop, name="ferrymq-jmq-settle", daemon=True
        )
        self._settler.start()
        for i in range(self._receivers_n):
            t = threading.Thread(
                target=self._receive_loop, name=f"ferrymq-jmq-receive-{i}", daemon=True
            )
            self._receivers.append(t)
            t.start()

    def close(self, timeout: float | timedelta | None = None) -> None:
        """Stop receiving, wait (up to ``timeout``, default ``shutdown_timeout``) for the
        callbacks of every received message and for their acks, then close the connection.
        Messages still running at the deadline are not acked: the broker delivers them again
        after the ack timeout."""
        limit = _seconds("timeout", timeout, self._shutdown_timeout)
        with self._cond:
            if self._state in ("closing", "closed"):
                return
            was_running = self._state == "running"
            self._state = "closing"
            self._receiving = False
            self._cond.notify_all()
        try:
            if was_running:
                self._drain(limit)
        finally:
            self._native.close()
            with self._cond:
                self._state = "closed"

    async def close_async(self, timeout: float | timedelta | None = None) -> None:
        # Waiting happens on a helper thread: async listeners may need this loop to finish.
        await asyncio.get_running_loop().run_in_executor(None, self.close, timeout)

    def _drain(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        for t in self._receivers:
            t.join()
        with self._cond:
            while self._cached > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    _log.warning(
                        "PushConsumer closed with %d messages still being consumed; they were "
                        "not acknowledged and will be delivered again after the ack timeout",
                        self._cached,
                    )
                    break
                self._cond.wait(left)
            self._stop_settler = True
            self._cond.notify_all()
        if self._settler is not None:
            self._settler.join()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if self._private_loop and self._loop is not None:
            _consumer.stop_private_loop(self._loop)

    # -- receiving ------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        while True:
            with self._cond:
                while self._receiving and (
                    self._cached + self._reserved >= self._max_messages
                    or self._cached_bytes >= self._max_bytes
                ):
                    self._cond.wait()
                if not self._receiving:
                    return
                n = min(self._batch, self._max_messages - self._cached - self._reserved)
                self._reserved += n
            try:
                messages = self._native.receive(n, PUSH_POLL)
            except ClientClosedError:
                self._unreserve(n)
                return
            except FerryError as e:
                self._unreserve(n)
                _log.warning("JMQ4 receive failed (retrying in 1 s): %s", e)
                with self._cond:
                    self._stats["receive_failures"] += 1
                    self._cond.wait_for(lambda: not self._receiving, 1.0)
                continue
            except BaseException:
                self._unreserve(n)
                raise
            if not messages:
                self._unreserve(n)
                continue
            batch = _Batch(messages)
            with self._cond:
                # A JMQ4 batch is delivered whole, so a receive may bring more than n.
                self._reserved -= n
                self._cached += len(messages)
                self._cached_bytes += batch.nbytes
                st = self._stats
                st["received"] += len(messages)
                st["max_cached_messages"] = max(st["max_cached_messages"], self._cached)
                st["max_cached_bytes"] = max(st["max_cached_bytes"], self._cached_bytes)
                self._cond.notify_all()
            self._dispatch(batch)

    def _unreserve(self, n: int) -> None:
        with self._cond:
            self._reserved -= n
            self._cond.notify_all()

    def _release(self, n: int, nbytes: int) -> None:
        with self._cond:
            self._cached -= n
            self._cached_bytes -= nbytes
            self._cond.notify_all()

    def _dispatch(self, batch: _Batch) -> None:
        if self._executor is not None:
            for m in batch.messages:
                self._executor.submit(self._consume_sync, batch, m)
            return
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._spawn, batch)
        except RuntimeError:  # the event loop is closed: nobody can consume them
            _log.error(
                "the listener's event loop is closed; %d received messages were not consumed "
                "and will be delivered again after the ack timeout",
                len(batch.messages),
            )
            self._release(len(batch.messages), batch.nbytes)

    # -- consuming ------------------------------------------------------------------------

    def _outcome(self, result: object, m: JmqMessage) -> bool:
        if result is None or result == ConsumeResult.SUCCESS:
            return True
        if result != ConsumeResult.FAILURE:
            _log.error(
                "listener returned %r for message %s; expected ferrymq.ConsumeResult or None "
                "(counted as FAILURE)",
                result,
                m.message_id,
            )
        return False

    def _failed(self, m: JmqMessage, e: BaseException) -> None:
        _log.error(
            "listener raised an exception consuming message %s of topic %s (attempt %d)",
            m.message_id,
            m.topic,
            m.delivery_attempt,
            exc_info=e,
        )

    def _consume_sync(self, batch: _Batch, m: JmqMessage) -> None:
        try:
            ok = self._outcome(self._listener(m), m)
        except Exception as e:
            self._failed(m, e)
            ok = False
        self._done(batch, m, ok)

    def _spawn(self, batch: _Batch) -> None:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._threads)
        for m in batch.messages:
            task = asyncio.ensure_future(self._consume_async(batch, m))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _consume_async(self, batch: _Batch, m: JmqMessage) -> None:
        assert self._semaphore is not None
        async with self._semaphore:
            try:
                ok = self._outcome(await self._listener(m), m)  # type: ignore[misc]
            except Exception as e:
                self._failed(m, e)
                ok = False
            except asyncio.CancelledError:
                self._done(batch, m, False)
                raise
        self._done(batch, m, ok)

    def _done(self, batch: _Batch, m: JmqMessage, ok: bool) -> None:
        with self._cond:
            (batch.ok if ok else batch.failed).append(m)
            self._stats["consumed_ok" if ok else "consumed_failed"] += 1
            batch.remaining -= 1
            if batch.remaining == 0:
                self._settle_queue.append(batch)
                self._cond.notify_all()

    # -- settling -------------------------------------------------------------------------

    def _settle_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._settle_queue) or self._stop_settler)
                if not self._settle_queue:
                    return
                batches = list(self._settle_queue)
                self._settle_queue.clear()
            acks = [m for b in batches for m in b.ok]
            nacks = [m for b in batches for m in b.failed]
            settled = self._settle(acks, nacks)
            with self._cond:
                if settled:
                    self._stats["acked"] += len(acks)
                    self._stats["nacked"] += len(nacks)
                for b in batches:
                    self._cached -= len(b.messages)
                    self._cached_bytes -= b.nbytes
                self._cond.notify_all()

    def _settle(self, acks: list[JmqMessage], nacks: list[JmqMessage]) -> bool:
        for attempt in range(3):
            try:
                self._native.settle(acks, nacks)
                return True
            except FerryError as e:
                if attempt == 2:
                    with self._cond:
                        self._stats["settle_failures"] += 1
                    _log.warning(
                        "could not settle %d messages (%s); the broker delivers them again after "
                        "the ack timeout",
                        len(acks) + len(nacks),
                        e,
                    )
                    return False
                time.sleep(1.0)
        return False

    # -- introspection --------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self._cond:
            out = dict(self._stats)
            out["cached_messages"] = self._cached
            out["cached_bytes"] = self._cached_bytes
        return out

    @property
    def group(self) -> str:
        return self._group

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        return {t: FilterExpression.all() for t in self._native.topics}

    @property
    def fifo(self) -> bool | None:
        return False

    @property
    def client_id(self) -> str | None:
        return f"jmq:{self._group}"

    def __repr__(self) -> str:
        return (
            f"PushConsumer(endpoint={self._native.endpoint!r}, protocol='jmq4', "
            f"app={self._group!r}, {self._state})"
        )
