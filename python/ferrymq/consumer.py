"""``ferrymq.SimpleConsumer`` and ``ferrymq.PushConsumer``: one consuming API over RocketMQ 5,
JMQ4 and NATS JetStream.

The backend is chosen from the endpoint scheme (as for :class:`ferrymq.Producer`): plain
``host:port[;host:port]`` or ``rocketmq://`` (``rocketmqs://`` for TLS) selects RocketMQ 5;
``jmq://host:port`` selects JMQ4, where ``group`` is the JMQ4 app and ``token=`` is required;
``nats://`` selects JetStream durable pull consumers (group = durable name, topic = subject).
Both classes are the native consumers (:class:`ferrymq._native.SimpleConsumer`,
:class:`ferrymq._native.PushConsumer`) over every protocol, and every message is a
:class:`MessageView`. The mapping of each protocol is stated once, in the core
(``jmq/consumer_rpc.rs``, ``nats/consumer_rpc.rs``); in short:

* JMQ4: subscriptions are topics fixed at construction (no tag or SQL filters; ``subscribe``
  may drop and take again one of them); ``invisible_duration`` is the fetch's ack timeout and
  the results of one receive's messages are sent together once each has one;
  ``change_invisible_duration`` puts a message in the broker's retry queue (delivered again
  after the broker's own delay, as attempt 2);
* JetStream: the invisible duration is the durable consumer's ``ack_wait``
  (``nats_options={"ack_wait": …}``, default 30 s; a receive asking for another is refused);
  ``change_invisible_duration`` is ``-NAK`` with that delay; a receive with several subjects
  polls each in turn.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from . import _exit, _hooks, _native, _registry
from ._args import known_options, nonblank, refuse
from ._endpoints import first_endpoint, protocol_of
from ._lifecycle import Lifecycle
from ._native import (
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageView,
    TlsConfig,
)
from ._nats import user_password
from ._stats import StatsCallback, StatsReporter, stats_reporter
from .exceptions import InvalidArgumentError
from .interceptors import Chain, HookPoint, chain_of

__all__ = ["Listener", "PushConsumer", "SimpleConsumer"]

_Seconds = float | timedelta
_Filter = str | FilterExpression | None
_Subscriptions = Mapping[str, _Filter] | str | Iterable[str]
_CredentialsArg = Credentials | tuple[str, str] | tuple[str, str, str] | None
_TlsArg = bool | str | TlsConfig | None
_Messages = MessageView | Iterable[MessageView]

_Outcome = ConsumeResult | Awaitable[ConsumeResult | None] | None

#: A push consumer listener: ``f(message)`` returning ``ConsumeResult`` or ``None`` (success),
#: a plain callable or an ``async def``; raising counts as ``FAILURE``. The message is a
#: :class:`MessageView` whatever the protocol.
Listener = Callable[[MessageView], _Outcome]

#: The ``jmq_options`` names (JMQ4 consumer settings).
_JMQ_OPTIONS = frozenset(
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
#: The ``nats_options`` names.
_NATS_OPTIONS = frozenset({"stream", "ack_wait", "name"})


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


def _is_all(f: object) -> bool:
    if f is None or f == "*" or f == "":
        return True
    return isinstance(f, FilterExpression) and f.type == "TAG" and f.expression == "*"


def _topics(protocol: str, subscriptions: object) -> list[str]:
    """The topics (subjects) of a jmq:// or nats:// consumer, which has no tag or SQL filters."""
    if subscriptions is None:
        raise InvalidArgumentError(
            f"subscriptions: a {protocol}:// consumer needs its topics at construction"
        )
    if isinstance(subscriptions, str):
        return [subscriptions]
    if isinstance(subscriptions, Mapping):
        for topic, f in subscriptions.items():
            if not _is_all(f):
                raise InvalidArgumentError(
                    f"subscriptions: {protocol}:// has no tag or SQL filters (topic {topic!r} "
                    f"has {f!r}); subscribe with None or '*'"
                )
    try:
        topics = list(subscriptions)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            "subscriptions: must be a topic, a list of topics or a {topic: filter} mapping"
        ) from None
    names = [t for t in topics if isinstance(t, str)]
    if not names or len(names) != len(topics):
        raise InvalidArgumentError("subscriptions: name at least one topic (str)")
    return names


def _connect_args(
    endpoints: str | Iterable[str],
    group: str,
    subscriptions: _Subscriptions | None,
    *,
    credentials: _CredentialsArg,
    namespace: str | None,
    tls: _TlsArg,
    request_timeout: _Seconds | None,
    route_refresh_interval: _Seconds | None,
    settings_sync_interval: _Seconds | None,
    app: str | None,
    token: str | None,
    jmq_options: Mapping[str, Any] | None,
    nats_options: Mapping[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """The protocol of ``endpoints`` and the native consumer's arguments saying where it
    connects; options that mean nothing to the protocol are refused, naming the parameter."""
    protocol = _consumer_protocol(endpoints)
    if protocol != "nats":
        refuse("only for nats:// endpoints", {"nats_options": nats_options})
    if protocol != "jmq":
        refuse("only for jmq:// endpoints", {"jmq_options": jmq_options})
    args: dict[str, Any] = {"endpoints": endpoints, "subscriptions": subscriptions}
    if protocol == "rocketmq":
        # app and token are ignored by RocketMQ (as by ferrymq.Producer), so that one
        # configuration serves every protocol.
        args.update(
            credentials=credentials,
            namespace=namespace,
            tls=tls,
            request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval,
            settings_sync_interval=settings_sync_interval,
        )
        return "rocketmq", args
    if protocol == "jmq":
        refuse(
            "only for RocketMQ endpoints",
            {
                "route_refresh_interval": route_refresh_interval,
                "settings_sync_interval": settings_sync_interval,
            },
        )
        nonblank(group, "must not be blank (for jmq:// it is the JMQ4 app)")
        if app is not None and app != group:
            raise InvalidArgumentError(
                f"app: a JMQ4 consumer is identified by its app, which is the group "
                f"({group!r}); app={app!r} differs"
            )
        if not token:
            raise InvalidArgumentError("token: a jmq:// endpoint needs token= (the app's token)")
        if credentials is not None:
            raise InvalidArgumentError("credentials: a jmq:// endpoint authenticates with token=")
        if tls:
            raise InvalidArgumentError("tls: ferrymq's JMQ4 client has no TLS")
        extra = known_options("jmq_options", jmq_options, _JMQ_OPTIONS)
        args.update(
            endpoints=first_endpoint(endpoints),
            subscriptions=_topics("jmq", subscriptions),
            namespace=namespace,
            request_timeout=request_timeout,
            jmq={"app": group, "token": token, **extra},
        )
        return "jmq", args
    refuse(
        "not for nats:// endpoints",
        {
            "namespace": namespace,
            "tls": tls,
            "route_refresh_interval": route_refresh_interval,
            "settings_sync_interval": settings_sync_interval,
            "app": app,
        },
        (None, False),
    )
    nonblank(group, "must not be blank (the durable consumer's name)")
    extra = known_options("nats_options", nats_options, _NATS_OPTIONS)
    user, password = user_password(credentials)
    args.update(
        subscriptions=_topics("nats", subscriptions),
        nats=_native.JetStream(
            endpoints if isinstance(endpoints, str) else list(endpoints),
            name=extra.get("name"),
            user=user,
            password=password,
            token=token,
            request_timeout=5.0 if request_timeout is None else request_timeout,
        ),
        nats_stream=extra.get("stream"),
        nats_ack_wait=extra.get("ack_wait"),
    )
    return "nats", args


class _GroupConsumer(Lifecycle):
    """What both consumers share: their group, subscriptions and identity."""

    _protocol: str
    _impl: _native.SimpleConsumer | _native.PushConsumer
    _stats_reporter: StatsReporter | None

    def _stop_stats(self) -> None:
        if self._stats_reporter is not None:
            self._stats_reporter.stop()

    def stats(self, percentiles: Sequence[float] | None = None) -> dict[str, Any]:
        """Live figures as a plain dict, the same keys for every protocol.

        Keys of both consumers:

        * ``failed``: calls that failed (receives, acks, nacks, dead-letter forwards,
          changes of invisible duration; for :class:`PushConsumer` also listener calls that
          returned FAILURE or raised);
        * ``in_flight``: calls running now;
        * ``client``: ``system`` (``"rocketmq"``, ``"jmq"`` or ``"nats"``), ``client_id``,
          ``server_address``, ``server_port``, ``group`` (``None`` before :meth:`start`);
        * ``operations``: per operation name (``receive``, ``ack``, ``nack``,
          ``change_invisible_duration``, ``dead_letter``, ``process``; only those that ran)
          a dict of ``type`` (``receive``, ``settle`` or ``process``), ``calls``,
          ``messages``, ``failed``, ``failed_messages``, ``errors`` (failed calls by error
          type: the broker's status name, such as ``"INVALID_RECEIPT_HANDLE"``, or the kind
          of failure: ``"timeout"``, ``"connection"``, … ; ``"consume_failure"`` for the
          listener), ``in_flight``, ``retried`` and ``latency_ms`` (``mean``, ``min``,
          ``max`` and ``p50``, ``p90``, ``p99``, or one ``p<q>`` per entry of
          ``percentiles``; within 1%);
        * ``overflowed``: calls counted in an overflow series because the client already
          kept its maximum of series (one per operation, topic and error type).

        :class:`SimpleConsumer` adds ``received``, ``acked``, ``nacked``: messages of the
        successful receives, acks and changes of invisible duration.

        :class:`PushConsumer` adds its own counters: ``received``, ``consumed_ok``,
        ``consumed_failed``, ``local_retries``, ``acked``, ``nacked``, ``dead_lettered``,
        ``invalid_receipt_handles``, ``settle_retries``, ``settle_abandoned``,
        ``left_for_redelivery``, ``receive_failures``, ``receive_throttled``,
        ``cache_full_waits``, ``expired_process_queues``; the cache: ``process_queues``,
        ``cached_messages``, ``cached_bytes``, ``max_cached_messages``, ``max_cached_bytes``;
        the listener: ``listener_queued``, ``listener_running``. Its
        ``operations["process"]`` times each message from its hand-off to the listener to
        its result (the wait for a consumption thread included; a FIFO run of messages is one
        call).

        ``percentiles``: numbers above 0 and below 100 (at most 16); anything else raises
        :class:`InvalidArgumentError`. The figures stay readable after :meth:`close`.
        """
        return self._impl.stats(percentiles)

    def subscribe(self, topic: str, filter: _Filter = None) -> None:
        """Read ``topic`` (``filter``: a tag expression, a :class:`FilterExpression` or
        ``None`` for all) from now on, or replace the filter of a subscribed topic (a push
        consumer assigns its queues at once). The consumer must be running; on error nothing
        changes. JMQ4: only a topic named at construction; JMQ4 and JetStream: no tag or SQL
        filters."""
        self._impl.subscribe(topic, filter)

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic``; messages already received are still consumed (push) and can
        still be acked."""
        self._impl.unsubscribe(topic)

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        """``{topic: FilterExpression}`` read now."""
        return self._impl.subscriptions

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def client_id(self) -> str | None:
        return self._impl.client_id

    @property
    def protocol(self) -> str:
        """``"rocketmq"``, ``"jmq"`` or ``"nats"``."""
        return self._protocol

    def __repr__(self) -> str:
        return repr(self._impl)


class SimpleConsumer(_GroupConsumer):
    """Receives messages on demand; the caller acks each (``with``/``async with``, or
    :meth:`start` and :meth:`close`).

    Args:
        endpoints: ``"host:port[;host:port]"`` (RocketMQ 5, optionally ``rocketmq://``),
            ``"jmq://host:port"`` (JMQ4) or ``"nats://host:port"`` (JetStream).
        group: the consumer group; for JMQ4 the app, for JetStream the durable consumer's name.
        subscriptions: ``{topic: filter}`` (``None``/``"*"``, a tag expression, or a
            :class:`FilterExpression`), a topic, or a list of topics. JMQ4 and JetStream:
            topics (subjects) only.
        await_duration: long-polling time of :meth:`receive` (default 20 s).
        credentials, namespace, tls, request_timeout, route_refresh_interval,
            settings_sync_interval: as for :class:`ferrymq.Producer` (the last two RocketMQ
            only; ``nats://`` takes ``credentials=(user, password)``).
        app, token: JMQ4 identity (``app`` may repeat ``group``); ``token`` is required there
            (and accepted by ``nats://``); both are ignored by RocketMQ.
        jmq_options: further JMQ4 consumer settings for ``jmq://`` (``mode``, ``ack_timeout``,
            ``long_poll``, ``session_timeout``, ``region``, ``client_ip``,
            ``metadata_refresh``); an unknown name raises :class:`InvalidArgumentError`.
        nats_options: for ``nats://``: ``stream`` (else found by subject), ``ack_wait`` (the
            invisible duration, default 30 s), ``name`` (the connection name).

        interceptors: a list of :class:`ferrymq.Interceptor`: RECEIVE hooks around
            :meth:`receive` (``before`` with no messages, ``after`` with those received), ACK
            around :meth:`ack` (one call with the list), NACK around
            :meth:`change_invisible_duration`. See :mod:`ferrymq.interceptors`.

    Messages are :class:`MessageView` on every protocol (see the module documentation for
    what each protocol's invisible duration and ``change_invisible_duration`` are).
    """

    _impl: _native.SimpleConsumer

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
        stats_callback: StatsCallback | None = None,
        stats_interval: _Seconds | None = None,
        interceptors: Sequence[object] | None = None,
    ) -> None:
        reporter = stats_reporter(self, stats_callback, stats_interval)
        self._protocol, args = _connect_args(
            endpoints,
            group,
            subscriptions,
            credentials=credentials,
            namespace=namespace,
            tls=tls,
            request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval,
            settings_sync_interval=settings_sync_interval,
            app=app,
            token=token,
            jmq_options=jmq_options,
            nats_options=nats_options,
        )
        self._impl = _native.SimpleConsumer(group=group, await_duration=await_duration, **args)
        self._chain = chain_of(
            interceptors, self._protocol, lambda: self._impl.client_id, self._impl.group
        )
        _registry.register(self)
        self._stats_reporter = reporter
        if reporter is not None:
            reporter.start()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SimpleConsumer:
        """Connect (RocketMQ: settings and routes; JMQ4: connection, topic metadata;
        JetStream: the group's durable consumers)."""
        self._impl.start()
        return self

    async def start_async(self) -> SimpleConsumer:
        await self._impl.start_async()
        return self

    def close(self) -> None:
        """Close the connection (unacked messages are delivered again later); stops the
        ``stats_callback``. Idempotent."""
        self._impl.close()
        self._stop_stats()

    async def close_async(self) -> None:
        await self._impl.close_async()
        self._stop_stats()

    # -- consuming ---------------------------------------------------------------------------

    def receive(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> list[MessageView]:
        """Up to ``max_messages`` messages, waiting up to ``await_duration`` (GIL released);
        each stays invisible to other consumers for ``invisible_duration`` (default 30 s;
        JMQ4: the consumer's ack timeout; JetStream: ``ack_wait``) unless acked. With
        :mod:`ferrymq.telemetry` tracing, the call is a ``receive`` span linked to each
        message's creation context."""
        chain = self._chain
        if chain is not None:
            return chain.call(
                HookPoint.RECEIVE, [], lambda: self._receive(max_messages, invisible_duration)
            )
        return self._receive(max_messages, invisible_duration)

    def _receive(self, max_messages: int, invisible_duration: _Seconds | None) -> list[MessageView]:
        hook = _hooks.receive
        if hook is None:
            return self._impl.receive(max_messages, invisible_duration)
        return hook(self, lambda: self._impl.receive(max_messages, invisible_duration))

    async def receive_async(
        self, max_messages: int = 16, invisible_duration: _Seconds | None = None
    ) -> list[MessageView]:
        chain = self._chain
        if chain is not None:
            return await chain.call_async(
                HookPoint.RECEIVE,
                [],
                lambda: self._receive_async(max_messages, invisible_duration),
            )
        return await self._receive_async(max_messages, invisible_duration)

    async def _receive_async(
        self, max_messages: int, invisible_duration: _Seconds | None
    ) -> list[MessageView]:
        hook = _hooks.receive_async
        if hook is None:
            return await self._impl.receive_async(max_messages, invisible_duration)
        return await hook(self, lambda: self._impl.receive_async(max_messages, invisible_duration))

    def ack(self, message: _Messages) -> None:
        """Acknowledge a message, or a list of them. RocketMQ: one ``AckMessage`` per run of
        adjacent messages from the same topic and broker; JetStream: one confirmed ack each;
        JMQ4: a receive's acks go to the broker together once each of its messages is acked
        (or moved to the retry queue), and ``close()`` sends what is left."""
        chain = self._chain
        if chain is not None:
            messages = _listed(message)
            chain.call(HookPoint.ACK, messages, lambda: self._impl.ack(messages))
            return
        self._impl.ack(message)

    async def ack_async(self, message: _Messages) -> None:
        chain = self._chain
        if chain is not None:
            messages = _listed(message)
            await chain.call_async(HookPoint.ACK, messages, lambda: self._impl.ack_async(messages))
            return
        await self._impl.ack_async(message)

    def change_invisible_duration(self, message: MessageView, duration: _Seconds) -> None:
        """Make ``message`` visible again after ``duration`` (from now). JetStream: ``-NAK``
        with that delay; JMQ4: to the broker's retry queue, after the broker's own delay."""
        chain = self._chain
        if chain is not None:
            chain.call(
                HookPoint.NACK,
                [message],
                lambda: self._impl.change_invisible_duration(message, duration),
            )
            return
        self._impl.change_invisible_duration(message, duration)

    async def change_invisible_duration_async(
        self, message: MessageView, duration: _Seconds
    ) -> None:
        chain = self._chain
        if chain is not None:
            await chain.call_async(
                HookPoint.NACK,
                [message],
                lambda: self._impl.change_invisible_duration_async(message, duration),
            )
            return
        await self._impl.change_invisible_duration_async(message, duration)


class PushConsumer(_GroupConsumer):
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
        interceptors: a list of :class:`ferrymq.Interceptor`: CONSUME hooks around each
            listener call (one message; ``after`` sees what it raised and, as
            ``context.outcome``, what it returned), run where the listener runs (a consumption
            thread, or awaited on the listener's event loop). See :mod:`ferrymq.interceptors`.

    A consumer still running when the interpreter exits is closed then, as by :meth:`close`.
    """

    _impl: _native.PushConsumer

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
        stats_callback: StatsCallback | None = None,
        stats_interval: _Seconds | None = None,
        interceptors: Sequence[object] | None = None,
    ) -> None:
        reporter = stats_reporter(self, stats_callback, stats_interval)
        self._protocol, args = _connect_args(
            endpoints,
            group,
            subscriptions,
            credentials=credentials,
            namespace=namespace,
            tls=tls,
            request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval,
            settings_sync_interval=settings_sync_interval,
            app=app,
            token=token,
            jmq_options=jmq_options,
            nats_options=nats_options,
        )
        chain = chain_of(interceptors, self._protocol, lambda: self._impl.client_id, group)
        self._chain = chain
        self._settle_hooks: threading.Thread | None = None
        self._impl = _native.PushConsumer(
            group=group,
            listener=listener if chain is None else _intercepted_listener(chain, listener),
            # The engine acks, nacks and forwards on its own: it reports each attempt for the
            # ACK, NACK and DEAD_LETTER hooks, which a thread of ours runs (batch by batch).
            settle_events=None if chain is None else _SETTLE_EVENTS,
            consumption_threads=consumption_threads,
            max_cache_messages=max_cache_messages,
            max_cache_bytes=max_cache_bytes,
            fifo_accelerator=fifo_accelerator,
            fifo_pipelining=fifo_pipelining,
            receive_batch_size=receive_batch_size,
            max_concurrent_receives=max_concurrent_receives,
            shutdown_timeout=shutdown_timeout,
            **args,
        )
        _registry.register(self)
        self._stats_reporter = reporter
        if reporter is not None:
            reporter.start()

    def start(self) -> PushConsumer:
        """Connect and start consuming."""
        self._impl.start()
        self._start_settle_hooks()
        _exit.track(self)
        return self

    async def start_async(self) -> PushConsumer:
        """Connect and start consuming; an ``async def`` listener runs on this event loop."""
        await self._impl.start_async()
        self._start_settle_hooks()
        _exit.track(self)
        return self

    def _start_settle_hooks(self) -> None:
        if self._chain is None or self._settle_hooks is not None:
            return
        self._settle_hooks = threading.Thread(
            target=self._chain.run_reported,
            args=(self._impl.next_settle_events,),
            name="ferrymq-settle-hooks",
            daemon=True,
        )
        self._settle_hooks.start()

    def _join_settle_hooks(self, timeout: _Seconds | None) -> None:
        """Wait (up to ``timeout``, default 30 s) until the hooks of every settle attempt ran:
        the closed engine reports what is left, then the thread ends."""
        thread = self._settle_hooks
        if thread is None or thread is threading.current_thread():
            return
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        thread.join(30.0 if timeout is None else float(timeout))

    def _close_at_exit(self) -> None:
        # Interpreter exit with the consumer still running: close it while Python can still
        # run its callbacks (see ferrymq/_exit.py).
        self.close()

    def close(self, timeout: _Seconds | None = None) -> None:
        """Stop receiving, wait for running callbacks and their acks (up to ``timeout``,
        default ``shutdown_timeout``), then disconnect; stops the ``stats_callback``.
        Idempotent."""
        self._impl.close(timeout)
        self._join_settle_hooks(timeout)
        self._stop_stats()

    async def close_async(self, timeout: _Seconds | None = None) -> None:
        await self._impl.close_async(timeout)
        await asyncio.to_thread(self._join_settle_hooks, timeout)
        self._stop_stats()

    @property
    def fifo(self) -> bool | None:
        """Whether the group is consumed in FIFO order (RocketMQ: known once started)."""
        return self._impl.fifo


#: Settle events the engine queues for the hooks' thread before its settling waits.
_SETTLE_EVENTS = 1024


def _listed(message: _Messages) -> list[MessageView]:
    if isinstance(message, MessageView):
        return [message]
    return list(message)


def _intercepted_listener(chain: Chain, listener: Listener) -> Listener:
    """``listener`` between the CONSUME hooks: a plain callable's run on its consumption thread
    (the one GIL hold of its call), an ``async def``'s awaited on its loop."""
    if not callable(listener):
        return listener  # refused by the native consumer, naming the parameter
    if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
        getattr(listener, "__call__", None)  # noqa: B004 (an object with an async __call__)
    ):

        async def consume_async(message: MessageView) -> ConsumeResult | None:
            messages = [message]
            ctx = chain.context(HookPoint.CONSUME, messages)
            await chain.before_async(ctx, messages)
            started = time.perf_counter()
            try:
                result = await listener(message)  # type: ignore[misc]
            except BaseException as exc:
                await chain.after_async(ctx, messages, exc, started)
                raise
            await chain.after_async(ctx, messages, None, started, result)
            return result  # type: ignore[no-any-return]

        return consume_async

    def consume(message: MessageView) -> _Outcome:
        return chain.call(HookPoint.CONSUME, [message], lambda: listener(message))

    return consume
