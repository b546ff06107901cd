"""``ferrymq.Producer``: one publishing API over every backend.

The backend is chosen from the endpoint scheme by :func:`ferrymq._endpoints.protocol_of` (the
one resolver every class and the Spark source use), and is a native producer:
plain ``host:port[;host:port]`` or ``rocketmq://`` (``rocketmqs://`` for TLS) selects RocketMQ 5
(``_native.RocketMQProducer``); the other protocols share the one class ``_native.Producer``,
made per protocol: ``jmq://host:port`` selects JMQ4 (JoyQueue, ``_native.jmq_producer``, which
needs ``app`` and ``token``; a transaction takes its topic from its first message);
``remoting://host:port`` selects RocketMQ's classic remoting protocol through its name servers
(``_native.remoting_producer``: ``send``/``send_batch``, a batch in one request);
``nats://host:port`` publishes to NATS JetStream (``_native.nats_producer``). Each is typed
as the stub's ``_native._Producer`` (what every native producer answers, stated once there and
checked against the extension); receipts are :class:`ferrymq.Receipt`
(narrow with ``isinstance`` to :class:`SendReceipt`, :class:`JmqSendReceipt` or
:class:`NatsSendReceipt`).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from . import _hooks, _native, _registry
from ._args import as_list, known_options, refuse
from ._endpoints import first_endpoint, protocol_of
from ._lifecycle import Lifecycle
from ._native import Credentials, Message, MessageView, TlsConfig
from ._nats import user_password
from ._stats import StatsCallback, stats_reporter
from ._views import Receipt
from .exceptions import FerryError
from .interceptors import Chain, HookPoint, chain_of

if TYPE_CHECKING:
    from ._native import _Producer, _Transaction

__all__ = ["DeliveryCallback", "Producer", "TransactionResolution"]

#: The JMQ4 producer options ``Producer`` passes through ``jmq_options``.
JMQ_OPTIONS = frozenset(
    {
        "region",
        "qos",
        "compression",
        "compress_threshold",
        "send_timeout",
        "max_body",
        "transaction_timeout",
        "transaction_topics",
        "feedback_interval",
        "metadata_refresh",
        "client_ip",
    }
)

#: ``on_delivery(err, receipt)``: exactly one of the two is ``None``.
DeliveryCallback = Callable[[FerryError | None, Receipt | None], object]


class TransactionResolution(enum.Enum):
    """What a transaction checker answers for an orphaned transaction."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"


class Producer(Lifecycle):
    """Publishes messages; thread-safe; use as ``with``/``async with`` or call :meth:`start`
    and :meth:`close`.

    Args:
        endpoints: ``"host:port[;host:port]"``, optionally ``rocketmq://…`` (a RocketMQ 5
            proxy, gRPC); ``"remoting://host:port"`` (RocketMQ name servers, classic remoting
            protocol); ``"jmq://host:port"`` (JMQ4).
        topics: topics whose routes are fetched at start (and announced to the broker, which
            needs them for orphaned-transaction checks).
        credentials: :class:`Credentials` or ``(access_key, secret_key)`` for request signing.
        namespace: RocketMQ namespace.
        tls: ``True`` (system roots), a CA file path, or :class:`TlsConfig`.
        request_timeout: seconds (or timedelta) per request until the broker sends its own.
        max_attempts: send attempts per message (default: the broker's, usually 3).
        transaction_checker: ``f(MessageView) -> TransactionResolution`` for orphaned
            transactions; runs on a ferrymq thread, never under a ferrymq lock. JMQ4 asks it
            about a ``JmqOrphan`` (``topic``, ``tx_id``, ``transaction_id``) instead.
        max_pending: bound of :meth:`produce`'d messages not yet reported by :meth:`poll`.
        heartbeat_interval, route_refresh_interval, settings_sync_interval: periods of the
            background tasks: heartbeats (10 s), route refresh (30 s: new queues and changed
            permissions are used from then on) and the settings re-sent on telemetry (5 min:
            the broker's answer, e.g. a new body-size limit or retry policy, applies from then
            on).
        app, token: JMQ4 (``jmq://``) identity; required there, unused by RocketMQ. NATS:
            ``token`` authenticates.
        jmq_options: further JMQ4 options for ``jmq://`` (``qos``, ``compression``,
            ``compress_threshold``, ``transaction_timeout``, ``feedback_interval``,
            ``region`` …).
        stats_callback: ``f(stats)``, called with :meth:`stats` every ``stats_interval``
            seconds on a ferrymq thread (never under a ferrymq lock) from construction until
            :meth:`close`; an exception in it is logged on the ``ferrymq`` logger.
        stats_interval: seconds (or timedelta) between two calls, above 0 (default 5).
        interceptors: a list of :class:`ferrymq.Interceptor`: SEND hooks around :meth:`send`,
            :meth:`send_batch` (one call with the list), :meth:`produce` (``before`` in the
            call, ``after`` when :meth:`poll`/:meth:`flush` reports the delivery) and a
            transaction's sends; COMMIT and ROLLBACK around its end (with the messages it
            sent). See :mod:`ferrymq.interceptors`.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        topics: Iterable[str] = (),
        credentials: Credentials | tuple[str, str] | tuple[str, str, str] | None = None,
        namespace: str | None = None,
        tls: bool | str | TlsConfig | None = None,
        request_timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        transaction_checker: Callable[[MessageView], TransactionResolution] | None = None,
        max_pending: int = 65536,
        heartbeat_interval: float | timedelta | None = None,
        route_refresh_interval: float | timedelta | None = None,
        settings_sync_interval: float | timedelta | None = None,
        app: str | None = None,
        token: str | None = None,
        jmq_options: Mapping[str, Any] | None = None,
        stats_callback: StatsCallback | None = None,
        stats_interval: float | timedelta | None = None,
        interceptors: Sequence[object] | None = None,
    ) -> None:
        self._impl: _Producer[Receipt, _Transaction[Receipt]]
        reporter = stats_reporter(self, stats_callback, stats_interval)
        protocol = protocol_of(endpoints)
        self._protocol = protocol
        self._chain: Chain | None = chain_of(interceptors, protocol, lambda: self._impl.client_id)
        if protocol == "nats":
            refuse(
                "not used by nats:// endpoints",
                dict(
                    topics=tuple(topics) or None,
                    namespace=namespace,
                    tls=tls,
                    max_attempts=max_attempts,
                    transaction_checker=transaction_checker,
                    heartbeat_interval=heartbeat_interval,
                    route_refresh_interval=route_refresh_interval,
                    settings_sync_interval=settings_sync_interval,
                    app=app,
                    jmq_options=jmq_options,
                ),
            )
            user, password = user_password(credentials)
            self._impl = _native.nats_producer(
                endpoints if isinstance(endpoints, str) else list(endpoints),
                user=user,
                password=password,
                token=token,
                request_timeout=request_timeout,
                max_pending=max_pending,
            )
        elif protocol == "jmq":
            self._impl = _native.jmq_producer(
                first_endpoint(endpoints),
                app=app,
                token=token,
                namespace=namespace,
                request_timeout=request_timeout,
                max_attempts=3 if max_attempts is None else max_attempts,
                transaction_checker=transaction_checker,
                max_pending=max_pending,
                **known_options("jmq_options", jmq_options, JMQ_OPTIONS),
            )
        elif protocol == "remoting":
            # send/send_batch; produce, transactions and recall are refused by name.
            self._impl = _native.remoting_producer(
                endpoints,
                credentials=credentials,
                namespace=namespace,
                request_timeout=request_timeout,
                transaction_checker=transaction_checker,
            )
        else:
            self._impl = _native.RocketMQProducer(
                endpoints,
                topics=as_list(topics, "topics", "an iterable of topic names"),
                credentials=credentials,
                namespace=namespace,
                tls=tls,
                request_timeout=request_timeout,
                max_attempts=max_attempts,
                transaction_checker=transaction_checker,
                max_pending=max_pending,
                heartbeat_interval=heartbeat_interval,
                route_refresh_interval=route_refresh_interval,
                settings_sync_interval=settings_sync_interval,
            )
        _registry.register(self)
        self._stats_reporter = reporter
        if reporter is not None:
            reporter.start()

    def _publisher_target(self) -> object:
        """The native client an :class:`ferrymq.AsyncPublisher` over this producer drives (it
        refuses a remoting producer)."""
        return self._impl

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Producer:
        """Connect, receive the broker's settings and fetch the routes of ``topics``."""
        self._impl.start()
        return self

    async def start_async(self) -> Producer:
        await self._impl.start_async()
        return self

    def close(self) -> None:
        """Flush :meth:`produce`'d messages (running their callbacks), wait for in-flight
        sends, then tell the broker; stops the ``stats_callback``. Idempotent."""
        self._impl.close()
        self._stop_stats()

    async def close_async(self) -> None:
        await self._impl.close_async()
        self._stop_stats()
        self._impl.poll(0)

    def __enter__(self) -> Producer:
        if not self._impl.started:
            self._impl.start()
        return self

    async def __aenter__(self) -> Producer:
        if not self._impl.started:
            await self._impl.start_async()
        return self

    # -- sending -----------------------------------------------------------------------------

    def send(self, message: Message) -> Receipt:
        """Send one message; blocks (GIL released) until the broker stored it. The receipt is a
        :class:`SendReceipt` (RocketMQ), :class:`JmqSendReceipt` or :class:`NatsSendReceipt`.

        With :mod:`ferrymq.telemetry` tracing, the send is a PRODUCER span ``send {topic}``
        whose context the message carries (unless it carries one already)."""
        chain = self._chain
        if chain is not None:
            return chain.call(HookPoint.SEND, [message], lambda: self._send(message), _listed)
        return self._send(message)

    def _send(self, message: Message) -> Receipt:
        hook = _hooks.send
        if hook is None:
            return self._impl.send(message)
        receipt: Receipt = hook(message, self._impl.send)
        return receipt

    async def send_async(self, message: Message) -> Receipt:
        chain = self._chain
        if chain is not None:
            return await chain.call_async(
                HookPoint.SEND, [message], lambda: self._send_async(message), _listed
            )
        return await self._send_async(message)

    async def _send_async(self, message: Message) -> Receipt:
        hook = _hooks.send_async
        if hook is None:
            return await self._impl.send_async(message)
        receipt: Receipt = await hook(message, self._impl.send_async)
        return receipt

    def send_batch(self, messages: Iterable[Message], *, packed: bool = False) -> list[Receipt]:
        """Send many messages of one topic (and one kind); the receipts are in order.

        By default each message goes in its own request (many in flight at once; a FIFO message
        group's in order), so each keeps its own id, tag, keys and properties: a RocketMQ 5 proxy
        stores a multi-message request as one batch under the first message's id and metadata.

        ``packed=True`` sends exactly such requests, the fastest way to publish: up to 1024
        messages (and no more bytes than the broker's body limit) per request, each request
        stored under one message id. The messages must be NORMAL messages that differ only in
        their bodies (same topic, tag, keys and properties), else ``InvalidArgumentError`` names
        the first that differs and nothing is sent. FIFO messages are refused too: a proxy puts
        a multi-message request on a queue of its own choosing, whatever the message group.
        Every receipt carries the id consumers will see and the message's own offset. (JMQ4
        always sends a batch in one request per topic; there ``packed`` changes nothing.)

        Not atomic: if some fail, the error says how many of the batch were sent.

        With :mod:`ferrymq.telemetry` tracing, each message without a trace context carries
        the current span's (no span per message)."""
        stamp = _hooks.stamp
        if stamp is not None:
            messages = stamp(messages)
        chain = self._chain
        if chain is not None:
            batch = list(messages)
            return chain.call(
                HookPoint.SEND, batch, lambda: list(self._impl.send_batch(batch, packed=packed))
            )
        return list(self._impl.send_batch(messages, packed=packed))

    async def send_batch_async(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[Receipt]:
        stamp = _hooks.stamp
        if stamp is not None:
            messages = stamp(messages)
        chain = self._chain
        if chain is not None:
            batch = list(messages)

            async def call() -> list[Receipt]:
                return list(await self._impl.send_batch_async(batch, packed=packed))

            return await chain.call_async(HookPoint.SEND, batch, call)
        return list(await self._impl.send_batch_async(messages, packed=packed))

    def produce(self, message: Message, on_delivery: DeliveryCallback | None = None) -> None:
        """Queue ``message`` without waiting; messages are sent in batches in the background.
        ``on_delivery(err, receipt)`` runs on this thread inside :meth:`poll`/:meth:`flush`.
        Blocks, serving callbacks, while ``max_pending`` messages are unreported. With
        :mod:`ferrymq.telemetry` tracing, a message without a trace context carries the current
        span's (no span per message)."""
        stamp = _hooks.stamp
        if stamp is not None:
            (message,) = stamp((message,))
        chain = self._chain
        if chain is not None:
            on_delivery = _intercepted_delivery(chain, message, on_delivery)
        self._impl.produce(message, on_delivery)

    def poll(self, timeout: float | timedelta = 0.0) -> int:
        """Run callbacks of finished deliveries, waiting up to ``timeout`` s for one."""
        return self._impl.poll(timeout)

    def flush(self, timeout: float | timedelta | None = None) -> int:
        """Wait for every produced message (running callbacks); returns how many remain."""
        return self._impl.flush(timeout)

    def begin_transaction(self) -> _Transaction[Receipt]:
        """A transaction: ``send`` half messages, then ``commit()`` or ``rollback()`` (or use it
        as a context manager: commit on success, roll back on an exception)."""
        chain = self._chain
        if chain is not None:
            return cast(
                "_Transaction[Receipt]",
                InterceptedTransaction(self._impl.begin_transaction(), chain),
            )
        return self._impl.begin_transaction()

    def recall(self, topic: str, recall_handle: str) -> str:
        """Recall a delayed message before delivery; returns its message id."""
        return self._impl.recall(topic, recall_handle)

    async def recall_async(self, topic: str, recall_handle: str) -> str:
        return await self._impl.recall_async(topic, recall_handle)

    # -- introspection -----------------------------------------------------------------------

    def stats(self, percentiles: Sequence[float] | None = None) -> dict[str, Any]:
        """Live figures as a plain dict, the same keys for every protocol.

        * ``sent``: messages of the successful sends; ``failed``: calls that failed (sends,
          transaction ends); ``retried``: attempts beyond the first (a send retried after a
          retriable error; the managed publisher's retries are counted here too);
          ``in_flight``: calls running now; ``pending`` (not for ``remoting://``): messages
          :meth:`produce`'d and not yet reported;
        * ``client``: ``system`` (``"rocketmq"`` for gRPC and remoting, ``"jmq"``,
          ``"nats"``), ``client_id``, ``server_address``, ``server_port``, ``group`` (None);
          ``None`` until a ``jmq://``, ``nats://`` or ``remoting://`` producer connects;
        * ``operations``: per operation name (``send``; ``end_transaction`` for a commit or
          rollback) a dict of ``type`` (``send``), ``calls``, ``messages``, ``failed``,
          ``failed_messages``, ``errors`` (failed calls by error type: the broker's status
          name, such as ``"TOO_MANY_REQUESTS"``, or the kind of failure: ``"timeout"``,
          ``"connection"``, …), ``in_flight``, ``retried`` and ``latency_ms`` (``mean``,
          ``min``, ``max`` and ``p50``, ``p90``, ``p99``, or one ``p<q>`` per entry of
          ``percentiles``; within 1%);
        * ``overflowed``: calls counted in an overflow series (beyond 64 series of operation,
          topic and error type).

        A call is one request: a message, a packed request or a JMQ4 batch per topic (its
        messages counted in ``messages``), a JetStream publish per message; it is timed over
        its retries. ``percentiles``: numbers above 0 and below 100 (at most 16); anything
        else raises :class:`InvalidArgumentError`. Readable after :meth:`close`.
        """
        return self._impl.stats(percentiles)

    def _stop_stats(self) -> None:
        if self._stats_reporter is not None:
            self._stats_reporter.stop()

    @property
    def pending(self) -> int:
        """Produced messages not yet reported."""
        return self._impl.pending

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    @property
    def protocol(self) -> str:
        """``"rocketmq"``, ``"remoting"``, ``"jmq"`` or ``"nats"``."""
        return self._protocol

    @property
    def endpoints(self) -> str:
        return self._impl.endpoints

    @property
    def namespace(self) -> str:
        return self._impl.namespace

    @property
    def started(self) -> bool:
        return self._impl.started

    @property
    def closed(self) -> bool:
        return self._impl.closed

    @property
    def isolated_endpoints(self) -> list[str]:
        """Endpoints avoided after failures, until a heartbeat succeeds."""
        return self._impl.isolated_endpoints

    @property
    def settings(self) -> dict[str, Any]:
        """The settings in force (merged with the broker's once started)."""
        return self._impl.settings

    def __repr__(self) -> str:
        return repr(self._impl).replace("RocketMQProducer(", "Producer(", 1)


def _listed(receipt: object) -> list[object]:
    return [receipt]


def _intercepted_delivery(
    chain: Chain, message: Message, on_delivery: DeliveryCallback | None
) -> DeliveryCallback:
    """Run the SEND ``before`` hooks of a produced message now and return the delivery
    callback that runs its ``after`` hooks (then the user's ``on_delivery``) in ``poll``."""
    messages = [message]
    ctx = chain.context(HookPoint.SEND, messages)
    chain.before(ctx, messages)
    started = time.perf_counter()

    def delivered(err: FerryError | None, receipt: Receipt | None) -> object:
        chain.after(ctx, messages, err, started, None if receipt is None else [receipt])
        return None if on_delivery is None else on_delivery(err, receipt)

    return delivered


class InterceptedTransaction:
    """A transaction of a producer with interceptors: its sends are SEND calls, its end a
    COMMIT or ROLLBACK call with the messages it sent."""

    def __init__(self, inner: _Transaction[Receipt], chain: Chain) -> None:
        self._inner = inner
        self._chain = chain
        self._messages: list[Message] = []
        self._ended = False

    def send(self, message: Message) -> Receipt:
        receipt = self._chain.call(
            HookPoint.SEND, [message], lambda: self._inner.send(message), _listed
        )
        self._messages.append(message)
        return receipt

    async def send_async(self, message: Message) -> Receipt:
        receipt = await self._chain.call_async(
            HookPoint.SEND, [message], lambda: self._inner.send_async(message), _listed
        )
        self._messages.append(message)
        return receipt

    def commit(self) -> None:
        self._ended = True
        self._chain.call(HookPoint.COMMIT, list(self._messages), self._inner.commit)

    async def commit_async(self) -> None:
        self._ended = True
        await self._chain.call_async(
            HookPoint.COMMIT, list(self._messages), self._inner.commit_async
        )

    def rollback(self) -> None:
        self._ended = True
        self._chain.call(HookPoint.ROLLBACK, list(self._messages), self._inner.rollback)

    async def rollback_async(self) -> None:
        self._ended = True
        await self._chain.call_async(
            HookPoint.ROLLBACK, list(self._messages), self._inner.rollback_async
        )

    @property
    def receipts(self) -> list[Receipt]:
        return self._inner.receipts

    def __enter__(self) -> InterceptedTransaction:
        return self

    def __exit__(
        self, exc_type: object = None, _exc: object = None, _tb: object = None
    ) -> Literal[False]:
        if not self._ended:
            if exc_type is not None:
                self.rollback()
            else:
                self.commit()
        return False

    def __repr__(self) -> str:
        return repr(self._inner)
