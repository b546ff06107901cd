"""The read schema of the ferrymq data source and the Arrow record batches built from the
native reader's column buffers (no Python object per message).

Kafka's columns come first; RocketMQ adds ``tag``, ``messageGroup`` and ``messageId``, JetStream
adds ``messageId`` (its ``Nats-Msg-Id``); every backend ends with ``traceContext`` and
``traceState`` (the W3C ``traceparent`` / ``tracestate`` the message carried, which are never
among its ``properties``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["columns_for", "record_batch", "schema_ddl"]

_COMMON = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("properties", "map<string,string>"),
]

_EXTRA = {
    "rocketmq": [("tag", "string"), ("messageGroup", "string"), ("messageId", "string")],
    "remoting": [("tag", "string"), ("messageGroup", "string"), ("messageId", "string")],
    "jmq": [("tag", "string"), ("messageId", "string")],
    "nats": [("messageId", "string")],
}

#: Spark column name → key of the native buffers.
_BUFFER_OF = {
    "key": "key",
    "value": "value",
    "topic": "topic",
    "partition": "partition",
    "offset": "offset",
    "timestamp": "timestamp",
    "properties": "properties",
    "tag": "tag",
    "messageGroup": "message_group",
    "messageId": "message_id",
    "traceContext": "trace_context",
    "traceState": "trace_state",
}


_TRACE = [("traceContext", "string"), ("traceState", "string")]


def columns_for(backend: str) -> list[tuple[str, str]]:
    """The ``(name, Spark type)`` columns read from ``backend``."""
    return _COMMON + _EXTRA.get(backend, []) + _TRACE


def schema_ddl(backend: str) -> str:
    """The read schema of ``backend`` as a Spark DDL string."""
    return ", ".join(f"{n} {t}" for n, t in columns_for(backend))


def arrow_schema(backend: str) -> pa.Schema:
    """The Arrow schema Spark expects for ``backend`` (Spark's own conversion: int → int32,
    bigint → int64, timestamp → timestamp[us, UTC], map → map<string, string>)."""
    import pyarrow as pa

    types = {
        "binary": pa.binary(),
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }
    return pa.schema([pa.field(n, types[t], nullable=True) for n, t in columns_for(backend)])


def _buf(b: bytes | None) -> pa.Buffer | None:
    import pyarrow as pa

    return None if b is None else pa.py_buffer(b)


def _var(typ: pa.DataType, n: int, parts: tuple[Any, ...]) -> pa.Array:
    import pyarrow as pa

    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(
        typ, n, [_buf(validity), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def record_batch(columns: Any, schema: pa.Schema) -> pa.RecordBatch:
    """A record batch with ``schema`` from a ``ferrymq._native.MessageColumns``."""
    import pyarrow as pa

    n = columns.num_rows
    bufs = columns.arrow_buffers()
    arrays: list[pa.Array] = []
    for f in schema:
        part = bufs[_BUFFER_OF[f.name]]
        if f.name in ("key", "value"):
            arrays.append(_var(pa.binary(), n, part))
        elif f.name == "partition":
            arrays.append(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(part)]))
        elif f.name == "offset":
            arrays.append(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(part)]))
        elif f.name == "timestamp":
            validity, values, nulls = part
            arrays.append(
                pa.Array.from_buffers(
                    f.type, n, [_buf(validity), pa.py_buffer(values)], null_count=nulls
                )
            )
        elif f.name == "properties":
            offsets, keys, values = part
            nk = len(keys[1]) // 4 - 1
            arrays.append(
                pa.MapArray.from_arrays(
                    pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]),
                    _var(pa.string(), nk, keys),
                    _var(pa.string(), nk, values),
                    type=f.type,
                )
            )
        else:
            arrays.append(_var(pa.string(), n, part))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
