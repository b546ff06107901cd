"""The receive-and-ack streaming mode, for RocketMQ proxies that do not serve ``PullMessage``
(the stock Apache proxy answers ``UNIMPLEMENTED``).

Spark needs every micro-batch to be re-readable: after a failure it plans the last batch again
with the same ``(start, end)`` and expects the same rows. A POP queue (``ReceiveMessage``) cannot
re-read, so the stream reader keeps a **write-ahead log** of what it received:

* ``latestOffset`` receives messages with a simple consumer (invisible for
  ``invisibleDurationMs``), appends them durably to the log under ``walLocation`` (an Arrow IPC
  segment per receive round, written to a temporary file, fsynced, then renamed) and returns the
  log's end ``{"wal": n}``. Messages already in the log (a broker redelivery after a crash) are
  recognised by message id and not appended twice.
* ``partitions(start, end)`` reads rows ``[start, end)`` back from the log and ships them to the
  executors inside the input partitions, so a replay returns the same rows and executors need no
  access to the log's directory.
* ``commit(end)`` acknowledges every message up to ``end`` on the broker, then deletes the log
  segments that are wholly committed. Messages held longer than half their invisible duration
  are extended with ``ChangeInvisibleDuration`` (which returns a new receipt handle).

Guarantee: Spark's replay of the log is deterministic, so the source is exactly-once into the
log; the broker side is at-least-once (a message received but not yet logged when the driver
dies is redelivered after its invisible duration). Receipt handles live in the reader's memory:
after a restart, logged-but-unacknowledged messages are acknowledged when the broker redelivers
them and they are recognised as already logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from . import _arrow
from ._options import SourceConfig

__all__ = ["ReceiveStreamReader", "WriteAheadLog"]

log = logging.getLogger("ferrymq.spark")

_SEGMENT = re.compile(r"^(\d{20})-(\d{20})\.arrow$")

#: How many acknowledged message ids are remembered to recognise late redeliveries.
_REMEMBER_ACKED = 100_000


class WriteAheadLog:
    """An append-only log of received messages in Arrow IPC segments ``<start>-<end>.arrow``
    (offsets are row numbers of the log, contiguous from 0)."""

    def __init__(self, directory: str, schema: pa.Schema) -> None:
        self.dir = directory
        self.schema = schema
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))

    def segments(self) -> list[tuple[int, int, str]]:
        out: list[tuple[int, int, str]] = []
        for name in os.listdir(self.dir):
            m = _SEGMENT.match(name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), os.path.join(self.dir, name)))
        out.sort()
        return out

    def start(self) -> int:
        segs = self.segments()
        if segs:
            return segs[0][0]
        return self._truncated_end()

    def end(self) -> int:
        segs = self.segments()
        return segs[-1][1] if segs else self._truncated_end()

    def _marker(self) -> str:
        return os.path.join(self.dir, "truncated")

    def _truncated_end(self) -> int:
        try:
            with open(self._marker()) as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def append(self, batch: pa.RecordBatch) -> tuple[int, int]:
        """Durably append ``batch``; returns its ``[start, end)`` in the log."""
        start = self.end()
        end = start + batch.num_rows
        final = os.path.join(self.dir, f"{start:020d}-{end:020d}.arrow")
        tmp = final + ".tmp"
        with open(tmp, "wb") as f:
            with pa.ipc.new_file(f, self.schema) as w:
                w.write_batch(batch)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.dir)
        return start, end

    def read(self, start: int, end: int) -> pa.Table:
        """Rows ``[start, end)``; raises if part of the range was truncated or never written."""
        parts = []
        for s, e, path in self.segments():
            if e <= start or s >= end:
                continue
            with pa.memory_map(path) as src:
                table = _conform(pa.ipc.open_file(src).read_all(), self.schema)
            lo, hi = max(start, s) - s, min(end, e) - s
            parts.append(table.slice(lo, hi - lo))
        table = pa.concat_tables(parts) if parts else self.schema.empty_table()
        if table.num_rows != end - start:
            raise RuntimeError(
                f"write-ahead log {self.dir}: rows [{start}, {end}) are not all there "
                f"({table.num_rows} found); was the log deleted or moved?"
            )
        return table.combine_chunks()

    def message_ids(self) -> list[tuple[str, int]]:
        """``(message id, log offset)`` of every retained row."""
        out: list[tuple[str, int]] = []
        for s, _, path in self.segments():
            out.extend((i, s + n) for n, i in enumerate(_message_ids(path)) if i)
        return out

    def _acked_file(self) -> str:
        return os.path.join(self.dir, "acked-ids")

    def remembered(self) -> list[str]:
        """Ids of messages already processed and acknowledged (the most recent ones)."""
        try:
            with open(self._acked_file()) as f:
                return [line.strip() for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def remember(self, ids: Sequence[str]) -> None:
        """Durably note processed message ids, keeping the last ``_REMEMBER_ACKED``."""
        if not ids:
            return
        path = self._acked_file()
        _write_synced(path, "a", "".join(f"{i}\n" for i in ids))
        known = self.remembered()
        if len(known) > 2 * _REMEMBER_ACKED:
            _write_synced(path + ".tmp", "w", "".join(f"{i}\n" for i in known[-_REMEMBER_ACKED:]))
            os.replace(path + ".tmp", path)

    def truncate(self, upto: int) -> None:
        """Delete segments wholly below ``upto`` (remembering their message ids, so that a
        late redelivery of one of them is recognised after a restart)."""
        segs = self.segments()
        keep_end = max((e for s, e, _ in segs if e <= upto), default=None)
        if keep_end is None:
            return
        ids: list[str] = []
        for _, e, path in segs:
            if e <= upto:
                ids.extend(i for i in _message_ids(path) if i)
        self.remember(ids)
        _write_synced(self._marker() + ".tmp", "w", str(keep_end))
        os.replace(self._marker() + ".tmp", self._marker())
        for _, e, path in segs:
            if e <= upto:
                os.unlink(path)


def _message_ids(segment: str) -> list[str | None]:
    """The ``messageId`` column of a log segment."""
    with pa.memory_map(segment) as src:
        ids: list[str | None] = pa.ipc.open_file(src).read_all().column("messageId").to_pylist()
    return ids


def _write_synced(path: str, mode: str, text: str) -> None:
    """Write ``text`` to ``path`` (``mode`` "w" or "a") and fsync it before returning."""
    with open(path, mode) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class WalPartition(InputPartition):
    """Rows of the log, carried to the executor as Arrow IPC bytes."""

    def __init__(self, start: int, end: int, ipc: bytes) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.ipc = ipc


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns: a segment logged by an earlier version lacks the
    columns added since, which read as nulls."""
    if table.schema.names == schema.names:
        return table
    columns = [
        table.column(f.name) if f.name in table.schema.names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _views_to_batch(views: Sequence[Any], schema: pa.Schema) -> pa.RecordBatch:
    def ts(v: Any) -> int | None:
        t = v.store_timestamp if v.store_timestamp is not None else v.born_timestamp
        return None if t is None else int(t * 1_000_000)

    cols: dict[str, list[Any]] = {
        "key": [(v.keys[0].encode() if v.keys else None) for v in views],
        "value": [bytes(v.body) for v in views],
        "topic": [v.topic for v in views],
        "partition": [v.queue_id for v in views],
        "offset": [v.offset for v in views],
        "timestamp": [ts(v) for v in views],
        "properties": [sorted(v.properties.items()) for v in views],
        "tag": [v.tag for v in views],
        "messageGroup": [v.message_group for v in views],
        "messageId": [v.message_id for v in views],
        "traceContext": [v.trace_context for v in views],
        "traceState": [v.trace_state for v in views],
    }
    arrays = [pa.array(cols[f.name], type=f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class ReceiveStreamReader(DataSourceStreamReader):
    """``readMode=receive``: see the module documentation."""

    def __init__(self, cfg: SourceConfig, schema: StructType) -> None:
        self.cfg = cfg
        self.names = schema.fieldNames()
        self._state: _ReceiveState | None = None

    # Everything native is created lazily, in the long-lived driver-side process.
    def _st(self) -> _ReceiveState:
        if self._state is None:
            self._state = _ReceiveState(self.cfg)
        return self._state

    def initialOffset(self) -> dict[str, int]:
        return {"wal": self._st().wal.start()}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, int]:
        st = self._st()
        st.renew()
        st.receive_round()
        return {"wal": st.wal.end()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = int(start.get("wal", 0)), int(end["wal"])
        if e <= s:
            return []
        table = self._st().wal.read(s, e)
        pieces = max(1, min(self.cfg.min_partitions or 1, e - s))
        step = -(-(e - s) // pieces)
        return [
            WalPartition(s + i, min(s + i + step, e), _to_ipc(table.slice(i, step)))
            for i in range(0, e - s, step)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, WalPartition):
            return
        table = pa.ipc.open_stream(partition.ipc).read_all()
        table = table.select(list(self.names))
        yield from table.to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        self._st().commit(int(end["wal"]))

    def stop(self) -> None:
        if self._state is not None:
            self._state.close()


class _ReceiveState:
    """The consumer, the log and the receipt handles of one running query."""

    def __init__(self, cfg: SourceConfig) -> None:
        import ferrymq

        self.cfg = cfg
        self.schema = _arrow.arrow_schema("rocketmq")
        self.wal = WriteAheadLog(cfg.wal_location or "", self.schema)
        filt = cfg.tag_filter or "*"
        self.consumer = ferrymq.SimpleConsumer(
            cfg.endpoints,
            cfg.group,
            subscriptions={t: filt for t in cfg.topics},
            await_duration=cfg.poll_timeout,
            credentials=cfg.credentials(),
            namespace=cfg.namespace,
            request_timeout=cfg.request_timeout,
        )
        self.consumer.start()
        # log offset -> (message view, received at) of messages not yet acknowledged.
        self.pending: dict[int, tuple[Any, float]] = {}
        self.by_id: dict[str, int] = dict(self.wal.message_ids())
        self.acked: OrderedDict[str, None] = OrderedDict.fromkeys(self.wal.remembered())
        self.committed = self.wal.start()

    def receive_round(self) -> None:
        """One receive; append what is new to the log."""
        want = min(self.cfg.max_offsets_per_trigger or 1024, 1024)
        views = self.consumer.receive(want, self.cfg.invisible_duration)
        now = time.monotonic()
        fresh = []
        for v in views:
            known = self.by_id.get(v.message_id)
            if v.message_id in self.acked or (known is not None and known < self.committed):
                self._ack(v)  # a late redelivery of something already processed
            elif known is not None:
                self.pending[known] = (v, now)  # logged before a restart: keep the new handle
            else:
                fresh.append(v)
        if fresh:
            start, _ = self.wal.append(_views_to_batch(fresh, self.schema))
            for i, v in enumerate(fresh):
                self.by_id[v.message_id] = start + i
                self.pending[start + i] = (v, now)

    def renew(self) -> None:
        """Extend messages held longer than half their invisible duration."""
        horizon = time.monotonic() - self.cfg.invisible_duration / 2
        for off, (v, at) in list(self.pending.items()):
            if at < horizon:
                try:
                    self.consumer.change_invisible_duration(v, self.cfg.invisible_duration)
                    self.pending[off] = (v, time.monotonic())
                except Exception as e:
                    log.warning("could not extend message %s: %s", v.message_id, e)

    def _ack(self, v: Any) -> None:
        try:
            self.consumer.ack(v)
        except Exception as e:  # redelivered later, recognised by id
            log.warning("ack of %s failed: %s", v.message_id, e)
        self.acked[v.message_id] = None
        while len(self.acked) > _REMEMBER_ACKED:
            self.acked.popitem(last=False)

    def commit(self, end: int) -> None:
        for off in sorted(o for o in self.pending if o < end):
            v, _ = self.pending.pop(off)
            self._ack(v)
        self.committed = max(self.committed, end)
        self.wal.truncate(end)
        self.by_id = {i: o for i, o in self.by_id.items() if o >= end}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()
