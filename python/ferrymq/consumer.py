"""``ferrymq.SimpleConsumer`` and ``ferrymq.PushConsumer``: one consuming API over RocketMQ 5,
JMQ4 and (``SimpleConsumer``) NATS JetStream.

The backend is chosen from the endpoint scheme (as for :class:`ferrymq.Producer`): plain
``host:port[;host:port]`` or ``rocketmq://`` (``rocketmqs://`` for TLS) selects the native
RocketMQ 5 consumers (:class:`ferrymq._native.SimpleConsumer`,
:class:`ferrymq._native.PushConsumer`); ``jmq://host:port`` selects JMQ4, where ``group`` is the
JMQ4 app and ``token=`` is required: the same native push consumer over JMQ4, and a simple
consumer built on :class:`ferrymq.JmqConsumer` (:mod:`ferrymq._jmq_simple`, which also lists the
differences by protocol). ``nats://`` selects JetStream durable pull consumers
(:mod:`ferrymq._nats_consumer`, where the mapping is listed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from . import _exit, _native
from ._args import refuse
from ._endpoints import protocol_of
from ._jmq_simple import JmqSimpleBackend, _topics, jmq_consumer
from ._lifecycle import Lifecycle
from ._native import (
    ConsumeResult,
    Credentials,
    FilterExpression,
    JmqMessage,
    MessageView,
    TlsConfig,
)
from ._nats_consumer import NatsSimpleBackend, jetstream_args
from ._views import ReceivedMessage, only
from .exceptions import InvalidArgumentError

__all__ = ["Listener", "PushConsumer", "SimpleConsumer"]

_Seconds = float | timedelta
_Filter = str | FilterExpression | None
_Subscriptions = Mapping[str, _Filter] | str | Iterable[str]
_CredentialsArg = Credentials | tuple[str, str] | tuple[str, str, str] | None
_TlsArg = bool | str | TlsConfig | None

_Outcome = ConsumeResult | Awaitable[ConsumeResult | None] | None

#: A push consumer listener: ``f(message)`` returning ``ConsumeResult`` or ``None`` (success),
#: a plain callable or an ``async def``; raising counts as ``FAILURE``. The message is a
#: :class:`MessageView` whatever the protocol (a listener typed for :class:`ReceivedMessage`
#: fits too).
Listener = Callable[[MessageView], _Outcome]


class _SimpleBackend(Protocol):
    # What SimpleConsumer drives on either protocol (acks differ by message type: see ack()).
    def start(self) -> None: ...
    def start_async(self) -> Awaitable[None]: ...
    def close(self) -> None: ...
    def close_async(self) -> Awaitable[None]: ...
    def receive(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> Sequence[ReceivedMessage]: ...
    def receive_async(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> Awaitable[Sequence[ReceivedMessage]]: ...
    @property
    def group(self) -> str: ...
    @property
    def subscriptions(self) -> dict[str, FilterExpression]: ...
    @property
    def client_id(self) -> str | None: ...


def _consumer_protocol(endpoints: str | Iterable[str]) -> str:
    """The protocol of ``endpoints``; the acknowledging consumers serve RocketMQ 5, JMQ4 and
    NATS JetStream."""
    protocol = protocol_of(endpoints)
    if protocol == "remoting":
        raise InvalidArgumentError(
            "endpoints: remoting:// (name servers) is read by offset with ferrymq.PullConsumer; "
            "SimpleConsumer and PushConsumer need a RocketMQ 5 proxy (host:port), jmq:// or "
            "nats://"
        )
    return protocol


class SimpleConsumer(Lifecycle):
    """Receives messages on demand; the caller acks each (``with``/``async with``, or
    :meth:`start` and :meth:`close`).

    Args:
        endpoints: ``"host:port[;host:port]"`` (RocketMQ 5, optionally ``rocketmq://``) or
            ``"jmq://host:port"`` (JMQ4).
        group: the consumer group; for JMQ4 the app.
        subscriptions: ``{topic: filter}`` (``None``/``"*"``, a tag expression, or a
            :class:`FilterExpression`), a topic, or a list of topics. JMQ4: topics only.
        await_duration: long-polling time of :meth:`receive` (default 20 s).
        credentials, namespace, tls, request_timeout, route_refresh_interval,
            settings_sync_interval: as for :class:`ferrymq.Producer` (the last two RocketMQ only).
        app, token: JMQ4 identity (``app`` may repeat ``group``); ``token`` is required there;
            both are ignored by RocketMQ.
        jmq_options: further :class:`ferrymq.JmqConsumer` options for ``jmq://`` (``mode``,
            ``ack_timeout``, ``long_poll``, ``session_timeout``, ``region``, ``client_ip``,
            ``metadata_refresh``); an unknown name raises :class:`InvalidArgumentError`.
        nats_options: for ``nats://``: ``stream`` (else found by subject), ``ack_wait`` (the
            invisible duration, default 30 s), ``name`` (the connection name).

    Messages are :class:`ferrymq.ReceivedMessage` views: :class:`MessageView` for RocketMQ,
    :class:`ferrymq.JmqMessage` for ``jmq://``, :class:`ferrymq.JsMessage` for ``nats://``
    (JetStream durable pull consumers: group = durable name, topic = subject; see
    :mod:`ferrymq._nats_consumer`). For ``jmq://`` ``invisible_duration`` is the
    fetch's ack timeout,
    ack the messages of one :meth:`receive` together, ``change_invisible_duration`` raises and
    :meth:`nack` sends messages to the retry queue.
    """

    def __init__(
        self,
        endpoints: str | Iterable[str],
        group: str,
        *,
        subscriptions: _Subscriptions | None = None,
        await_duration: _Seconds | None = None,
        credentials: _CredentialsArg = None,
        namespace: str | None = None,
        tls: _TlsArg = None,
        request_timeout: _Seconds | None = None,
        route_refresh_interval: _Seconds | None = None,
        settings_sync_interval: _Seconds | None = None,
        app: str | None = None,
        token: str | None = None,
        jmq_options: Mapping[str, Any] | None = None,
        nats_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._jmq: JmqSimpleBackend | None = None
        self._nats: NatsSimpleBackend | None = None
        self._rmq: _native.SimpleConsumer | None = None
        self._impl: _SimpleBackend
        protocol = _consumer_protocol(endpoints)
        if protocol == "nats":
            _rocketmq_only(jmq_options=jmq_options)
            _nats_refuses(
                namespace=namespace,
                tls=tls,
                route_refresh_interval=route_refresh_interval,
                settings_sync_interval=settings_sync_interval,
                app=app,
            )
            self._impl = self._nats = NatsSimpleBackend(
                endpoints,
                group,
                subscriptions=subscriptions,
                await_duration=await_duration,
                credentials=credentials,
                token=token,
                request_timeout=request_timeout,
                options=nats_options,
            )
            return
        refuse("only for nats:// endpoints", {"nats_options": nats_options})
        if protocol == "jmq":
            _jmq_refuses(
                route_refresh_interval=route_refresh_interval,
                settings_sync_interval=settings_sync_interval,
            )
            consumer = jmq_consumer(
                endpoints,
                group,
                subscriptions=subscriptions,
                app=app,
                token=token,
                namespace=namespace,
                request_timeout=request_timeout,
                credentials=credentials,
                tls=tls,
                options=jmq_options,
            )
            self._jmq = JmqSimpleBackend(consumer, group, await_duration)
            self._impl = self._jmq
            return
        _rocketmq_only(jmq_options=jmq_options)
        self._impl = self._rmq = _native.SimpleConsumer(
            endpoints,
            group,
            subscriptions=subscriptions,
            await_duration=await_duration,
            credentials=credentials,
            namespace=namespace,
            tls=tls,
            request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval,
            settings_sync_interval=settings_sync_interval,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SimpleConsumer:
        """Connect (RocketMQ: settings and routes; JMQ4: connection, topic metadata)."""
        self._impl.start()
        return self

    async def start_async(self) -> SimpleConsumer:
        await self._impl.start_async()
        return self

    def close(self) -> None:
        """Close the connection (unacked messages are delivered again later). Idempotent."""
        self._impl.close()

    async def close_async(self) -> None:
        await self._impl.close_async()

    # -- consuming ---------------------------------------------------------------------------

    def receive(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, waiting up to ``await_duration`` (GIL released);
        each stays invisible to other consumers for ``invisible_duration`` (default 30 s)
        unless acked."""
        return list(self._impl.receive(max_messages, invisible_duration))

    async def receive_async(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> list[ReceivedMessage]:
        return list(await self._impl.receive_async(max_messages, invisible_duration))

    def ack(self, message: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        """Acknowledge a message, or a list of them (JMQ4: in one request)."""
        if self._nats is not None:
            self._nats.ack(message)
        elif self._jmq is not None:
            self._jmq.ack(self._jmq_messages(message))
        else:
            for m in self._views(message):
                self._rocketmq().ack(m)

    async def ack_async(self, message: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        if self._nats is not None:
            await self._nats.ack_async(message)
        elif self._jmq is not None:
            await self._jmq.ack_async(self._jmq_messages(message))
        else:
            for m in self._views(message):
                await self._rocketmq().ack_async(m)

    def nack(
        self, message: ReceivedMessage | Iterable[ReceivedMessage], retry_type: str = "exception"
    ) -> None:
        """JMQ4 only: send messages to the broker's retry queue (``retry_type`` ``"exception"``,
        ``"timeout"`` or ``"other"``), from which they are delivered again. RocketMQ redelivers
        by :meth:`change_invisible_duration`."""
        self._jmq_only("nack").nack(self._jmq_messages(message), retry_type)

    async def nack_async(
        self, message: ReceivedMessage | Iterable[ReceivedMessage], retry_type: str = "exception"
    ) -> None:
        await self._jmq_only("nack").nack_async(self._jmq_messages(message), retry_type)

    def change_invisible_duration(self, message: ReceivedMessage, duration: _Seconds) -> None:
        """Make ``message`` visible again after ``duration`` (from now). NATS: ``-NAK`` with
        that delay. JMQ4 has none (raises)."""
        if self._nats is not None:
            return self._nats.change_invisible_duration(message, duration)
        if self._jmq is not None:
            self._jmq.change_invisible_duration(message, duration)
        self._rocketmq().change_invisible_duration(self._view(message), duration)

    async def change_invisible_duration_async(
        self, message: ReceivedMessage, duration: _Seconds
    ) -> None:
        if self._nats is not None:
            return await self._nats.change_invisible_duration_async(message, duration)
        if self._jmq is not None:
            await self._jmq.change_invisible_duration_async(message, duration)
        await self._rocketmq().change_invisible_duration_async(self._view(message), duration)

    def subscribe(self, topic: str, filter: _Filter = None) -> None:
        """RocketMQ only: add (or change) a subscription."""
        if self._nats is not None:
            self._nats.subscribe(topic, filter)
        if self._jmq is not None:
            self._jmq.subscribe(topic, filter)
        self._rocketmq().subscribe(topic, filter)

    def unsubscribe(self, topic: str) -> None:
        """RocketMQ only: remove a subscription."""
        if self._nats is not None:
            self._nats.unsubscribe(topic)
        if self._jmq is not None:
            self._jmq.unsubscribe(topic)
        self._rocketmq().unsubscribe(topic)

    def _rocketmq(self) -> _native.SimpleConsumer:
        assert self._rmq is not None  # the JMQ4 branches above raised
        return self._rmq

    @staticmethod
    def _views(message: object) -> list[MessageView]:
        return only(MessageView, message, "message", "a RocketMQ consumer")

    @staticmethod
    def _view(message: object) -> MessageView:
        if isinstance(message, MessageView):
            return message
        raise InvalidArgumentError(
            "message: a RocketMQ consumer takes one ferrymq.MessageView, "
            f"not {type(message).__name__}"
        )

    @staticmethod
    def _jmq_messages(message: object) -> list[JmqMessage]:
        return only(JmqMessage, message, "message", "a jmq:// consumer")

    def _jmq_only(self, what: str) -> _native.JmqConsumer:
        if self._jmq is None:
            raise InvalidArgumentError(
                f"{what}: only JMQ4 has {what}; use change_invisible_duration()"
            )
        return self._jmq.native

    # -- introspection -----------------------------------------------------------------------

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        return self._impl.subscriptions

    @property
    def client_id(self) -> str | None:
        return self._impl.client_id

    @property
    def protocol(self) -> str:
        """``"rocketmq"``, ``"jmq4"`` or ``"nats"``."""
        if self._nats is not None:
            return "nats"
        return "rocketmq" if self._jmq is None else "jmq4"

    def __repr__(self) -> str:
        return repr(self._impl)


class PushConsumer(Lifecycle):
    """Runs ``listener`` for every message of its subscriptions (``with``/``async with``, or
    :meth:`start` and :meth:`close`).

    ``listener(message)`` is a plain callable (run on ``consumption_threads`` threads) or an
    ``async def`` (run on the event loop of :meth:`start_async`/``async with``, or on a private
    loop thread after :meth:`start`). Returning ``ConsumeResult.SUCCESS`` or ``None`` acks the
    message; ``ConsumeResult.FAILURE`` or raising (logged with its traceback on the
    ``ferrymq.consumer`` logger) hands it back for redelivery (RocketMQ: by the retry policy;
    JMQ4: through the broker's retry queue; JetStream: ``-NAK`` with the back-off delay).

    Args:
        endpoints, group, subscriptions, credentials, namespace, tls, request_timeout,
            route_refresh_interval, settings_sync_interval, app, token, jmq_options,
            nats_options: as for :class:`SimpleConsumer` (a RocketMQ push consumer follows queue
            changes through its assignment scan, every 5 s, whatever
            ``route_refresh_interval``; over ``nats://`` the group's durable pull consumers are
            read, a failed message is redelivered with ``-NAK`` after the back-off and
            terminated after its last attempt).
        consumption_threads: listener concurrency.
        max_cache_messages, max_cache_bytes: bounds of received but unsettled messages.
        fifo_accelerator: RocketMQ FIFO groups: consume message groups in parallel.
        fifo_pipelining: RocketMQ FIFO groups: start a message group's (or queue's) next
            message as soon as the previous one was consumed, without waiting for the broker
            to accept its ack. Faster per group, but weaker: if an ack is refused for good
            (its receipt handle expired), the broker redelivers that message after the ones
            behind it were consumed. By default the next message starts only once the
            broker accepted the previous one's ack (retried until it lands) or its
            dead-letter forward.
        receive_batch_size: messages per receive (default: RocketMQ's, or 32 for JMQ4).
        max_concurrent_receives: receives in flight at once per queue (JMQ4: per topic, each
            fetch holding one partition until all its messages are settled).
        shutdown_timeout: how long :meth:`close` waits for callbacks and acks.

    A consumer still running when the interpreter exits is closed then, as by :meth:`close`.
    """

    def __init__(
        self,
        endpoints: str | Iterable[str],
        group: str,
        *,
        subscriptions: _Subscriptions,
        listener: Listener,
        consumption_threads: int = 20,
        max_cache_messages: int = 4096,
        max_cache_bytes: int = 67108864,
        fifo_accelerator: bool = False,
        fifo_pipelining: bool = False,
        receive_batch_size: int | None = None,
        max_concurrent_receives: int = 4,
        shutdown_timeout: _Seconds | None = None,
        credentials: _CredentialsArg = None,
        namespace: str | None = None,
        tls: _TlsArg = None,
        request_timeout: _Seconds | None = None,
        route_refresh_interval: _Seconds | None = None,
        settings_sync_interval: _Seconds | None = None,
        app: str | None = None,
        token: str | None = None,
        jmq_options: Mapping[str, Any] | None = None,
        nats_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._protocol = "rocketmq"
        jmq: _native.JmqConsumer | None = None
        nats: _native.JetStream | None = None
        nats_stream: str | None = None
        nats_ack_wait: float | None = None
        protocol = _consumer_protocol(endpoints)
        if protocol != "nats":
            refuse("only for nats:// endpoints", {"nats_options": nats_options})
        if protocol == "nats":
            _nats_refuses(
                route_refresh_interval=route_refresh_interval,
                settings_sync_interval=settings_sync_interval,
                namespace=namespace,
                tls=tls,
                app=app,
            )
            _rocketmq_only(jmq_options=jmq_options)
            # The native push consumer reads durable pull consumers of the group.
            subscriptions = _topics(subscriptions)
            nats, nats_stream, nats_ack_wait = jetstream_args(
                endpoints,
                group,
                credentials=credentials,
                token=token,
                request_timeout=request_timeout,
                options=nats_options,
            )
            self._protocol = "nats"
            credentials = request_timeout = None
        elif protocol == "jmq":
            _jmq_refuses(
                route_refresh_interval=route_refresh_interval,
                settings_sync_interval=settings_sync_interval,
            )
            # The native push consumer runs over JMQ4 with the options this client carries.
            jmq = jmq_consumer(
                endpoints,
                group,
                subscriptions=subscriptions,
                app=app,
                token=token,
                namespace=namespace,
                request_timeout=request_timeout,
                credentials=credentials,
                tls=tls,
                options=jmq_options,
            )
            self._protocol = "jmq4"
            endpoints, subscriptions = jmq.endpoint, jmq.topics
            credentials = namespace = tls = request_timeout = None
        else:
            _rocketmq_only(jmq_options=jmq_options)
        self._impl = _native.PushConsumer(
            endpoints,
            group,
            subscriptions=subscriptions,
            listener=listener,
            consumption_threads=consumption_threads,
            max_cache_messages=max_cache_messages,
            max_cache_bytes=max_cache_bytes,
            fifo_accelerator=fifo_accelerator,
            fifo_pipelining=fifo_pipelining,
            receive_batch_size=receive_batch_size,
            max_concurrent_receives=max_concurrent_receives,
            shutdown_timeout=shutdown_timeout,
            credentials=credentials,
            namespace=namespace,
            tls=tls,
            request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval,
            settings_sync_interval=settings_sync_interval,
            jmq=jmq,
            nats=nats,
            nats_stream=nats_stream,
            nats_ack_wait=nats_ack_wait,
        )

    def start(self) -> PushConsumer:
        """Connect and start consuming."""
        self._impl.start()
        _exit.track(self)
        return self

    async def start_async(self) -> PushConsumer:
        """Connect and start consuming; an ``async def`` listener runs on this event loop."""
        await self._impl.start_async()
        _exit.track(self)
        return self

    def _close_at_exit(self) -> None:
        # Interpreter exit with the consumer still running: close it while Python can still
        # run its callbacks (see ferrymq/_exit.py).
        self.close()

    def close(self, timeout: _Seconds | None = None) -> None:
        """Stop receiving, wait for running callbacks and their acks (up to ``timeout``,
        default ``shutdown_timeout``), then disconnect. Idempotent."""
        self._impl.close(timeout)

    async def close_async(self, timeout: _Seconds | None = None) -> None:
        await self._impl.close_async(timeout)

    def subscribe(self, topic: str, filter: _Filter = None) -> None:
        """Read ``topic`` (``filter``: a tag expression, a :class:`FilterExpression` or
        ``None`` for all) from now on, or replace the filter of a subscribed topic; its queues
        are assigned at once. The consumer must be running; on error nothing changes."""
        self._impl.subscribe(topic, filter)

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic``; messages already received are still consumed and acked."""
        self._impl.unsubscribe(topic)

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        """``{topic: FilterExpression}`` read now."""
        return self._impl.subscriptions

    def stats(self) -> dict[str, int]:
        """Live counters (``received``, ``consumed_ok``, ``consumed_failed``, ``acked``,
        ``nacked``, ``cached_messages``, ``cached_bytes`` …), the same for every protocol."""
        return self._impl.stats()

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def fifo(self) -> bool | None:
        """Whether the group is consumed in FIFO order (RocketMQ: known once started)."""
        return self._impl.fifo

    @property
    def client_id(self) -> str | None:
        return self._impl.client_id

    @property
    def protocol(self) -> str:
        """``"rocketmq"``, ``"jmq4"`` or ``"nats"``."""
        return self._protocol

    def __repr__(self) -> str:
        return repr(self._impl)


def _jmq_refuses(**options: object) -> None:
    # RocketMQ client options that mean nothing to JMQ4: refused rather than ignored.
    refuse("only for RocketMQ endpoints", options)


def _nats_refuses(**options: object) -> None:
    # RocketMQ and JMQ4 client options that mean nothing to JetStream (False: a flag left off).
    refuse("not for nats:// endpoints", options, (None, False))


def _rocketmq_only(*, jmq_options: object) -> None:
    # app and token are ignored by RocketMQ (as by ferrymq.Producer), so that one configuration
    # serves both; JMQ4 options are refused.
    refuse("only for jmq:// endpoints", {"jmq_options": jmq_options})
