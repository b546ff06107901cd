"""The ``ferrymq`` PySpark data source: batch and streaming reads, batch and streaming writes.

Everything Spark pickles here (the data source, readers, writers, partitions, commit messages)
holds plain values only; native clients are created inside the methods Spark runs in its
worker processes and cached per process (:mod:`._cache`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..exceptions import BrokerError, InvalidArgumentError
from . import _arrow
from ._backends import OutMessage, Source, sink_for
from ._options import (
    EARLIEST,
    LATEST,
    Offsets,
    OffsetSpec,
    SinkConfig,
    SourceConfig,
    backend_of,
    cap_offsets,
    parse_sink_options,
    parse_source_options,
)
from ._wal import ReceiveStreamReader

try:  # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamArrowWriter

    _HAS_STREAM_ARROW_WRITER = True
except ImportError:  # Spark 4.0
    _StreamArrowWriter = DataSourceStreamWriter  # type: ignore[assignment,misc]
    _HAS_STREAM_ARROW_WRITER = False

try:  # Spark 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
    _StreamBases: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
except ImportError:  # Spark 4.0 / 4.1
    HAS_ADMISSION_CONTROL = False
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    _StreamBases = (DataSourceStreamReader,)

__all__ = ["HAS_ADMISSION_CONTROL", "FerryDataSource"]

log = logging.getLogger("ferrymq.spark")


# --------------------------------------------------------------------------------------------
# Data source
# --------------------------------------------------------------------------------------------


class FerryDataSource(DataSource):
    """``format("ferrymq")``: RocketMQ 5 (``host:port``), JMQ4 (``jmq://``) and NATS JetStream
    (``nats://``) as a Spark source and sink, with the Kafka connector's option names."""

    @classmethod
    def name(cls) -> str:
        return "ferrymq"

    def schema(self) -> str:
        endpoints = self.options.get("endpoints") or self.options.get("nameServer") or ""
        return _arrow.schema_ddl(backend_of(endpoints))

    def reader(self, schema: StructType) -> DataSourceReader:
        return FerryBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        cfg = parse_source_options(self.options, streaming=True)
        if cfg.read_mode == "receive":
            return ReceiveStreamReader(cfg, schema)
        return FerryStreamReader(cfg, schema)

    def writer(self, schema: StructType, overwrite: bool) -> FerryBatchWriter:
        cfg = parse_sink_options(self.options)
        _check_sink_schema(cfg, schema)
        return FerryBatchWriter(cfg, schema, uuid.uuid4().hex[:16])

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        cfg = parse_sink_options(self.options)
        _check_sink_schema(cfg, schema)
        return FerryStreamWriter(cfg, schema)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


class RangePartition(InputPartition):
    """``[start, end)`` of one broker partition (plain values: pickled to executors)."""

    def __init__(self, topic: str, partition: str, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"RangePartition({self.topic}/{self.partition} [{self.start}, {self.end}))"


def _sorted(offsets: Offsets) -> Offsets:
    """Offsets with sorted keys: Spark compares offsets as JSON text."""
    return {t: {k: offsets[t][k] for k in sorted(offsets[t])} for t in sorted(offsets)}


def _snapshot(src: Source, topics: Sequence[str], which: str) -> Offsets:
    """The earliest or latest offset of every partition of ``topics``."""
    return _sorted({topic: src.snapshot(topic, which) for topic in topics})


def _resolve(src: Source, topics: Sequence[str], spec: OffsetSpec, default: str) -> Offsets:
    """Concrete offsets for ``spec`` over the current partitions of ``topics``; partitions a
    JSON spec does not name take ``default``."""
    if spec == "earliest" or spec == "latest":
        return _snapshot(src, topics, spec)
    assert isinstance(spec, dict)
    unknown = set(spec) - set(topics)
    if unknown:
        raise InvalidArgumentError(
            f"offsets name topics that are not subscribed: {sorted(unknown)}"
        )
    out: Offsets = {}
    for topic in topics:
        parts = src.partitions(topic)
        given = _qualify(topic, spec.get(topic, {}), parts)
        missing = set(given) - set(parts)
        if missing:
            raise InvalidArgumentError(
                f"offsets name partitions that {topic!r} does not have: {sorted(missing)} "
                f"(it has {parts})"
            )
        out[topic] = {}
        for p in parts:
            off = given.get(p, EARLIEST if default == "earliest" else LATEST)
            if off == EARLIEST:
                off = src.earliest(topic, p)
            elif off == LATEST:
                off = src.latest(topic, p)
            out[topic][p] = off
    return _sorted(out)


def _starting(src: Source, cfg: SourceConfig, default: str) -> Offsets:
    """Where a query starts: ``startingTimestamp`` (the first offset stored at or after it, per
    partition; the partition's end when none is) or ``startingOffsets``."""
    ts = cfg.starting_timestamp_ms
    if ts is None:
        return _resolve(src, cfg.topics, cfg.starting, default)
    out: Offsets = {}
    for topic in cfg.topics:
        out[topic] = {p: src.offset_for_time(topic, p, ts) for p in src.partitions(topic)}
    return _sorted(out)


def _qualify(topic: str, given: dict[str, int], parts: Sequence[str]) -> dict[str, int]:
    """Accept a bare queue id ``"3"`` for the one ``"<broker>:3"`` that has it."""
    out = {}
    for key, off in given.items():
        if key in parts or ":" in key:
            out[key] = off
            continue
        match = [p for p in parts if p.rsplit(":", 1)[-1] == key]
        if len(match) != 1:
            raise InvalidArgumentError(
                f"offsets: {topic}/{key} is ambiguous or unknown; name it as one of {list(parts)}"
            )
        out[match[0]] = off
    return out


#: Broker answers to a read below the partition's first stored offset (RocketMQ, JMQ4).
_OFFSET_GONE = ("ILLEGAL_OFFSET", "FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE")


def _read_range(
    cfg: SourceConfig, schema: pa.Schema, part: InputPartition
) -> Iterator[pa.RecordBatch]:
    """Yield ``[start, end)`` of one partition as record batches, applying failOnDataLoss."""
    if not isinstance(part, RangePartition) or part.end <= part.start:
        return
    src = Source(cfg)
    at = part.start
    while at < part.end:
        try:
            cols = src.read(part.topic, part.partition, at, part.end, cfg.max_rows_per_batch)
        except BrokerError as e:
            if e.code_name not in _OFFSET_GONE:
                raise
            earliest = src.earliest(part.topic, part.partition)
            if earliest <= at:
                raise
            _data_loss(cfg, part, at, earliest)
            at = earliest
            continue
        first = cols.first_offset
        if at == part.start and first is not None and first > at and not _filtered(cfg):
            _data_loss(cfg, part, at, first)
        if cols.num_rows:
            yield _arrow.record_batch(cols, schema)
        if cols.next_offset <= at:
            raise RuntimeError(
                f"{part.topic}/{part.partition}: the read made no progress at offset {at}"
            )
        at = cols.next_offset


def _emit(cfg: SourceConfig, batches: Iterator[pa.RecordBatch]) -> Iterator[Any]:
    """Record batches, or (``readFormat=rows``, for comparisons) one Python tuple per row."""
    if dict(cfg.extra).get("readformat", "arrow").lower() != "rows":
        yield from batches
        return
    for rb in batches:
        cols = []
        for f, col in zip(rb.schema, rb.columns, strict=True):
            values = col.to_pylist()
            if pa.types.is_map(f.type):
                values = [None if v is None else dict(v) for v in values]
            cols.append(values)
        yield from zip(*cols, strict=True)


def _filtered(cfg: SourceConfig) -> bool:
    return bool(cfg.tag_filter and cfg.tag_filter.strip() != "*") or bool(cfg.filter_subject)


def _data_loss(cfg: SourceConfig, part: RangePartition, at: int, available: int) -> None:
    msg = (
        f"{part.topic}/{part.partition}: offsets [{at}, {available}) are no longer on the "
        "broker (retention?)"
    )
    if cfg.fail_on_data_loss:
        raise RuntimeError(msg + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", msg)


class FerryBatchReader(DataSourceReader):
    """``spark.read.format("ferrymq")``: one Spark partition per broker partition (split into
    ``minPartitions`` pieces when asked), reading ``[startingOffsets, endingOffsets)``."""

    def __init__(self, cfg: SourceConfig, schema: StructType) -> None:
        self.cfg = cfg
        self.names = schema.fieldNames()

    def partitions(self) -> Sequence[InputPartition]:
        src = Source(self.cfg)
        start = _starting(src, self.cfg, "earliest")
        end = _resolve(src, self.cfg.topics, self.cfg.ending, "latest")
        return _plan(start, end, self.cfg.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.cfg, self.names, partition)


def _read(cfg: SourceConfig, names: Sequence[str], partition: InputPartition) -> Iterator[Any]:
    """What a reader's ``read`` yields for ``partition``: the columns ``names`` of its rows."""
    full = _arrow.arrow_schema(cfg.backend)
    schema = full if list(full.names) == list(names) else pa.schema([full.field(n) for n in names])
    yield from _emit(cfg, _read_range(cfg, schema, partition))


def _plan(start: Offsets, end: Offsets, min_partitions: int | None) -> list[InputPartition]:
    ranges = []
    for topic in sorted(end):
        for p in sorted(end[topic]):
            s = start.get(topic, {}).get(p, 0)
            e = end[topic][p]
            if e > s:
                ranges.append((topic, p, s, e))
    if min_partitions and len(ranges) < min_partitions and ranges:
        total = sum(e - s for _, _, s, e in ranges)
        out: list[InputPartition] = []
        for topic, p, s, e in ranges:
            pieces = max(1, round(min_partitions * (e - s) / total))
            step = -(-(e - s) // pieces)
            for a in range(s, e, step):
                out.append(RangePartition(topic, p, a, min(a + step, e)))
        return out
    return [RangePartition(t, p, s, e) for t, p, s, e in ranges]


class FerryStreamReader(*_StreamBases):  # type: ignore[misc]
    """``spark.readStream.format("ferrymq")`` over replayable offsets: the offsets of every
    partition are in the checkpoint, and a batch re-planned after a failure reads exactly the
    same messages again.

    On Spark 4.2+ ``maxOffsetsPerTrigger`` caps each micro-batch (split across partitions in
    proportion to their backlog) and ``Trigger.AvailableNow`` honours it; on 4.0/4.1 Spark has
    no admission control, so the option is ignored with a warning.
    """

    def __init__(self, cfg: SourceConfig, schema: StructType) -> None:
        self.cfg = cfg
        self.names = schema.fieldNames()
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._warned = False

    def _src(self) -> Source:
        return Source(self.cfg)

    def initialOffset(self) -> dict[str, Any]:
        return _starting(self._src(), self.cfg, "latest")

    def _available(self, start: Offsets | None) -> Offsets:
        src = self._src()
        latest = _snapshot(src, self.cfg.topics, "latest")
        if start:
            for topic, parts in start.items():
                for p, off in parts.items():
                    have = latest.setdefault(topic, {})
                    if p not in have:
                        log.warning(
                            "%s/%s disappeared from the route; keeping offset %s", topic, p, off
                        )
                        have[p] = off
                    elif have[p] < off:
                        # The queue now ends before the checkpoint: it was recreated or
                        # truncated, and what was written after `have[p]` is gone.
                        msg = (
                            f"{topic}/{p}: the broker's end {have[p]} is below the checkpoint "
                            f"offset {off} (the queue was recreated or truncated); messages "
                            "may have been lost"
                        )
                        if self.cfg.fail_on_data_loss:
                            raise RuntimeError(msg + "; set failOnDataLoss=false to go on")
                        log.warning("%s; going on from its beginning (failOnDataLoss=false)", msg)
            for topic, parts in latest.items():
                for p in parts:
                    if p not in start.get(topic, {}):
                        log.info("%s/%s is new; reading it from the beginning", topic, p)
        if self._target is not None:
            for topic, parts in latest.items():
                for p in parts:
                    base = (start or {}).get(topic, {}).get(p, 0)
                    cap = self._target.get(topic, {}).get(p, base)
                    if parts[p] < base:
                        # Recreated below the checkpoint (reported above): its new range.
                        parts[p] = min(parts[p], cap)
                    else:
                        parts[p] = max(base, min(parts[p], cap))
        return _sorted(latest)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        latest = self._available(start)
        self._latest = latest
        if start is None:
            # Spark 4.0/4.1: no start, no limit.
            if self.cfg.max_offsets_per_trigger and not self._warned:
                log.warning(
                    "maxOffsetsPerTrigger needs Spark >= 4.2 (admission control); "
                    "this Spark reads everything available in each micro-batch"
                )
                self._warned = True
            return latest
        if HAS_ADMISSION_CONTROL and isinstance(limit, ReadMaxRows):
            return _sorted(cap_offsets(start, latest, int(limit.max_rows)))
        return latest

    def getDefaultReadLimit(self) -> Any:
        if not HAS_ADMISSION_CONTROL:
            return None
        if self.cfg.max_offsets_per_trigger:
            return ReadMaxRows(self.cfg.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _snapshot(self._src(), self.cfg.topics, "latest")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        src = self._src()
        full_start: Offsets = {}
        for topic, parts in end.items():
            full_start[topic] = {}
            for p in parts:
                s = start.get(topic, {}).get(p)
                if s is not None and s > parts[p]:
                    # The queue was recreated below the checkpoint (reported, with
                    # failOnDataLoss=false, by latestOffset): read it from its beginning.
                    s = None
                full_start[topic][p] = src.earliest(topic, p) if s is None else s
        return _plan(full_start, end, self.cfg.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.cfg, self.names, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._src().commit(end)

    def stop(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


#: The sink's columns as a reader gives them (their names are case-insensitive).
_SINK_COLUMN_NAMES = {
    "value",
    "key",
    "topic",
    "properties",
    "headers",
    "tag",
    "messageGroup",
    "traceContext",
    "traceState",
}
_SINK_COLUMNS = {n.lower() for n in _SINK_COLUMN_NAMES}
#: Columns of a read that a message does not take (lower case).
_READ_ONLY_COLUMNS = {"partition", "offset", "timestamp", "messageid"}
#: Property / header names a trace context travels under (in any case; RocketMQ's exactly).
_TRACE_CARRIERS = {"traceparent", "tracestate"}


def _check_sink_schema(cfg: SinkConfig, schema: StructType) -> None:
    names = {n.lower() for n in schema.fieldNames()}
    if "value" not in names:
        raise InvalidArgumentError(
            f"the DataFrame written to ferrymq needs a 'value' column (has {schema.fieldNames()})"
        )
    if cfg.topic is None and "topic" not in names:
        raise InvalidArgumentError(
            "option 'topic': give the topic as an option or as a 'topic' column"
        )
    if cfg.backend == "nats":
        # A JetStream message is a subject, headers and a body: refuse, rather than drop.
        refused = sorted(names & {"tag", "messagegroup"})
        if refused:
            raise InvalidArgumentError(
                f"column {refused[0]!r}: NATS JetStream messages have none; put it in 'headers'"
            )
    # A read DataFrame written back as it is carries columns no message has (offsets, ids):
    # those are ignored quietly; any other name is probably a misspelt one, and its values
    # would be lost without a word.
    ignored = names - _SINK_COLUMNS
    unknown = sorted(ignored - _READ_ONLY_COLUMNS)
    if unknown:
        log.warning(
            "ferrymq sink: columns %s are not written (a message takes %s)",
            unknown,
            ", ".join(sorted(_SINK_COLUMN_NAMES)),
        )
    elif ignored:
        log.debug("columns ignored by the ferrymq sink: %s", sorted(ignored))


@dataclass
class FerryCommitMessage(WriterCommitMessage):
    """What one write task sent."""

    partition_id: int
    messages: int


def _as_bytes(v: Any, column: str) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise InvalidArgumentError(f"column {column!r}: {type(v).__name__} is not binary or string")


def _headers(v: Any) -> dict[str, str]:
    if not v:
        return {}
    items = v.items() if isinstance(v, dict) else v
    return {str(k): str(val) for k, val in items if val is not None}


def _trace(
    headers: dict[str, str], context: str | None, state: str | None
) -> tuple[str | None, str | None]:
    """A row's trace context: its ``traceContext`` / ``traceState`` columns, else what its
    properties carry (``traceparent`` / ``tracestate``, or RocketMQ's ``TRACE_CONTEXT``), which
    leave the properties (a message carries them as its trace context, never as properties). A
    ``tracestate`` without a ``traceparent`` means nothing (W3C) and is left out."""
    carried: dict[str, str] = {}
    for name in [n for n in headers if n.lower() in _TRACE_CARRIERS or n == "TRACE_CONTEXT"]:
        value = headers.pop(name)
        carried["tracestate" if name.lower() == "tracestate" else "traceparent"] = value
    if context is None:
        context, state = carried.get("traceparent"), carried.get("tracestate")
    return context, state if context is not None else None


class _Sender:
    """Turns rows into messages with deterministic write ids and sends them in bounded
    batches (at-least-once: a failed send fails the task, and Spark retries it)."""

    def __init__(self, cfg: SinkConfig, id_prefix: str) -> None:
        self.cfg = cfg
        self.prefix = id_prefix
        self.sink = sink_for(cfg)
        self.pending: list[OutMessage] = []
        self.pending_bytes = 0
        self.seq = 0

    def add_columns(self, cols: dict[str, list[Any]], n: int) -> None:
        lower = {k.lower(): v for k, v in cols.items()}
        values = lower["value"]
        keys = lower.get("key")
        topics = lower.get("topic")
        props = lower.get("properties") or lower.get("headers")
        tags = lower.get("tag")
        groups = lower.get("messagegroup")
        contexts = lower.get("tracecontext")
        states = lower.get("tracestate")
        for i in range(n):
            topic = self.cfg.topic or (topics[i] if topics is not None else None)
            if not topic:
                raise InvalidArgumentError(
                    "column 'topic': a row has no topic and no 'topic' option is set"
                )
            value = _as_bytes(values[i], "value")
            if value is None:
                raise InvalidArgumentError("column 'value': a row has a null value")
            write_id = f"{self.prefix}:{self.seq}" if self.cfg.idempotence_key else None
            self.seq += 1
            headers = _headers(props[i]) if props is not None else {}
            context, state = _trace(
                headers,
                contexts[i] if contexts is not None else None,
                states[i] if states is not None else None,
            )
            m = OutMessage(
                topic=topic,
                value=value,
                key=_as_bytes(keys[i], "key") if keys is not None else None,
                headers=headers,
                tag=tags[i] if tags is not None else None,
                message_group=groups[i] if groups is not None else None,
                write_id=write_id,
                trace_context=context,
                trace_state=state,
            )
            self.pending.append(m)
            self.pending_bytes += len(value)
            if (
                len(self.pending) >= self.cfg.batch_size
                or self.pending_bytes >= self.cfg.batch_bytes
            ):
                self.flush()

    def add_arrow(self, batch: pa.RecordBatch) -> None:
        cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        self.add_columns(cols, batch.num_rows)

    def add_rows(self, rows: Iterator[Any], names: Sequence[str], chunk: int = 1024) -> None:
        buf: list[Any] = []
        for r in rows:
            buf.append(r)
            if len(buf) >= chunk:
                self.add_columns({n: [x[i] for x in buf] for i, n in enumerate(names)}, len(buf))
                buf = []
        if buf:
            self.add_columns({n: [x[i] for x in buf] for i, n in enumerate(names)}, len(buf))

    def flush(self) -> None:
        if self.pending:
            self.sink.send(self.pending)
            self.pending = []
            self.pending_bytes = 0


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, None
    return ctx.partitionId(), ctx


class FerryBatchWriter(DataSourceArrowWriter):
    """``df.write.format("ferrymq")``: every task sends its rows in batches; write ids are
    ``<job>:<partition>:<row>``."""

    def __init__(self, cfg: SinkConfig, schema: StructType, job_id: str) -> None:
        self.cfg = cfg
        self.names = schema.fieldNames()
        self.job_id = job_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FerryCommitMessage:
        pid, _ = _task()
        sender = _Sender(self.cfg, f"{self.job_id}:{pid}")
        for batch in iterator:
            sender.add_arrow(batch)
        sender.flush()
        return FerryCommitMessage(pid, sender.seq)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(m.messages for m in messages if isinstance(m, FerryCommitMessage))
        log.info("ferrymq batch write %s: %d messages sent", self.job_id, n)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(m.messages for m in messages if isinstance(m, FerryCommitMessage))
        log.warning(
            "ferrymq batch write %s aborted; %d messages were already sent (at-least-once)",
            self.job_id,
            n,
        )


def _stream_prefix(ctx: Any, pid: int) -> str:
    if ctx is None:
        return f"{uuid.uuid4().hex[:16]}:0:{pid}"
    query = ctx.getLocalProperty("sql.streaming.queryId") or "query"
    batch = ctx.getLocalProperty("streaming.sql.batchId") or "0"
    return f"{query}:{batch}:{pid}"


class FerryStreamWriter(_StreamArrowWriter):
    """``df.writeStream.format("ferrymq")``: as the batch writer, with write ids
    ``<query id>:<batch id>:<partition>:<row>`` (the same ids when Spark re-runs a batch)."""

    def __init__(self, cfg: SinkConfig, schema: StructType) -> None:
        self.cfg = cfg
        self.names = schema.fieldNames()

    def write(self, iterator: Iterator[Any]) -> FerryCommitMessage:
        pid, ctx = _task()
        sender = _Sender(self.cfg, _stream_prefix(ctx, pid))
        if _HAS_STREAM_ARROW_WRITER:
            for batch in iterator:
                sender.add_arrow(batch)
        else:
            sender.add_rows(iterator, self.names)
        sender.flush()
        return FerryCommitMessage(pid, sender.seq)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(m.messages for m in messages if isinstance(m, FerryCommitMessage))
        log.info("ferrymq stream write: batch %s sent %d messages", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "ferrymq stream write: batch %s aborted; messages already sent stay (at-least-once)",
            batchId,
        )
