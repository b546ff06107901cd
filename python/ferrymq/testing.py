"""An embedded Apache RocketMQ 5 broker for development, tests and benchmarks.

:class:`EmbeddedBroker` runs an in-process ``apache.rocketmq.v2.MessagingService`` gRPC broker
(written in Rust, no JVM) on loopback ports. It follows the server rules of the RocketMQ 5 proxy
(settings before heartbeat/receive, POP receive with invisibility and receipt handles, FIFO
message-group blocking, DLQ per group, transactions with orphan check-back, delayed delivery,
recall) and adds the pull/offset RPCs and fault injection::

    from ferrymq.testing import EmbeddedBroker

    with EmbeddedBroker(endpoints=2) as broker:
        broker.create_topic("orders", message_type="FIFO", queues=8)
        broker.create_group("billing", fifo=True)
        print(broker.endpoints)          # "127.0.0.1:40001;127.0.0.1:40002"
        broker.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=2)

``endpoints`` is every endpoint as ``host:port`` joined by ``;`` — the endpoints syntax of the
RocketMQ clients. Each endpoint is a separate broker with its own port (routes spread a topic's
queues over them), and any one of them answers QueryRoute for every topic.

Endpoints are numbered from 0 in fault and inspection methods. Durations are in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal

from . import _native
from ._args import as_list
from .exceptions import InvalidArgumentError

__all__ = ["STATUS_CODES", "EmbeddedBroker"]

#: RocketMQ v2 status codes by name, for :meth:`EmbeddedBroker.inject_status`.
STATUS_CODES: dict[str, int] = {
    "OK": 20000,
    "MULTIPLE_RESULTS": 30000,
    "BAD_REQUEST": 40000,
    "ILLEGAL_ACCESS_POINT": 40001,
    "ILLEGAL_TOPIC": 40002,
    "ILLEGAL_CONSUMER_GROUP": 40003,
    "ILLEGAL_MESSAGE_TAG": 40004,
    "ILLEGAL_MESSAGE_KEY": 40005,
    "ILLEGAL_MESSAGE_GROUP": 40006,
    "ILLEGAL_MESSAGE_PROPERTY_KEY": 40007,
    "INVALID_TRANSACTION_ID": 40008,
    "ILLEGAL_MESSAGE_ID": 40009,
    "ILLEGAL_FILTER_EXPRESSION": 40010,
    "ILLEGAL_INVISIBLE_TIME": 40011,
    "ILLEGAL_DELIVERY_TIME": 40012,
    "INVALID_RECEIPT_HANDLE": 40013,
    "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE": 40014,
    "UNRECOGNIZED_CLIENT_TYPE": 40015,
    "MESSAGE_CORRUPTED": 40016,
    "CLIENT_ID_REQUIRED": 40017,
    "ILLEGAL_POLLING_TIME": 40018,
    "ILLEGAL_OFFSET": 40019,
    "UNAUTHORIZED": 40100,
    "FORBIDDEN": 40300,
    "NOT_FOUND": 40400,
    "MESSAGE_NOT_FOUND": 40401,
    "TOPIC_NOT_FOUND": 40402,
    "CONSUMER_GROUP_NOT_FOUND": 40403,
    "OFFSET_NOT_FOUND": 40404,
    "REQUEST_TIMEOUT": 40800,
    "MESSAGE_BODY_TOO_LARGE": 41301,
    "MESSAGE_BODY_EMPTY": 41302,
    "TOO_MANY_REQUESTS": 42900,
    "MESSAGE_PROPERTIES_TOO_LARGE": 43101,
    "INTERNAL_ERROR": 50000,
    "INTERNAL_SERVER_ERROR": 50001,
    "HA_NOT_AVAILABLE": 50002,
    "NOT_IMPLEMENTED": 50100,
    "PROXY_TIMEOUT": 50400,
    "MASTER_PERSISTENCE_TIMEOUT": 50401,
    "SLAVE_PERSISTENCE_TIMEOUT": 50402,
}


def _code(code: int | str) -> int:
    if isinstance(code, str):
        try:
            return STATUS_CODES[code.upper()]
        except KeyError:
            raise InvalidArgumentError(f"code: unknown status code name {code!r}") from None
    return code


class EmbeddedBroker:
    """An in-process RocketMQ 5 gRPC broker on loopback ports.

    Args:
        endpoints: number of endpoints (brokers), each on its own port.
        auto_create: create unknown topics (NORMAL, 8 queues) on first use. Off by default, as
            gRPC clients of a real RocketMQ cannot rely on it. Consumer groups are always
            created on first use (with 17 delivery attempts), as RocketMQ brokers do by default
            (``autoCreateSubscriptionGroup``).
        host: the loopback address to listen on.
        ports: fixed ports, one per endpoint (default: free ports).
        max_body_size: largest message body (4 MiB).
        max_topic_bytes: memory bound of a topic (256 MiB), counting what each stored message
            holds: its body and metadata plus 128 B, about 320 B for a 100 B message (see
            ``docs/reliability.md``). A full topic first evicts messages every consumer group
            is done with, then answers ``TOO_MANY_REQUESTS`` (42900, retriable: consumers must
            catch up).
        when_full: ``"reject"`` (above) or ``"drop_oldest"`` (evict regardless, like retention).
        long_polling_min, long_polling_max: bounds of the receive long-polling time
            (proxy: 5 s and 20 s).
        min_invisible, max_invisible: bounds of a receive's invisible duration (10 s, 12 h).
        auto_renew_invisible: invisible duration of auto-renewed receives (60 s).
        transaction_check_delay, transaction_check_interval, transaction_check_max: when an
            unresolved half message is checked back with a producer (6 s, then every 30 s,
            15 times, then discarded).
        max_delay: furthest delivery time of a delay message (3 days).
        access_key, secret_key: require signed requests (``UNAUTHORIZED`` otherwise).
        auto_create_queues: queues of an auto-created topic (8).
        metric_collector: ``"host:port"`` of an OTLP/gRPC metrics collector to announce in
            the clients' settings (``Settings.metric``), as a proxy exporting metrics does:
            RocketMQ clients then export their ``rocketmq_*`` histograms there. Off by default.
        jmq: also serve JMQ4 (JoyQueue) on its own loopback port(s), see :attr:`jmq_endpoint`.
            Topics of this broker are served over JMQ4 too (each queue is a partition); the
            messages of the two protocols are stored separately. JMQ4 clients authenticate
            with ``app="test_app", token="test_token"`` or an app added with
            :meth:`add_jmq_app`.
        jmq_nodes: JMQ4 broker nodes (each on its own port; partition groups are led by the
            nodes in turn).
    """

    def __init__(
        self,
        *,
        endpoints: int = 1,
        auto_create: bool = False,
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        max_body_size: int | None = None,
        max_topic_bytes: int | None = None,
        when_full: Literal["reject", "drop_oldest"] = "reject",
        long_polling_min: float | timedelta | None = None,
        long_polling_max: float | timedelta | None = None,
        min_invisible: float | timedelta | None = None,
        max_invisible: float | timedelta | None = None,
        auto_renew_invisible: float | timedelta | None = None,
        transaction_check_delay: float | timedelta | None = None,
        transaction_check_interval: float | timedelta | None = None,
        transaction_check_max: int | None = None,
        max_delay: float | timedelta | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        auto_create_queues: int | None = None,
        metric_collector: str | None = None,
        jmq: bool = True,
        jmq_nodes: int = 1,
    ) -> None:
        self._native = _native.EmbeddedBroker(
            endpoints=endpoints,
            auto_create=auto_create,
            host=host,
            ports=as_list(ports, "ports", "a list of int") if ports is not None else None,
            max_body_size=max_body_size,
            max_topic_bytes=max_topic_bytes,
            when_full=when_full,
            long_polling_min=long_polling_min,
            long_polling_max=long_polling_max,
            min_invisible=min_invisible,
            max_invisible=max_invisible,
            auto_renew_invisible=auto_renew_invisible,
            transaction_check_delay=transaction_check_delay,
            transaction_check_interval=transaction_check_interval,
            transaction_check_max=transaction_check_max,
            max_delay=max_delay,
            access_key=access_key,
            secret_key=secret_key,
            auto_create_queues=auto_create_queues,
            metric_collector=metric_collector,
        )
        self._jmq: _native.JmqServer | None = None
        if jmq:
            try:
                self._jmq = _native.JmqServer(broker=self._native, nodes=jmq_nodes, host=host)
            except BaseException:
                self._native.close()
                raise

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def endpoints(self) -> str:
        """Every endpoint as ``host:port``, joined by ``;`` (pass it to a client as is)."""
        return self._native.endpoints

    @property
    def addresses(self) -> list[str]:
        """The ``host:port`` of each endpoint, by index."""
        return self._native.addresses

    @property
    def remoting_endpoint(self) -> str:
        """``remoting://127.0.0.1:PORT``: the embedded broker as a RocketMQ name server + brokers
        over the classic remoting protocol."""
        return self._native.remoting_endpoint

    @property
    def remoting_addresses(self) -> list[str]:
        """The ``host:port`` of each endpoint's remoting listener, by index."""
        return self._native.remoting_addresses

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.closed

    def close(self) -> None:
        """Stop serving (idempotent). Stored messages are discarded."""
        if self._jmq is not None:
            self._jmq.shutdown()
        self._native.close()

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedBroker(endpoints={self.endpoints!r})"

    # -- JMQ4 ----------------------------------------------------------------------------

    @property
    def jmq_endpoint(self) -> str:
        """``jmq://127.0.0.1:PORT``: the JMQ4 (JoyQueue) endpoint serving this broker's topics."""
        return self.jmq.endpoint

    @property
    def jmq(self) -> _native.JmqServer:
        """The JMQ4 server: fault injection (``fail_next``, ``set_latency``,
        ``set_unavailable``, ``set_health``, ``set_coordinator_available``, ``set_leader``,
        ``restart``) and inspection (``message_count``, ``nodes``)."""
        if self._jmq is None:
            raise InvalidArgumentError("jmq: this broker was created with jmq=False")
        return self._jmq

    def add_jmq_app(self, app: str, token: str) -> None:
        """Let JMQ4 clients authenticate as ``app`` with ``token``."""
        self.jmq.add_app(app, token)

    # -- admin ---------------------------------------------------------------------------

    def create_topic(self, name: str, message_type: str = "NORMAL", queues: int = 8) -> None:
        """Create a topic accepting ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY
        or MIXED) with ``queues`` queues spread over the endpoints. Creating an existing topic
        again changes its type."""
        self._native.create_topic(name, message_type, queues)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic and its messages; returns whether it existed."""
        return self._native.delete_topic(name)

    def create_group(
        self,
        name: str,
        fifo: bool = False,
        max_delivery_attempts: int = 17,
        retry_backoff: Sequence[float | timedelta] | None = None,
    ) -> None:
        """Create (or replace) a consumer group. ``fifo`` blocks each message group while one of
        its messages is in flight; after ``max_delivery_attempts`` deliveries (17 by default:
        RocketMQ's ``retryMaxTimes`` 16 plus the first delivery) a message moves to
        ``%DLQ%<name>``. ``retry_backoff`` (seconds) is the customized back-off echoed to
        consumers in settings (RocketMQ's 1 s, 5 s, 10 s, 30 s, 1 min … 2 h by default)."""
        self._native.create_group(
            name,
            fifo,
            max_delivery_attempts,
            as_list(retry_backoff, "retry_backoff", "a list of durations")
            if retry_backoff is not None
            else None,
        )

    def update_settings(
        self, *, max_body_size: int | None = None, producer_max_attempts: int | None = None
    ) -> None:
        """Change server settings while clients run: the largest message body (checked on
        every send from now on) and the send attempts given to producers. Like the proxy, the
        broker answers each client's next settings sync (``settings_sync_interval`` of the
        client, 5 min by default) or re-opened telemetry stream with the new values; a group's
        retry policy changes the same way when :meth:`create_group` replaces the group."""
        self._native.update_settings(
            max_body_size=max_body_size, producer_max_attempts=producer_max_attempts
        )

    def set_queue_permission(
        self,
        topic: str,
        endpoint: int,
        queue: int,
        permission: Literal["READ_WRITE", "READ", "WRITE", "NONE"],
    ) -> None:
        """Change the permission of queue ``queue`` of ``endpoint`` (shown in routes)."""
        self._native.set_queue_permission(topic, endpoint, queue, permission)

    # -- faults --------------------------------------------------------------------------

    def set_unavailable(self, endpoint: int, mode: Literal["refuse", "hang"] | None) -> None:
        """Make an endpoint unavailable: ``"refuse"`` closes its port and cuts open connections;
        ``"hang"`` keeps the port open but stops reading and writing, so calls run into their
        deadline. ``None`` makes it available again (same port)."""
        self._native.set_unavailable(endpoint, mode)

    def inject_status(
        self,
        endpoint: int,
        code: int | str,
        *,
        rpc: str | None = None,
        count: int | None = None,
        fraction: float = 1.0,
        message: str | None = None,
    ) -> None:
        """Answer status ``code`` (number or name, e.g. ``"TOO_MANY_REQUESTS"``) instead of
        serving calls of ``endpoint``: only ``rpc`` (e.g. ``"SendMessage"``) if given, only the
        next ``count`` matching calls if given, only a random ``fraction`` of them."""
        self._native.inject_status(
            endpoint, _code(code), rpc=rpc, count=count, fraction=fraction, message=message
        )

    def set_latency(
        self, endpoint: int, seconds: float | timedelta, *, rpc: str | None = None
    ) -> None:
        """Delay every call of ``endpoint`` (or of one ``rpc``) by ``seconds``; 0 removes it."""
        self._native.set_latency(endpoint, seconds, rpc=rpc)

    def clear_faults(self, endpoint: int | None = None) -> None:
        """Remove status faults, latency and unavailability (of one endpoint, or all)."""
        self._native.clear_faults(endpoint)

    def drop_telemetry(self, endpoint: int) -> None:
        """End every Telemetry stream of ``endpoint`` (clients see UNAVAILABLE). Client
        settings are kept."""
        self._native.drop_telemetry(endpoint)

    def restart(self, endpoint: int) -> None:
        """Restart ``endpoint`` like a proxy restart: forget client settings and telemetry
        streams and cut connections; messages, receipts and transactions are kept."""
        self._native.restart(endpoint)

    # -- server-pushed telemetry commands ------------------------------------------------

    def print_thread_stack_trace(self, client_id: str) -> str:
        """Push PrintThreadStackTraceCommand to a client; returns the command's nonce."""
        return self._native.print_thread_stack_trace(client_id)

    def reconnect_endpoints(self, client_id: str) -> str:
        """Push ReconnectEndpointsCommand to a client; returns the nonce."""
        return self._native.reconnect_endpoints(client_id)

    def verify_message(self, client_id: str, topic: str, message_id: str) -> str:
        """Push VerifyMessageCommand with a stored message to a client; returns the nonce."""
        return self._native.verify_message(client_id, topic, message_id)

    def recover_orphaned_transaction(
        self, transaction_id: str, client_id: str | None = None
    ) -> None:
        """Check a pending transaction back now (RecoverOrphanedTransactionCommand), with
        ``client_id`` or any producer that declared the topic."""
        self._native.recover_orphaned_transaction(transaction_id, client_id)

    def telemetry_replies(self) -> list[dict[str, Any]]:
        """Replies clients sent on Telemetry (``thread_stack_trace``, ``verify_message_result``):
        dicts with endpoint, client_id, kind, nonce, code, detail."""
        return self._native.telemetry_replies()

    # -- inspection ----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts: ``topics`` (messages, bytes, delayed, per queue offsets and per group acked
        offset / in-flight), ``endpoints`` (calls per RPC, injected faults, clients, gRPC
        ``connections_accepted`` since start and ``connections_open`` now) and
        ``transactions``."""
        return self._native.stats()

    def messages(self, topic: str, limit: int = 100_000) -> list[dict[str, Any]]:
        """Retained messages of a topic (dicts: message_id, body, tag, keys, properties,
        message_group, queue_id, endpoint, offset, …)."""
        return self._native.messages(topic, limit)

    def dead_letters(self, group: str) -> list[dict[str, Any]]:
        """Messages in ``%DLQ%<group>``."""
        return self._native.dead_letters(group)

    def calls(self, endpoint: int, rpc: str) -> int:
        """Calls of ``rpc`` (e.g. ``"SendMessage"``) received by ``endpoint``."""
        return self._native.calls(endpoint, rpc)

    def clients(self, endpoint: int = 0) -> list[dict[str, Any]]:
        """Clients whose settings ``endpoint`` holds (client_id, client_type, group, topics,
        heartbeats, connected, language, version, settings / merged_settings as protobuf
        bytes)."""
        return self._native.clients(endpoint)

    def pending_transactions(self) -> list[dict[str, Any]]:
        """Half messages waiting for EndTransaction (transaction_id, topic, message_id)."""
        return self._native.pending_transactions()
