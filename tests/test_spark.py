"""The ferrymq PySpark data source in local[2] against the embedded broker.

One SparkSession serves the whole test run (the ``spark`` fixture); each test uses its own
topic and group.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ferrymq import Message, Producer, _native
from ferrymq.testing import EmbeddedBroker
from spark_helpers import lose_commit, run_available_now, stream_batches

pytestmark = [pytest.mark.spark]


def _producer(endpoints: str, topic: str) -> Any:
    import ferrymq

    cls = getattr(ferrymq, "Producer", None) or _native.RocketMQProducer
    p = cls(endpoints, topics=[topic])
    p.start()
    return p


def produce(broker: EmbeddedBroker, topic: str, start: int, count: int, chunk: int = 10) -> None:
    """Messages ``m<i>`` with key ``k<i>``, tag even/odd and property ``i``; each chunk of
    ``chunk`` goes to one queue (round robin over chunks)."""
    _send_numbered(
        _producer(broker.endpoints, topic), topic, range(start, start + count), chunk, "k"
    )


def _assert_numbered(rows: list[Any], topic: str, count: int) -> None:
    """``rows`` read back the ``count`` messages of `produce` / `jmq_produce` from ``topic``:
    every value once, each with its key, tag, property ``i`` and a timestamp."""
    assert sorted(r.value for r in rows) == sorted(f"m{i}".encode() for i in range(count))
    for r in rows:
        i = int(r.value[1:])
        assert (r.key, r.tag, r.properties) == (
            f"k{i}".encode(),
            "even" if i % 2 == 0 else "odd",
            {"i": str(i)},
        )
        assert r.topic == topic
        assert r.timestamp is not None


def _send_numbered(p: Any, topic: str, ids: range, chunk: int, key: str, **properties: str) -> None:
    """Send a message ``m<i>`` for each of ``ids`` with ``p``, ``chunk`` per batch, then close
    ``p``: key ``<key><i>``, tag even/odd, property ``i`` and each of ``properties`` as
    ``name`` = ``<value><i>``."""
    try:
        for a in range(0, len(ids), chunk):
            p.send_batch(
                [
                    Message(
                        topic,
                        f"m{i}".encode(),
                        keys=[f"{key}{i}"],
                        tag="even" if i % 2 == 0 else "odd",
                        properties={"i": str(i), **{k: f"{v}{i}" for k, v in properties.items()}},
                    )
                    for i in ids[a : a + chunk]
                ]
            )
    finally:
        p.close()


def _setup(
    broker: EmbeddedBroker, unique: Callable[[str], str], queues: int = 4
) -> tuple[str, str]:
    topic, group = unique("spark"), unique("g")
    broker.create_topic(topic, queues=queues)
    broker.create_group(group)
    return topic, group


def _reader(
    spark: Any, broker: EmbeddedBroker, topic: str, group: str, stream: bool = False
) -> Any:
    r = spark.readStream if stream else spark.read
    return (
        r.format("ferrymq")
        .option("endpoints", broker.endpoints)
        .option("subscribe", topic)
        .option("group", group)
    )


def _write_twice(
    spark: Any,
    broker: EmbeddedBroker,
    topic: str,
    group: str,
    tmp_path: Path,
    columns: list[str],
    sink: dict[str, str],
) -> None:
    """Stream ``topic`` from its start through ``columns`` into the ferrymq sink (``sink``
    options) until caught up, twice: between the runs the commit of batch 0 is lost, as if the
    driver died before the sink committed, so the second run writes batch 0 again."""
    checkpoint = tmp_path / "ckpt"
    for attempt in range(2):
        if attempt:
            lose_commit(checkpoint, 0)
        w = (
            _reader(spark, broker, topic, group, stream=True)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr(*columns)
            .writeStream.format("ferrymq")
            .option("checkpointLocation", str(checkpoint))
        )
        for k, v in sink.items():
            w = w.option(k, v)
        run_available_now(w, 90)


@pytest.mark.parametrize("protocol", ["rocketmq", "jmq"])
def test_batch_read(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], protocol: str
) -> None:
    topic, group, put, reader = _source(protocol, broker, unique)
    put(0, 200)
    df = reader(spark, broker, topic, group).load()
    assert df.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "properties",
        "tag", *(["messageGroup"] if protocol == "rocketmq" else []), "messageId",
        "traceContext", "traceState",
    ]  # fmt: skip
    rows = df.collect()
    _assert_numbered(rows, topic, 200)
    if protocol == "jmq":
        assert all(r.messageId == f"id{int(r.value[1:])}" for r in rows)
    else:
        assert all(r.messageId for r in rows)
    # Offsets are contiguous from 0 in every queue; JMQ4's (the partition indices) in send
    # order too (a RocketMQ batch's sends run side by side).
    by_queue: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        by_queue.setdefault(r.partition, []).append((r.offset, int(r.value[1:])))
    assert set(by_queue) == {0, 1, 2, 3}
    for pairs in by_queue.values():
        pairs.sort()
        assert [o for o, _ in pairs] == list(range(len(pairs)))
        if protocol == "jmq":
            assert [i for _, i in pairs] == sorted(i for _, i in pairs)

    # A bounded read of one queue (JMQ4: starting inside a batch message); queue ids may be
    # given bare when one broker has them.
    q = max(by_queue, key=lambda k: len(by_queue[k]))
    bounded = (
        reader(spark, broker, topic, group)
        .option("startingOffsets", f'{{"{topic}": {{"{q}": 3}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"{q}": 14}}}}')
        .load()
        .where(f"partition = {q}")
        .collect()
    )
    assert sorted(r.offset for r in bounded) == list(range(3, 14))
    if protocol == "rocketmq":
        # A tag filter is applied by the broker.
        even = reader(spark, broker, topic, group).option("subExpression", "even").load()
        assert even.count() == 100


def test_write_then_read_back(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic, group = _setup(broker, unique)
    df = spark.range(300).selectExpr(
        "cast(id as string) as value",
        "IF(id % 3 = 0, NULL, concat('k', id)) as key",
        "map('n', cast(id as string)) as properties",
        "IF(id % 2 = 0, 'even', 'odd') as tag",
    )
    (
        df.write.format("ferrymq")
        .option("endpoints", broker.endpoints)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    rows = _reader(spark, broker, topic, group).load().collect()
    assert sorted(int(r.value) for r in rows) == list(range(300))
    write_ids = set()
    for r in rows:
        n = int(r.value)
        assert r.properties == {"n": str(n)}
        assert r.tag == ("even" if n % 2 == 0 else "odd")
        if n % 3:
            assert r.key == f"k{n}".encode()
        else:
            # No key column value: the key is the deterministic write id.
            write_ids.add(bytes(r.key))
    assert len(write_ids) == 100
    # Every message carries a unique write id <job>:<partition>:<row> in its keys.
    ids = [m["keys"][-1] for m in broker.messages(topic)]
    assert len(set(ids)) == 300
    assert all(len(i.split(":")) == 3 for i in ids)


def _stream_to_batches(
    spark: Any,
    broker: EmbeddedBroker,
    topic: str,
    group: str,
    checkpoint: Path,
    seen: dict[int, list[str]],
    make_reader: Callable[..., Any] | None = None,
    **options: str,
) -> None:
    reader = (make_reader or _reader)(spark, broker, topic, group, stream=True).option(
        "startingOffsets", "earliest"
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    stream_batches(reader, checkpoint, seen, 90)


def _source(
    protocol: str, broker: EmbeddedBroker, unique: Callable[[str], str]
) -> tuple[str, str, Callable[[int, int], None], Callable[..., Any]]:
    """A fresh 4-queue topic of ``protocol``: (topic, group, produce(start, count), reader)."""
    if protocol == "jmq":
        topic = unique("jmq")
        broker.create_topic(topic, queues=4)
        return topic, "", lambda start, n: jmq_produce(broker, topic, start, n), _jmq_reader
    topic, group = _setup(broker, unique)
    return topic, group, lambda start, n: produce(broker, topic, start, n), _reader


@pytest.mark.parametrize("protocol", ["rocketmq", "jmq"])
def test_stream_restart_replays_exactly(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    topic, group, put, reader = _source(protocol, broker, unique)
    checkpoint = tmp_path / "ckpt"
    put(0, 100)
    first: dict[int, list[str]] = {}
    _stream_to_batches(spark, broker, topic, group, checkpoint, first, reader)
    assert sorted(v for b in first.values() for v in b) == sorted(f"m{i}" for i in range(100))

    # Lose the commit of the last batch, as if the driver died before the sink committed:
    # Spark re-plans it from the offsets (JMQ4: partition indices) in the checkpoint and must
    # read the same rows.
    last = max(first)
    assert (checkpoint / "commits" / str(last)).exists()
    lose_commit(checkpoint, last)
    put(100, 60)
    second: dict[int, list[str]] = {}
    _stream_to_batches(spark, broker, topic, group, checkpoint, second, reader)
    if not set(second) - {last}:
        # Spark < 4.2 wraps the source for availableNow and ends the run after the replay.
        _stream_to_batches(spark, broker, topic, group, checkpoint, second, reader)
    assert second[last] == first[last]
    merged = {**first, **second}
    values = [v for b in merged.values() for v in b]
    assert sorted(values) == sorted(f"m{i}" for i in range(160))  # each exactly once
    assert set(second) - {last}, "the new messages came in a new batch"


@pytest.mark.parametrize("protocol", ["rocketmq", "jmq"])
def test_admission_control(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    import ferrymq.spark

    if not ferrymq.spark.HAS_ADMISSION_CONTROL:
        pytest.skip("maxOffsetsPerTrigger needs Spark >= 4.2")
    topic, group, put, reader = _source(protocol, broker, unique)
    put(0, 100)
    seen: dict[int, list[str]] = {}
    _stream_to_batches(
        spark, broker, topic, group, tmp_path / "ckpt", seen, reader, maxOffsetsPerTrigger="30"
    )
    assert [len(seen[b]) for b in sorted(seen)] == [30, 30, 30, 10]
    assert sorted(v for b in seen.values() for v in b) == sorted(f"m{i}" for i in range(100))


@pytest.mark.nats
def test_nats_stream_write_is_deduplicated_and_reads_back(
    spark: Any,
    broker: EmbeddedBroker,
    nats_server: Any,
    unique: Any,
    tmp_path: Path,
) -> None:
    """RocketMQ → (writeStream) → JetStream: a re-run batch publishes the same Nats-Msg-Ids, so
    the stream holds every row once; a batch read and a stream read of JetStream get them."""
    import ferrymq

    topic, group = _setup(broker, unique)
    stream = f"SPARK{unique}"
    subject = f"spark.{unique.lower()}"
    with ferrymq.JetStream(nats_server.url) as js:
        js.create_stream(stream, [f"{subject}.>"], duplicate_window=120.0)
    produce(broker, topic, 0, 50)
    columns = [f"concat('{subject}.', tag) as topic", "value", "key", "map('q', 'x') as properties"]
    _write_twice(spark, broker, topic, group, tmp_path, columns, {"endpoints": nats_server.url})

    rows = (
        spark.read.format("ferrymq")
        .option("endpoints", nats_server.url)
        .option("subscribe", stream)
        .load()
        .collect()
    )
    assert sorted(r.value for r in rows) == sorted(f"m{i}".encode() for i in range(50))
    assert {r.topic for r in rows} == {f"{subject}.even", f"{subject}.odd"}
    assert all(r.properties == {"q": "x"} for r in rows)
    assert all(r.key == f"k{int(r.value[1:])}".encode() for r in rows)
    assert len({r.messageId for r in rows}) == 50
    assert sorted(r.offset for r in rows) == list(range(1, 51))

    # A filtered stream read, capped per trigger where Spark supports it.
    reader = (
        spark.readStream.format("ferrymq")
        .option("endpoints", nats_server.url)
        .option("subscribe", stream)
        .option("filterSubject", f"{subject}.even")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
    )
    seen = stream_batches(reader, tmp_path / "ckpt2", {}, 90)
    got = sorted(v for b in seen.values() for v in b)
    assert got == sorted(f"m{i}" for i in range(0, 50, 2))


def test_receive_mode_logs_acks_and_restarts(
    spark: Any, broker: EmbeddedBroker, unique: Any, tmp_path: Path
) -> None:
    """readMode=receive (for proxies without PullMessage): messages are received, logged under
    walLocation and acked on commit; across restarts (with redeliveries of messages whose
    invisibility ran out in between) every message reaches the sink exactly once."""
    import time

    topic, group = _setup(broker, unique)
    checkpoint, wal = tmp_path / "ckpt", tmp_path / "wal"
    seen: dict[int, list[str]] = {}

    def sink(df: Any, batch_id: int) -> None:
        seen[batch_id] = sorted(r.v for r in df.selectExpr("cast(value as string) v").collect())

    def total() -> int:
        return sum(len(b) for b in seen.values())

    def run(until: int, at_least: float = 0.0) -> None:
        q = (
            _reader(spark, broker, topic, group, stream=True)
            .option("readMode", "receive")
            .option("walLocation", str(wal))
            .option("invisibleDurationMs", "2000")
            .option("pollTimeoutMs", "1000")
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            t0 = time.monotonic()
            while (total() < until or time.monotonic() - t0 < at_least) and (
                time.monotonic() - t0 < 90
            ):
                assert q.exception() is None
                time.sleep(0.2)
        finally:
            q.stop()

    produce(broker, topic, 0, 60)
    run(60)
    time.sleep(2.5)  # unacknowledged messages become visible again
    produce(broker, topic, 60, 40)
    run(100, at_least=3.0)
    run(100, at_least=3.0)  # nothing new: redeliveries are recognised, not appended
    values = [v for b in seen.values() for v in b]
    assert sorted(values) == sorted(f"m{i}" for i in range(100))  # each exactly once


# --------------------------------------------------------------------------------------------
# JMQ4 (jmq:// endpoints): the embedded JMQ4 server serves the broker's topics, one partition
# per queue, with its own message store.
# --------------------------------------------------------------------------------------------

JMQ_AUTH = {"app": "test_app", "token": "test_token"}


def jmq_produce(
    broker: EmbeddedBroker, topic: str, start: int, count: int, chunk: int = 10
) -> None:
    """Messages ``m<i>`` with businessId ``id<i>``, key ``k<i>`` (property ``ferrymq-key``),
    tag even/odd and property ``i``; each chunk is one batch message on one partition."""
    jmq = Producer(broker.jmq_endpoint, **JMQ_AUTH)
    _send_numbered(jmq, topic, range(start, start + count), chunk, "id", **{"ferrymq-key": "k"})


def _jmq_reader(
    spark: Any, broker: EmbeddedBroker, topic: str, group: str = "", stream: bool = False
) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("ferrymq").option("endpoints", broker.jmq_endpoint).option("subscribe", topic)
    for k, v in JMQ_AUTH.items():
        r = r.option(k, v)
    return r


def test_jmq_write_then_read_back(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic = unique("jmq")
    broker.create_topic(topic, queues=4)
    df = spark.range(300).selectExpr(
        "cast(id as string) as value",
        "IF(id % 3 = 0, NULL, concat('k', id)) as key",
        "map('n', cast(id as string)) as properties",
        "IF(id % 2 = 0, 'even', 'odd') as tag",
    )
    writer = df.write.format("ferrymq").option("endpoints", broker.jmq_endpoint)
    for k, v in JMQ_AUTH.items():
        writer = writer.option(k, v)
    writer.option("topic", topic).mode("append").save()
    rows = _jmq_reader(spark, broker, topic).load().collect()
    assert sorted(int(r.value) for r in rows) == list(range(300))
    for r in rows:
        n = int(r.value)
        assert r.properties == {"n": str(n)}
        assert r.tag == ("even" if n % 2 == 0 else "odd")
        assert r.key == (None if n % 3 == 0 else f"k{n}".encode())
    # Every message carries a unique deterministic write id <job>:<partition>:<row> as its
    # businessId (the messageId column).
    ids = [r.messageId for r in rows]
    assert len(set(ids)) == 300
    assert all(len(i.split(":")) == 3 for i in ids)


def test_jmq_stream_write_ids_are_deterministic(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """RocketMQ → (writeStream) → JMQ4: a re-run micro-batch sends its rows again (JMQ4 does not
    de-duplicate: at-least-once) with the same businessIds ``<query>:<batch>:<partition>:<row>``,
    so a consumer de-duplicating by messageId sees every row once."""
    src, group = _setup(broker, unique)
    dst = unique("jmq")
    broker.create_topic(dst, queues=2)
    produce(broker, src, 0, 40)
    sink = {"endpoints": broker.jmq_endpoint, "topic": dst, **JMQ_AUTH}
    _write_twice(spark, broker, src, group, tmp_path, ["value", "key", "tag"], sink)

    rows = _jmq_reader(spark, broker, dst).load().collect()
    assert len(rows) == 80  # stored twice
    by_id: dict[str, set[bytes]] = {}
    for r in rows:
        by_id.setdefault(r.messageId, set()).add(r.value)
        assert r.key == f"k{int(r.value[1:])}".encode()
    assert len(by_id) == 40
    assert all(len(v) == 1 for v in by_id.values())
    assert sorted(v for vs in by_id.values() for v in vs) == sorted(
        f"m{i}".encode() for i in range(40)
    )
    assert all(len(i.split(":")) == 4 and i.split(":")[1] == "0" for i in by_id)


# --------------------------------------------------------------------------------------------
# RocketMQ over the remoting protocol (local[2]; local-cluster runs in test_spark_remoting.py)
# --------------------------------------------------------------------------------------------


def _remoting_reader(spark: Any, endpoint: str, topic: str, **options: str) -> Any:
    r = spark.read.format("ferrymq").option("endpoints", endpoint).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_remoting_starting_timestamp(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    import time

    import ferrymq

    topic = unique("rts")
    broker.create_topic(topic, queues=4)
    with ferrymq.Producer(broker.remoting_endpoint) as p:
        p.send_batch([Message(topic, b"old%d" % i) for i in range(20)])
        cut = time.time()
        while time.time() <= cut + 0.01:
            pass
        p.send_batch([Message(topic, b"new%d" % i) for i in range(30)])
    df = _remoting_reader(
        spark, broker.remoting_endpoint, topic, startingTimestamp=str(int(cut * 1000) + 1)
    )
    got = sorted(r.v for r in df.selectExpr("cast(value as string) v").collect())
    assert got == sorted(f"new{i}" for i in range(30))


def test_remoting_fail_on_data_loss_after_retention(
    spark: Any, make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str]
) -> None:
    import json

    import ferrymq

    # A small topic bound that evicts the oldest messages, like time-based retention.
    broker = make_broker(
        max_topic_bytes=64 * 1024, max_body_size=16 * 1024, when_full="drop_oldest"
    )
    topic = unique("rloss")
    broker.create_topic(topic, queues=1)
    body = b"x" * 1000
    with ferrymq.Producer(broker.remoting_endpoint) as p:
        for _ in range(20):  # batches under the broker's 16 KiB body limit
            p.send_batch([Message(topic, body) for _ in range(10)])
    (queue,) = [q.key for q in ferrymq.PullConsumer(broker.remoting_endpoint, "g").queues(topic)]
    from_zero = json.dumps({topic: {queue: 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        _remoting_reader(spark, broker.remoting_endpoint, topic, startingOffsets=from_zero).count()
    rows = (
        _remoting_reader(
            spark,
            broker.remoting_endpoint,
            topic,
            startingOffsets=from_zero,
            failOnDataLoss="false",
        )
        .selectExpr("offset")
        .collect()
    )
    offsets = sorted(r.offset for r in rows)
    assert offsets, "the messages still stored are read"
    assert offsets[0] > 0
    assert offsets == list(range(offsets[0], 200))


def test_remoting_stream_admission_control_and_group_commits(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path
) -> None:
    import ferrymq
    import ferrymq.spark

    topic, group = unique("radm"), unique("g")
    broker.create_topic(topic, queues=4)
    with ferrymq.Producer(broker.remoting_endpoint) as p:
        for a in range(0, 100, 10):
            p.send_batch([Message(topic, f"m{i}".encode()) for i in range(a, a + 10)])

    def reader(spark: Any, _broker: Any, topic: str, group: str, stream: bool = False) -> Any:
        return (
            spark.readStream.format("ferrymq")
            .option("endpoints", broker.remoting_endpoint)
            .option("subscribe", topic)
            .option("group", group)
        )

    seen: dict[int, list[str]] = {}
    limit = {"maxOffsetsPerTrigger": "30"} if ferrymq.spark.HAS_ADMISSION_CONTROL else {}
    _stream_to_batches(spark, broker, topic, group, tmp_path / "ckpt", seen, reader, **limit)
    assert sorted(v for b in seen.values() for v in b) == sorted(f"m{i}" for i in range(100))
    if limit:
        assert [len(seen[b]) for b in sorted(seen)] == [30, 30, 30, 10]
    if not limit:
        return
    # commitOffsets (default): Spark commits a micro-batch's end offsets to the source when it
    # plans the next one, so the group's offsets on the broker are those of the third batch.
    with ferrymq.PullConsumer(broker.remoting_endpoint, group) as c:
        queues = c.queues(topic)
        committed = c.committed(queues)
        ends = c.end_offsets(queues)
    assert all(committed[q] is not None and 0 < committed[q] <= ends[q] for q in queues)
    assert sum(v or 0 for v in committed.values()) == 90


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("protocol", ["rocketmq", "remoting", "jmq", "nats"])
def test_trace_context_is_a_column_and_a_copy_keeps_it(
    spark: Any, broker: EmbeddedBroker, nats_server: Any, unique: Any, protocol: str
) -> None:
    """A message's trace context reads as ``traceContext`` / ``traceState``, never among the
    properties; writing those columns (or a ``traceparent`` in the properties) sends it on."""
    import ferrymq

    options: dict[str, str] = {}
    if protocol == "nats":
        endpoint = nats_server.url
        src, dst = f"TRS{unique}", f"TRD{unique}"
        src_subject, dst_subject = f"trs.{unique.lower()}", f"trd.{unique.lower()}"
        with ferrymq.JetStream(nats_server.url) as js:
            js.create_stream(src, [src_subject])
            js.create_stream(dst, [dst_subject])
    else:
        src, dst = unique("trs"), unique("trd")
        src_subject, dst_subject = src, dst
        for topic in (src, dst):
            broker.create_topic(topic, queues=2)
        if protocol == "rocketmq":
            options["group"] = unique("g")
            broker.create_group(options["group"])
            endpoint = broker.endpoints
        elif protocol == "remoting":
            endpoint = broker.remoting_endpoint
        else:
            endpoint = broker.jmq_endpoint
            options.update(JMQ_AUTH)
    auth = JMQ_AUTH if protocol == "jmq" else {}
    with ferrymq.Producer(endpoint, **auth) as p:
        traced = Message(src_subject, b"traced", properties={"p": "1"})
        p.send(traced.with_trace_context(TRACEPARENT, "v=1"))
        p.send(Message(src_subject, b"plain", properties={"p": "2"}))

    def load(stream: str) -> Any:
        r = spark.read.format("ferrymq").option("endpoints", endpoint).option("subscribe", stream)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    def read(stream: str) -> dict[bytes, Any]:
        return {bytes(row.value): row for row in load(stream).collect()}

    def write(df: Any) -> None:
        w = df.write.format("ferrymq").option("endpoints", endpoint).option("topic", dst_subject)
        for k, v in auth.items():
            w = w.option(k, v)
        w.mode("append").save()

    def trace(row: Any) -> tuple[Any, ...]:
        props = {k: v for k, v in row.properties.items() if k != "ferrymq-key"}
        return row.traceContext, row.traceState, props

    got = read(src)
    assert trace(got[b"traced"]) == (TRACEPARENT, "v=1", {"p": "1"})
    assert trace(got[b"plain"]) == (None, None, {"p": "2"})

    # A copy keeps each message's trace context; a traceparent among a row's properties is
    # taken as its trace context rather than refused.
    write(load(src).select("value", "properties", "traceContext", "traceState"))
    write(
        spark.range(1).selectExpr(
            "cast('from-props' as binary) as value",
            f"map('traceparent', '{TRACEPARENT}', 'q', '1') as properties",
        )
    )
    copied = read(dst)
    assert set(copied) == {b"traced", b"plain", b"from-props"}
    assert trace(copied[b"traced"]) == (TRACEPARENT, "v=1", {"p": "1"})
    assert trace(copied[b"plain"]) == (None, None, {"p": "2"})
    assert trace(copied[b"from-props"]) == (TRACEPARENT, None, {"q": "1"})
