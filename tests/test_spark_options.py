"""Options, offsets and admission control of ferrymq.spark (pure Python, no Spark session)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from ferrymq import InvalidArgumentError
from ferrymq.spark._options import (
    backend_of,
    cap_offsets,
    format_offsets,
    parse_offsets,
    parse_sink_options,
    parse_source_options,
)


def test_backend_follows_the_endpoint_scheme() -> None:
    assert backend_of("127.0.0.1:8081;127.0.0.1:8082") == "rocketmq"
    assert backend_of("rocketmq://h:1") == "rocketmq"
    assert backend_of("nats://127.0.0.1:4222") == "nats"
    assert backend_of("JMQ://h:50088") == "jmq"
    assert backend_of("remoting://127.0.0.1:9876") == "remoting"


def test_remoting_options() -> None:
    cfg = parse_source_options(
        {
            "endpoints": "remoting://127.0.0.1:9876",
            "subscribe": "a",
            "startingTimestamp": "1700000000000",
            "commitOffsets": "false",
        },
        streaming=True,
    )
    assert cfg.backend == "remoting"
    assert cfg.starting_timestamp_ms == 1700000000000
    assert cfg.commit_offsets is False
    assert parse_sink_options({"endpoints": "remoting://h:1", "topic": "t"}).batch_size == 1024
    with pytest.raises(InvalidArgumentError, match="startingTimestamp"):
        parse_source_options(
            {"endpoints": "h:1", "subscribe": "a", "startingTimestamp": "x"}, streaming=False
        )
    with pytest.raises(InvalidArgumentError, match="startingTimestamp"):
        parse_source_options(
            {
                "endpoints": "remoting://h:1",
                "subscribe": "a",
                "startingTimestamp": "1",
                "startingOffsets": "earliest",
            },
            streaming=False,
        )
    with pytest.raises(InvalidArgumentError, match="startingTimestamp"):
        parse_source_options(
            {"endpoints": "nats://h:1", "subscribe": "a", "startingTimestamp": "1"},
            streaming=False,
        )


def test_source_options_have_kafka_names_and_defaults() -> None:
    cfg = parse_source_options(
        {"Endpoints": "h:1", "subscribe": "a, b", "maxOffsetsPerTrigger": "300"}, streaming=True
    )
    assert cfg.topics == ("a", "b")
    assert cfg.starting == "latest"
    assert cfg.max_offsets_per_trigger == 300
    assert cfg.group.startswith("spark-")
    assert cfg.fail_on_data_loss is True
    batch = parse_source_options({"endpoints": "h:1", "topic": "a"}, streaming=False)
    assert batch.starting == "earliest"
    assert batch.ending == "latest"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"subscribe": "a"}, "endpoints"),
        ({"endpoints": "h:1"}, "subscribe"),
        ({"endpoints": "h:1", "subscribe": "a,a"}, "subscribe"),
        ({"endpoints": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"},
         "maxOffsetsPerTrigger"),
        ({"endpoints": "h:1", "subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"endpoints": "h:1", "subscribe": "a", "startingOffsets": "{"}, "startingOffsets"),
        ({"endpoints": "h:1", "subscribe": "a", "startingOffsets": '{"a": {"q:0": -3}}'},
         "startingOffsets"),
        ({"endpoints": "h:1", "subscribe": "a", "endingOffsets": "x"}, "endingOffsets"),
        ({"endpoints": "h:1", "subscribe": "a", "readMode": "pop"}, "readMode"),
        ({"endpoints": "h:1", "subscribe": "a", "readMode": "receive"}, "walLocation"),
        ({"endpoints": "h:1", "subscribe": "a", "accessKey": "ak"}, "accessKey"),
    ],
)  # fmt: skip
def test_bad_source_options_name_the_option(options: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        parse_source_options(options, streaming=True)


def test_ending_offsets_refuse_earliest_and_streaming() -> None:
    with pytest.raises(InvalidArgumentError, match="endingOffsets"):
        parse_offsets("endingOffsets", '{"t": {"0": -2}}', "latest", ending=True)
    with pytest.raises(InvalidArgumentError, match="batch queries only"):
        parse_source_options(
            {"endpoints": "h:1", "subscribe": "a", "endingOffsets": "latest"}, streaming=True
        )


def test_offsets_json_round_trips() -> None:
    spec = parse_offsets("startingOffsets", '{"t": {"b:1": 5, "b:0": -2}}', "latest", ending=False)
    assert spec == {"t": {"b:1": 5, "b:0": -2}}
    assert json.loads(format_offsets({"t": {"b:1": 5}})) == {"t": {"b:1": 5}}


def test_sink_options() -> None:
    cfg = parse_sink_options({"endpoints": "nats://h:4222", "topic": "s", "batchSize": "10"})
    assert (cfg.backend, cfg.topic, cfg.batch_size, cfg.idempotence_key) == ("nats", "s", 10, True)
    with pytest.raises(InvalidArgumentError, match="idempotenceKey"):
        parse_sink_options({"endpoints": "h:1", "idempotenceKey": "always"})
    assert "secret" not in repr(
        parse_sink_options({"endpoints": "h:1", "accessKey": "a", "secretKey": "secret"})
    )


def test_jmq_options_need_app_and_token() -> None:
    base = {"endpoints": "jmq://127.0.0.1:50088", "subscribe": "t"}
    for missing, given in (("app", {"token": "s3cret"}), ("token", {"app": "a"})):
        with pytest.raises(InvalidArgumentError, match=f"'{missing}'"):
            parse_source_options({**base, **given}, streaming=False)
        with pytest.raises(InvalidArgumentError, match=f"'{missing}'"):
            parse_sink_options({**base, "topic": "t", **given})
    cfg = parse_source_options({**base, "app": "a", "token": "s3cret"}, streaming=True)
    assert cfg.backend == "jmq"
    assert dict(cfg.extra) == {"app": "a", "token": "s3cret"}
    assert "s3cret" not in repr(cfg)
    sink = parse_sink_options({**base, "topic": "t", "app": "a", "token": "s3cret"})
    assert sink.backend == "jmq"
    assert "s3cret" not in repr(sink)


def _total(start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> int:
    return sum(end[t][p] - start.get(t, {}).get(p, 0) for t in end for p in end[t])


def test_cap_splits_proportionally_and_exactly() -> None:
    start = {"t": {"a": 0, "b": 0}}
    latest = {"t": {"a": 1000, "b": 1000}}
    assert cap_offsets(start, latest, 300) == {"t": {"a": 150, "b": 150}}
    capped = cap_offsets(start, {"t": {"a": 900, "b": 100}}, 100)
    assert capped == {"t": {"a": 90, "b": 10}}
    # Everything fits: latest as is.
    assert cap_offsets(start, {"t": {"a": 5, "b": 5}}, 100) == {"t": {"a": 5, "b": 5}}


def test_cap_never_starves_a_small_queue_and_handles_new_partitions() -> None:
    capped = cap_offsets({"t": {"a": 0, "b": 7}}, {"t": {"a": 10_000, "b": 8}, "u": {"0": 3}}, 50)
    assert capped["t"]["b"] == 8
    assert capped["u"]["0"] >= 1
    assert _total({"t": {"a": 0, "b": 7}}, capped) == 50


def test_cap_properties_hold_on_many_shapes() -> None:
    for sizes, limit in itertools.product(
        [(0, 0), (1, 0), (3, 5, 7), (1000, 1, 1, 1), (2, 2, 2, 2, 2)], [1, 2, 3, 10, 100]
    ):
        start = {"t": {str(i): 10 for i in range(len(sizes))}}
        latest = {"t": {str(i): 10 + n for i, n in enumerate(sizes)}}
        capped = cap_offsets(start, latest, limit)
        assert _total(start, capped) == min(limit, sum(sizes)), (sizes, limit)
        for p in latest["t"]:
            assert start["t"][p] <= capped["t"][p] <= latest["t"][p]
        assert capped == cap_offsets(start, latest, limit)  # deterministic


def test_a_jetstream_sink_refuses_columns_it_would_drop() -> None:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from ferrymq.spark._source import _check_sink_schema

    def schema(*extra: str) -> StructType:
        fields = [StructField("value", BinaryType()), StructField("topic", StringType())]
        return StructType(fields + [StructField(name, StringType()) for name in extra])

    nats = parse_sink_options({"endpoints": "nats://h:4222"})
    _check_sink_schema(nats, schema("key", "headers"))
    for column in ("tag", "messageGroup"):
        with pytest.raises(InvalidArgumentError, match=column.lower()):
            _check_sink_schema(nats, schema(column))
        # RocketMQ carries both.
        _check_sink_schema(parse_sink_options({"endpoints": "h:1"}), schema(column))


def test_the_sink_warns_of_columns_it_would_not_write(caplog: pytest.LogCaptureFixture) -> None:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from ferrymq.spark._source import _check_sink_schema

    def schema(*extra: str) -> StructType:
        fields = [StructField("value", BinaryType()), StructField("topic", StringType())]
        return StructType(fields + [StructField(name, StringType()) for name in extra])

    rocketmq = parse_sink_options({"endpoints": "h:1"})
    with caplog.at_level("DEBUG", logger="ferrymq"):
        # What a read gives, written back as it is: nothing to warn of.
        _check_sink_schema(rocketmq, schema("partition", "offset", "messageId", "traceContext"))
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        # A misspelt column would be lost: say so.
        _check_sink_schema(rocketmq, schema("message_group", "offset"))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "['message_group'] are not written" in warnings[0]
    assert "messageGroup" in warnings[0]


def test_a_write_ahead_log_segment_of_an_earlier_version_reads_with_nulls_for_new_columns(
    tmp_path: Path,
) -> None:
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from ferrymq.spark._arrow import arrow_schema
    from ferrymq.spark._wal import WriteAheadLog

    schema = arrow_schema("rocketmq")
    older = pa.schema([f for f in schema if f.name not in ("traceContext", "traceState")])
    rows = {f.name: pa.nulls(2, f.type) for f in older}
    rows["value"] = pa.array([b"a", b"b"])
    rows["messageId"] = pa.array(["id-a", "id-b"])
    WriteAheadLog(str(tmp_path), older).append(pa.RecordBatch.from_pydict(rows, schema=older))

    table = WriteAheadLog(str(tmp_path), schema).read(0, 2)
    assert table.schema == schema
    assert table.column("value").to_pylist() == [b"a", b"b"]
    assert table.column("traceContext").to_pylist() == [None, None]
