"""Options, offsets and admission control of the ferrymq Spark data source.

Pure Python with no pyspark import, so it can be tested (and used by the planner) anywhere.
Option names follow Spark's Kafka connector where the concept exists; Spark passes options as a
case-insensitive ``dict[str, str]``.

Offsets are Kafka's layout: ``{"<topic>": {"<partition key>": <next offset>}}`` where the offset
is the next one to read (an exclusive end). Partition keys are ``"<broker>:<queue id>"`` for
RocketMQ (gRPC and remoting alike), the partition number for JMQ4 and ``"0"`` for a JetStream
stream (one total order).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._endpoints import Protocol, protocol_of
from ..exceptions import InvalidArgumentError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "OffsetSpec",
    "SinkConfig",
    "SourceConfig",
    "backend_of",
    "cap_offsets",
    "format_offsets",
    "parse_offsets",
    "parse_sink_options",
    "parse_source_options",
]

#: ``{"<topic>": {"<partition key>": next offset}}``
Offsets = dict[str, dict[str, int]]

#: ``"earliest"``, ``"latest"`` or explicit offsets where -2 means earliest and -1 latest.
OffsetSpec = Literal["earliest", "latest"] | Offsets

#: Kafka's sentinels inside offsets JSON.
EARLIEST = -2
LATEST = -1

#: ``remoting`` is RocketMQ over its classic TCP protocol (name server + brokers); ``rocketmq`` is
#: RocketMQ 5 over gRPC (a proxy).
Backend = Protocol


def _bad(option: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"option {option!r}: {why}")


def backend_of(endpoints: str) -> Backend:
    """The backend an endpoint string names (:func:`ferrymq._endpoints.protocol_of`, the
    resolver every ferrymq class uses): ``remoting://`` → RocketMQ over the remoting protocol
    (name servers, or a 5.x proxy's remoting port in cluster mode), ``nats://`` →
    NATS JetStream, ``jmq://`` → JMQ4, ``host:port[;host:port]`` / ``rocketmq://`` → RocketMQ 5
    over gRPC. An unknown scheme raises ``InvalidArgumentError`` naming ``endpoints``."""
    return protocol_of(endpoints)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(opts: dict[str, str], name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise _bad(name, f"{raw!r} is not an integer") from None
    if v < minimum:
        raise _bad(name, f"must be at least {minimum}, got {v}")
    return v


def _float(opts: dict[str, str], name: str, default: float) -> float:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise _bad(name, f"{raw!r} is not a number") from None
    if not v > 0:
        raise _bad(name, f"must be positive, got {raw}")
    return v


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise _bad(name, f"{raw!r} is not true or false")


def _check_jmq(opts: dict[str, str]) -> None:
    """JMQ4 clients authenticate as an app with its token."""
    for name in ("app", "token"):
        if not (opts.get(name) or "").strip():
            raise _bad(name, "is required for a jmq:// endpoint (the JMQ4 app and its token)")


def parse_offsets(option: str, raw: str | None, default: OffsetSpec, *, ending: bool) -> OffsetSpec:
    """Parse ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON."""
    if raw is None or raw.strip() == "":
        return default
    s = raw.strip()
    if s.lower() in ("earliest", "latest"):
        if ending and s.lower() == "earliest":
            raise _bad(option, "cannot be 'earliest' (an empty read); use 'latest' or JSON")
        return "earliest" if s.lower() == "earliest" else "latest"
    try:
        data = json.loads(s)
    except json.JSONDecodeError as e:
        raise _bad(option, f"is not 'earliest', 'latest' or JSON: {e}") from None
    if not isinstance(data, dict):
        raise _bad(option, 'JSON must be an object {"topic": {"partition": offset}}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise _bad(option, f"topic {topic!r} must map partitions to offsets")
        out[str(topic)] = {}
        for key, off in parts.items():
            if isinstance(off, bool) or not isinstance(off, int):
                raise _bad(option, f"{topic}/{key}: offset {off!r} is not an integer")
            if off < EARLIEST or (ending and off == EARLIEST):
                allowed = "-1 (latest)" if ending else "-2 (earliest), -1 (latest)"
                raise _bad(option, f"{topic}/{key}: offset {off} (allowed: >= 0 or {allowed})")
            out[str(topic)][str(key)] = off
    return out


def format_offsets(offsets: Offsets) -> str:
    """Offsets as the JSON Spark stores in its checkpoint (sorted, so equal offsets compare
    equal as text)."""
    return json.dumps(offsets, sort_keys=True)


class _Credentials:
    """``credentials()`` of a config with ``access_key`` and ``secret_key`` fields."""

    access_key: str | None
    secret_key: str | None

    def credentials(self) -> tuple[str, str] | None:
        if self.access_key is None:
            return None
        return (self.access_key, self.secret_key or "")


@dataclass(frozen=True)
class SourceConfig(_Credentials):
    """Validated source options. Plain values only: instances are pickled to executors."""

    backend: Backend
    endpoints: str
    topics: tuple[str, ...]
    group: str
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_ms: int | None = None
    fail_on_data_loss: bool = True
    commit_offsets: bool = True
    max_offsets_per_trigger: int | None = None
    max_rows_per_batch: int = 10_000
    pull_batch_size: int = 256
    min_partitions: int | None = None
    tag_filter: str | None = None
    filter_subject: str | None = None
    read_mode: Literal["pull", "receive"] = "pull"
    wal_location: str | None = None
    invisible_duration: float = 60.0
    poll_timeout: float = 5.0
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    namespace: str | None = None
    request_timeout: float | None = None
    extra: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def _topics(opts: dict[str, str]) -> tuple[str, ...]:
    raw = opts.get("subscribe") or opts.get("topic") or opts.get("topics")
    if not raw:
        raise _bad("subscribe", "name the topic(s) to read: subscribe=topicA,topicB (or topic=)")
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise _bad("subscribe", f"{raw!r} names no topic")
    if len(set(topics)) != len(topics):
        raise _bad("subscribe", f"{raw!r} names a topic twice")
    return topics


#: The options :func:`_connection` reads (lower case), shared by sources and sinks.
_CONNECTION_OPTIONS = {
    "endpoints", "nameserver", "servers", "accesskey", "secretkey", "namespace",
    "requesttimeoutms", "path",
}  # fmt: skip


def _connection(opts: dict[str, str]) -> dict[str, Any]:
    """The config fields every source and sink has: where (``endpoints`` and the backend they
    name) and as whom (``accessKey``/``secretKey``, JMQ4's ``app``/``token``) to connect."""
    e = opts.get("endpoints") or opts.get("nameserver") or opts.get("servers")
    if not e or not e.strip():
        raise _bad(
            "endpoints",
            "is required, e.g. endpoints=remoting://127.0.0.1:9876 (RocketMQ name server), "
            "127.0.0.1:8081 (RocketMQ proxy) or nats://host:4222",
        )
    backend = backend_of(e.strip())
    if backend == "jmq":
        _check_jmq(opts)
    ak = opts.get("accesskey")
    sk = opts.get("secretkey")
    if (ak is None) != (sk is None):
        raise _bad("accessKey", "accessKey and secretKey go together")
    timeout_ms = _int(opts, "requestTimeoutMs", None)
    return {
        "backend": backend,
        "endpoints": e.strip(),
        "access_key": ak,
        "secret_key": sk,
        "namespace": opts.get("namespace"),
        "request_timeout": None if timeout_ms is None else timeout_ms / 1000.0,
    }


def _extra(opts: dict[str, str], known: set[str]) -> tuple[tuple[str, str], ...]:
    """The options neither the config nor :func:`_connection` reads (backend-specific ones)."""
    return tuple(sorted((k, v) for k, v in opts.items() if k not in known | _CONNECTION_OPTIONS))


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceConfig:
    """Validate the options of ``spark.read`` / ``spark.readStream``.

    ``group`` defaults to ``spark-<uuid>`` (a fresh one per call, as Kafka's); pass a fixed
    group for brokers that do not create groups on demand.
    """
    opts = _lower(options)
    conn = _connection(opts)
    backend = conn["backend"]
    starting = parse_offsets(
        "startingOffsets",
        opts.get("startingoffsets"),
        "latest" if streaming else "earliest",
        ending=False,
    )
    ending = parse_offsets("endingOffsets", opts.get("endingoffsets"), "latest", ending=True)
    if streaming and "endingoffsets" in opts:
        raise _bad("endingOffsets", "is for batch queries only")
    starting_ts = _int(opts, "startingTimestamp", None, minimum=0)
    if starting_ts is not None:
        if "startingoffsets" in opts:
            raise _bad("startingTimestamp", "and startingOffsets exclude each other")
        if backend not in ("rocketmq", "remoting"):
            raise _bad("startingTimestamp", f"is not available for {backend} endpoints")
    read_mode = opts.get("readmode", "pull").strip().lower()
    if read_mode not in ("pull", "receive"):
        raise _bad("readMode", f"{read_mode!r} is not 'pull' or 'receive'")
    wal = opts.get("wallocation")
    if read_mode == "receive":
        if backend != "rocketmq":
            raise _bad("readMode", "'receive' is for RocketMQ proxies without PullMessage")
        if not streaming:
            raise _bad("readMode", "'receive' is for streaming queries (readStream) only")
        if not wal:
            raise _bad(
                "walLocation",
                "readMode=receive needs a directory for its write-ahead log of received "
                "messages (put it next to the query's checkpoint)",
            )
    known = {
        "subscribe", "topic", "topics", "group", "startingoffsets", "endingoffsets",
        "failondataloss", "maxoffsetspertrigger", "maxrowsperbatch", "pullbatchsize",
        "minpartitions", "subexpression", "filtersubject", "readmode", "wallocation",
        "invisibledurationms", "polltimeoutms", "startingtimestamp", "commitoffsets",
    }  # fmt: skip
    return SourceConfig(
        **conn,
        topics=_topics(opts),
        group=(opts.get("group") or "").strip() or f"spark-{uuid.uuid4().hex[:12]}",
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_ts,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        commit_offsets=_bool(opts, "commitOffsets", True),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
        max_rows_per_batch=_int(opts, "maxRowsPerBatch", 10_000) or 10_000,
        pull_batch_size=_int(opts, "pullBatchSize", 256) or 256,
        min_partitions=_int(opts, "minPartitions", None),
        tag_filter=(opts.get("subexpression") or "").strip() or None,
        filter_subject=(opts.get("filtersubject") or "").strip() or None,
        read_mode="receive" if read_mode == "receive" else "pull",
        wal_location=wal,
        invisible_duration=_float(opts, "invisibleDurationMs", 60_000.0) / 1000.0,
        poll_timeout=_float(opts, "pollTimeoutMs", 5_000.0) / 1000.0,
        extra=_extra(opts, known),
    )


@dataclass(frozen=True)
class SinkConfig(_Credentials):
    """Validated sink options. Plain values only: instances are pickled to executors."""

    backend: Backend
    endpoints: str
    topic: str | None
    idempotence_key: bool = True
    batch_size: int = 256
    batch_bytes: int = 1 << 20
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    namespace: str | None = None
    request_timeout: float | None = None
    extra: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    """Validate the options of ``df.write`` / ``df.writeStream``. The ``topic`` option
    overrides a ``topic`` column; one of them is required (checked per row)."""
    opts = _lower(options)
    conn = _connection(opts)
    idem = opts.get("idempotencekey", "auto").strip().lower()
    if idem not in ("auto", "none"):
        raise _bad("idempotenceKey", f"{idem!r} is not 'auto' or 'none'")
    known = {"topic", "idempotencekey", "batchsize", "batchbytes", "checkpointlocation"}
    # Remoting sends a batch in one request, so larger batches pay off there.
    default_batch = 1024 if conn["backend"] == "remoting" else 256
    return SinkConfig(
        **conn,
        topic=(opts.get("topic") or "").strip() or None,
        idempotence_key=idem == "auto",
        batch_size=_int(opts, "batchSize", default_batch) or default_batch,
        batch_bytes=_int(opts, "batchBytes", 1 << 20) or (1 << 20),
        extra=_extra(opts, known),
    )


def cap_offsets(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """Admission control: advance from ``start`` towards ``latest`` by at most ``limit``
    offsets in total, split across partitions in proportion to what each has available.

    Every partition with data gets at least one offset while the limit allows it (no queue
    starves behind a busy one); the rest is shared by the largest-remainder method, so the
    total is exactly ``min(limit, available)`` and the split is deterministic. Partitions that
    are in ``latest`` but not in ``start`` are new and start at 0.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    avail: list[tuple[str, str, int, int]] = []
    for topic in sorted(latest):
        for key in sorted(latest[topic]):
            s = start.get(topic, {}).get(key, 0)
            a = max(0, latest[topic][key] - s)
            avail.append((topic, key, s, a))
    total = sum(a for *_, a in avail)
    out: Offsets = {t: dict(parts) for t, parts in latest.items()}
    if total <= limit:
        return out
    grant = {(t, k): 0 for t, k, _, _ in avail}
    nonempty = [(t, k, a) for t, k, _, a in avail if a > 0]
    shares = []
    for t, k, a in nonempty:
        exact = limit * a / total
        grant[(t, k)] = min(int(exact), a)
        shares.append((exact - int(exact), t, k, a))
    left = limit - sum(grant.values())
    for _, t, k, a in sorted(shares, key=lambda x: (-x[0], x[1], x[2])):
        if left <= 0:
            break
        if grant[(t, k)] < a:
            grant[(t, k)] += 1
            left -= 1
    # No queue starves behind a busy one: a partition with data gets at least one offset,
    # taken from the partition with the largest grant.
    if limit >= len(nonempty):
        for t, k, _ in nonempty:
            if grant[(t, k)] == 0:
                donor = max(grant, key=lambda x: (grant[x], x))
                grant[donor] -= 1
                grant[(t, k)] = 1
    for t, k, s, _ in avail:
        out[t][k] = s + grant[(t, k)]
    return out
