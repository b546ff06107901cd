"""The ferrymq PySpark data source in local[2] against the embedded broker.

One SparkSession serves the whole test run (the ``spark`` fixture); each test uses its own
topic and group.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ferrymq import Message, _native  # noqa: E402
from ferrymq.testing import EmbeddedBroker  # noqa: E402

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
    p = _producer(broker.endpoints, topic)
    try:
        for a in range(start, start + count, chunk):
            p.send_batch(
                [
                    Message(
                        topic,
                        f"m{i}".encode(),
                        keys=[f"k{i}"],
                        tag="even" if i % 2 == 0 else "odd",
                        properties={"i": str(i)},
                    )
                    for i in range(a, min(a + chunk, start + count))
                ]
            )
    finally:
        p.close()


def _setup(broker: EmbeddedBroker, unique: Callable[[str], str], queues: int = 4) -> tuple[str, str]:
    topic, group = unique("spark"), unique("g")
    broker.create_topic(topic, queues=queues)
    broker.create_group(group)
    return topic, group


def _reader(spark: Any, broker: EmbeddedBroker, topic: str, group: str, stream: bool = False) -> Any:
    r = spark.readStream if stream else spark.read
    return (
        r.format("ferrymq")
        .option("endpoints", broker.endpoints)
        .option("subscribe", topic)
        .option("group", group)
    )


def test_batch_round_trip(spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    topic, group = _setup(broker, unique)
    produce(broker, topic, 0, 200)
    df = _reader(spark, broker, topic, group).load()
    assert df.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "properties",
        "tag", "messageGroup", "messageId",
    ]  # fmt: skip
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(f"m{i}".encode() for i in range(200))
    for r in rows:
        i = int(r.value[1:])
        assert r.key == f"k{i}".encode()
        assert r.tag == ("even" if i % 2 == 0 else "odd")
        assert r.properties == {"i": str(i)}
        assert r.topic == topic
        assert r.timestamp is not None
        assert r.messageId
    # Offsets are contiguous from 0 in every queue.
    by_queue: dict[int, list[int]] = {}
    for r in rows:
        by_queue.setdefault(r.partition, []).append(r.offset)
    assert len(by_queue) == 4
    for offs in by_queue.values():
        assert sorted(offs) == list(range(len(offs)))

    # A bounded read: queue ids may be given bare when one broker has them.
    q = min(by_queue)
    bounded = (
        _reader(spark, broker, topic, group)
        .option("startingOffsets", f'{{"{topic}": {{"{q}": 2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"{q}": 7}}}}')
        .load()
        .where(f"partition = {q}")
        .collect()
    )
    assert sorted(r.offset for r in bounded) == [2, 3, 4, 5, 6]

    # A tag filter is applied by the broker.
    even = _reader(spark, broker, topic, group).option("subExpression", "even").load()
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
            write_ids.add(r.key)
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
    **options: str,
) -> None:
    reader = _reader(spark, broker, topic, group, stream=True).option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)

    def sink(df: Any, batch_id: int) -> None:
        seen[batch_id] = sorted(r.v for r in df.selectExpr("cast(value as string) v").collect())

    q = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert q.awaitTermination(90), "the streaming query did not finish"
    finally:
        q.stop()
    assert q.exception() is None


def test_stream_restart_replays_exactly(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = _setup(broker, unique)
    checkpoint = tmp_path / "ckpt"
    produce(broker, topic, 0, 100)
    first: dict[int, list[str]] = {}
    _stream_to_batches(spark, broker, topic, group, checkpoint, first)
    assert sorted(v for b in first.values() for v in b) == sorted(f"m{i}" for i in range(100))

    # Lose the commit of the last batch, as if the driver died before the sink committed:
    # Spark re-plans it from the offsets in the checkpoint and must read the same rows.
    last = max(first)
    os.unlink(checkpoint / "commits" / str(last))
    crc = checkpoint / "commits" / f".{last}.crc"
    if crc.exists():
        os.unlink(crc)
    produce(broker, topic, 100, 60)
    second: dict[int, list[str]] = {}
    _stream_to_batches(spark, broker, topic, group, checkpoint, second)
    assert second[last] == first[last]
    merged = {**first, **second}
    values = [v for b in merged.values() for v in b]
    assert sorted(values) == sorted(f"m{i}" for i in range(160))  # each exactly once
    assert set(second) - {last}, "the new messages came in a new batch"


def test_admission_control(
    spark: Any, broker: EmbeddedBroker, unique: Callable[[str], str], tmp_path: Path
) -> None:
    import ferrymq.spark

    if not ferrymq.spark.HAS_ADMISSION_CONTROL:
        pytest.skip("maxOffsetsPerTrigger needs Spark >= 4.2")
    topic, group = _setup(broker, unique)
    produce(broker, topic, 0, 100)
    seen: dict[int, list[str]] = {}
    _stream_to_batches(
        spark, broker, topic, group, tmp_path / "ckpt", seen, maxOffsetsPerTrigger="30"
    )
    assert [len(seen[b]) for b in sorted(seen)] == [30, 30, 30, 10]
    assert sorted(v for b in seen.values() for v in b) == sorted(f"m{i}" for i in range(100))
