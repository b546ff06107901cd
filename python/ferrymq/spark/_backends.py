"""What the Spark data source needs from each backend, and the adapters that provide it.

A *source* lists the partitions of a topic, tells their readable offset range and reads exactly
``[start, end)`` of one partition as Arrow column buffers. A *sink* sends messages, blocking
until the broker stored them (at-least-once). Adapters are plain objects holding only their
config: the native clients they use come from the per-process cache (:mod:`._cache`), created
on first use in whichever process Spark runs the method.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .. import _native
from . import _cache
from ._options import Offsets, SinkConfig, SourceConfig

__all__ = ["OutMessage", "Sink", "Source", "sink_for"]

log = logging.getLogger("ferrymq.spark")


def _secret_digest(secret: str | None) -> str:
    return "" if secret is None else hashlib.sha256(secret.encode()).hexdigest()[:16]


def _started(
    kind: str, c: SourceConfig | SinkConfig, key: tuple[Any, ...], make: Callable[[], Any]
) -> AbstractContextManager[Any]:
    """A lease on the client ``make`` builds for ``c``, from the per-process cache (created and
    started on first use). It is cached by ``kind``, the endpoints, ``key`` and the identity:
    namespace, access key and the secret only as a digest."""

    def create() -> Any:
        client = make()
        client.start()
        return client

    ident = (c.namespace, c.access_key, _secret_digest(c.secret_key))
    return _cache.lease((kind, c.endpoints, *key, *ident), create)


class Source:
    """Offset-addressed reads of one backend through the native ``OffsetReader``, the same
    model for every protocol: the partitions of a topic, their earliest and latest offsets (or
    the first at a time), exact ``[start, end)`` reads as Arrow column buffers, and progress
    recorded where the protocol keeps it for lag tools (RocketMQ ``UpdateOffset``; JetStream
    and JMQ4 record nothing: the checkpoint holds the offsets, and committing a JMQ4 app's ack
    index would move its other consumers)."""

    def __init__(self, cfg: SourceConfig) -> None:
        self.cfg = cfg

    def client(self) -> AbstractContextManager[Any]:
        """A lease on the started native reader of this config, from the per-process cache."""
        c = self.cfg
        if c.backend == "rocketmq":
            # PullMessage / QueryOffset: the embedded broker, proxies serving the pull API.
            return _started(
                "rocketmq-pull",
                c,
                (c.group, c.topics, c.tag_filter, c.pull_batch_size),
                lambda: _native.OffsetReader.rocketmq(
                    c.endpoints,
                    c.group,
                    topics=list(c.topics),
                    tag_filter=c.tag_filter,
                    pull_batch_size=c.pull_batch_size,
                    credentials=c.credentials(),
                    namespace=c.namespace,
                    request_timeout=c.request_timeout,
                ),
            )
        if c.backend == "remoting":
            # The name server's route, then GET_MIN/MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP and
            # PULL_MESSAGE on each queue's master broker: what a stock RocketMQ serves.
            return _started(
                "remoting-reader",
                c,
                (c.group, c.tag_filter),
                lambda: _native.OffsetReader.remoting(
                    c.endpoints,
                    c.group,
                    tag_filter=c.tag_filter,
                    credentials=c.credentials(),
                    namespace=c.namespace,
                    request_timeout=c.request_timeout,
                ),
            )
        if c.backend == "nats":
            # Streams by sequence; ``filterSubject`` narrows them to a subject.
            return _started(
                "nats-reader",
                c,
                (*_nats_identity(c), c.filter_subject),
                lambda: _native.OffsetReader.nats(
                    c.endpoints, filter_subject=c.filter_subject, **_nats_args(c)
                ),
            )
        # JMQ4: FETCH_INDEX bounds, FETCH_PARTITION_MESSAGE from a client-chosen index.
        return _started(
            "jmq-range",
            c,
            _jmq_identity(c),
            lambda: _native.OffsetReader.jmq(c.endpoints, **_jmq_args(c)),
        )

    def partitions(self, topic: str) -> list[str]:
        with self.client() as reader:
            return list(reader.partitions(topic))

    def snapshot(self, topic: str, which: str) -> dict[str, int]:
        """The earliest or latest offset of every partition of ``topic`` (JMQ4: one
        FETCH_INDEX per leader broker)."""
        with self.client() as reader:
            return dict(reader.snapshot(topic, which))

    def earliest(self, topic: str, partition: str) -> int:
        with self.client() as reader:
            return int(reader.earliest(topic, partition))

    def latest(self, topic: str, partition: str) -> int:
        with self.client() as reader:
            return int(reader.latest(topic, partition))

    def offset_for_time(self, topic: str, partition: str, timestamp_ms: int) -> int:
        with self.client() as reader:
            return int(reader.offset_for_time(topic, partition, timestamp_ms))

    def read(self, topic: str, partition: str, start: int, end: int, max_rows: int) -> Any:
        with self.client() as reader:
            return reader.read_range(topic, partition, start, end, max_rows)

    def commit(self, offsets: Offsets) -> None:
        """Record progress for lag dashboards (best effort: Spark's checkpoint stays
        authoritative)."""
        if not self.cfg.commit_offsets:
            return
        with self.client() as reader:
            for topic, parts in offsets.items():
                for partition, off in parts.items():
                    try:
                        reader.commit(topic, partition, off)
                    except Exception as e:  # monitoring only
                        log.debug("commit %s/%s=%s failed: %s", topic, partition, off, e)


class OutMessage:
    """One message to send, as the sink adapters take it."""

    __slots__ = (
        "headers",
        "key",
        "message_group",
        "tag",
        "topic",
        "trace_context",
        "trace_state",
        "value",
        "write_id",
    )

    def __init__(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: dict[str, str],
        tag: str | None,
        message_group: str | None,
        write_id: str | None,
        trace_context: str | None = None,
        trace_state: str | None = None,
    ) -> None:
        self.topic = topic
        self.value = value
        self.key = key
        self.headers = headers
        self.tag = tag
        self.message_group = message_group
        self.write_id = write_id
        self.trace_context = trace_context
        self.trace_state = trace_state


class Sink(Protocol):
    """At-least-once sends of one backend."""

    def send(self, messages: Sequence[OutMessage]) -> None: ...


# --------------------------------------------------------------------------------------------
# RocketMQ 5 (gRPC)
# --------------------------------------------------------------------------------------------


def _rocketmq_message(m: OutMessage) -> Any:
    """A RocketMQ message for a sink row: the row's key, then the write id, as message keys."""
    keys: list[str] = []
    if m.key is not None:
        keys.append(m.key.decode("utf-8", "surrogateescape"))
    if m.write_id is not None:
        keys.append(m.write_id)
    return _native.Message(
        m.topic,
        m.value,
        keys=keys or None,
        tag=m.tag,
        properties=m.headers or None,
        message_group=m.message_group,
        trace_context=m.trace_context,
        trace_state=m.trace_state,
    )


class _SinkBase:
    """A sink of one config."""

    def __init__(self, cfg: SinkConfig) -> None:
        self.cfg = cfg


class RocketMQSink(_SinkBase):
    """Batched sends with the RocketMQ producer; the write id goes into the message keys."""

    def _producer(self) -> AbstractContextManager[Any]:
        c = self.cfg

        def make() -> Any:
            import ferrymq

            return ferrymq.Producer(
                c.endpoints,
                topics=[c.topic] if c.topic else [],
                credentials=c.credentials(),
                namespace=c.namespace,
                request_timeout=c.request_timeout,
            )

        return _started("rocketmq-producer", c, (), make)

    def send(self, messages: Sequence[OutMessage]) -> None:
        if not messages:
            return
        by_topic: dict[str, list[Any]] = {}
        for m in messages:
            by_topic.setdefault(m.topic, []).append(_rocketmq_message(m))
        with self._producer() as producer:
            for batch in by_topic.values():
                # A FIFO group must stay on its queue: send those one group at a time.
                groups: dict[str | None, list[Any]] = {}
                for msg in batch:
                    groups.setdefault(msg.message_group, []).append(msg)
                for group, msgs in groups.items():
                    if group is None:
                        producer.send_batch(msgs)
                    else:
                        for msg in msgs:
                            producer.send(msg)


# --------------------------------------------------------------------------------------------
# RocketMQ remoting: SEND_BATCH_MESSAGE
# --------------------------------------------------------------------------------------------


class RemotingSink(_SinkBase):
    """Batched writes over the remoting protocol: one ``SEND_BATCH_MESSAGE`` carries many rows,
    each with its own keys (the row's key, then the deterministic write id), tag, properties
    and unique message id; a message group's rows go to the group's queue in order."""

    def _producer(self) -> AbstractContextManager[Any]:
        c = self.cfg
        return _started(
            "remoting-producer",
            c,
            (),
            lambda: _native.remoting_producer(
                c.endpoints,
                credentials=c.credentials(),
                namespace=c.namespace,
                request_timeout=c.request_timeout,
            ),
        )

    def send(self, messages: Sequence[OutMessage]) -> None:
        if not messages:
            return
        batch = [_rocketmq_message(m) for m in messages]
        with self._producer() as producer:
            producer.send_batch(batch)


# --------------------------------------------------------------------------------------------
# NATS JetStream: stream sequences
# --------------------------------------------------------------------------------------------


def _nats_args(c: SourceConfig | SinkConfig) -> dict[str, Any]:
    """The connection arguments of a NATS client (user, password, token, timeout)."""
    opts = dict(c.extra)
    return {
        "user": opts.get("user"),
        "password": opts.get("password"),
        "token": opts.get("token"),
        "request_timeout": c.request_timeout or 5.0,
    }


def _nats_identity(c: SourceConfig | SinkConfig) -> tuple[Any, ...]:
    """The user, and the password and token only as digests (for client cache keys)."""
    opts = dict(c.extra)
    return (
        opts.get("user"),
        _secret_digest(opts.get("password")),
        _secret_digest(opts.get("token")),
    )


#: The header carrying the row's key (NATS messages have none).
KEY_HEADER = "ferrymq-key"
#: The header JetStream de-duplicates by (the producer publishes it as the message id).
MSG_ID_HEADER = "Nats-Msg-Id"


class NatsSink(_SinkBase):
    """Pipelined JetStream publishes with the NATS producer; the write id is the message's
    ``Nats-Msg-Id``, so a retried task is stored once within the stream's duplicate window."""

    def _producer(self) -> AbstractContextManager[Any]:
        c = self.cfg
        return _started(
            "nats-producer",
            c,
            _nats_identity(c),
            lambda: _native.nats_producer(c.endpoints, **_nats_args(c)),
        )

    def send(self, messages: Sequence[OutMessage]) -> None:
        if not messages:
            return
        import uuid

        batch = []
        for m in messages:
            properties = dict(m.headers)
            if m.key is not None:
                properties[KEY_HEADER] = m.key.decode("utf-8", "surrogateescape")
            properties[MSG_ID_HEADER] = m.write_id or uuid.uuid4().hex
            batch.append(
                _native.Message(
                    m.topic,
                    m.value,
                    properties=properties,
                    trace_context=m.trace_context,
                    trace_state=m.trace_state,
                )
            )
        with self._producer() as producer:
            producer.send_batch(batch)


# --------------------------------------------------------------------------------------------
# JMQ4 (JoyQueue): partition indices
# --------------------------------------------------------------------------------------------

#: The property carrying the row's key: the ``businessId`` holds the deterministic write id.
JMQ_KEY_PROPERTY = "ferrymq-key"
#: The longest ``businessId`` JMQ4 stores (characters; also at most 127 bytes).
_MAX_BUSINESS_ID = 100


def _jmq_args(c: SourceConfig | SinkConfig) -> dict[str, Any]:
    """As whom a JMQ4 client connects (``app`` and ``token`` are validated options)."""
    opts = dict(c.extra)
    return {
        "app": opts["app"],
        "token": opts["token"],
        "region": opts.get("region"),
        "namespace": c.namespace,
        "request_timeout": c.request_timeout or 10.0,
    }


def _jmq_identity(c: SourceConfig | SinkConfig) -> tuple[Any, ...]:
    """The identity part of a JMQ4 client cache key (the token only as a digest)."""
    opts = dict(c.extra)
    return (opts["app"], _secret_digest(opts["token"]), opts.get("region"))


class JmqSink(_SinkBase):
    """Batched sends with the JMQ4 producer: the deterministic write id is the ``businessId``
    (the key JMQ4 consumers de-duplicate by), the row's key travels as property
    ``ferrymq-key``. Rows of one message group go to one partition, in order."""

    def _producer(self) -> AbstractContextManager[Any]:
        c = self.cfg
        return _started(
            "jmq-producer",
            c,
            _jmq_identity(c),
            lambda: _native.jmq_producer(c.endpoints, **_jmq_args(c)),
        )

    def send(self, messages: Sequence[OutMessage]) -> None:
        if not messages:
            return
        groups: dict[tuple[str, str | None], list[Any]] = {}
        for m in messages:
            props = dict(m.headers)
            key = None if m.key is None else m.key.decode("utf-8", "surrogateescape")
            if key is not None:
                props[JMQ_KEY_PROPERTY] = key
            business_id = m.write_id
            if business_id is None and key is not None and _fits_business_id(key):
                business_id = key
            groups.setdefault((m.topic, m.message_group), []).append(
                _native.Message(
                    m.topic,
                    m.value,
                    keys=None if business_id is None else [business_id],
                    tag=m.tag,
                    properties=props or None,
                    message_group=m.message_group,
                    trace_context=m.trace_context,
                    trace_state=m.trace_state,
                )
            )
        # A batch goes to one partition (the group's, or one picked by the producer).
        with self._producer() as producer:
            for batch in groups.values():
                producer.send_batch(batch)


def _fits_business_id(key: str) -> bool:
    return len(key) <= _MAX_BUSINESS_ID and len(key.encode("utf-8", "surrogateescape")) <= 127


# --------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------


#: The sink adapter of each backend.
_SINKS: dict[str, Callable[[SinkConfig], Sink]] = {
    "rocketmq": RocketMQSink,
    "remoting": RemotingSink,
    "nats": NatsSink,
    "jmq": JmqSink,
}


def sink_for(cfg: SinkConfig) -> Sink:
    """The sink adapter for ``cfg`` (its backend is one of :data:`_SINKS`: the options parser
    resolved it from the endpoints)."""
    return _SINKS[cfg.backend](cfg)
