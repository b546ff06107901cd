"""The shared message model, message ids and the FIFO selector."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import ferrymq
from ferrymq import InvalidArgumentError, Message, _native


def test_message_fields_round_trip() -> None:
    m = Message(
        "orders",
        b"payload",
        keys=["k1", "k2"],
        tag="TagA",
        properties={"region": "eu"},
    )
    assert m.topic == "orders"
    assert m.body == b"payload"
    assert m.keys == ("k1", "k2")
    assert m.tag == "TagA"
    assert m.properties == {"region": "eu"}
    assert m.kind == "NORMAL"
    assert len(m) == 7
    assert m == Message(
        "orders", b"payload", keys=["k1", "k2"], tag="TagA", properties={"region": "eu"}
    )
    assert "orders" in repr(m)


def test_message_kinds() -> None:
    assert Message("t", b"x", message_group="g").kind == "FIFO"
    assert Message("t", b"x", priority=2).kind == "PRIORITY"
    at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=10)
    m = Message("t", b"x", delivery_time=at)
    assert m.kind == "DELAY"
    assert m.delivery_time == pytest.approx(at.timestamp(), abs=0.01)
    m2 = Message("t", b"x", delivery_time=dt.timedelta(seconds=5))
    assert m2.delivery_time == pytest.approx(time.time() + 5, abs=1)
    assert Message("t", bytearray(b"ab")).body == b"ab"
    assert Message("t", memoryview(b"cd")).body == b"cd"
    assert Message("t", b"x", keys="single").keys == ("single",)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"topic": "", "body": b"x"}, "topic"),
        ({"topic": "a b", "body": b"x"}, "topic"),
        ({"topic": "t" * 200, "body": b"x"}, "topic"),
        ({"topic": "t", "body": "text"}, "body"),
        ({"topic": "t", "body": 12}, "body"),
        ({"topic": "t", "body": b"x", "properties": {"UNIQ_KEY": "1"}}, "properties"),
        ({"topic": "t", "body": b"x", "properties": {"k": "v" * 20000}}, "properties"),
        ({"topic": "t", "body": b"x", "properties": {"k": 1}}, "properties"),
        ({"topic": "t", "body": b"x", "tag": "a|b"}, "tag"),
        ({"topic": "t", "body": b"x", "tag": " "}, "tag"),
        ({"topic": "t", "body": b"x", "keys": [""]}, "keys"),
        ({"topic": "t", "body": b"x", "message_group": "g", "priority": 1}, "message"),
        ({"topic": "t", "body": b"x", "priority": -1}, "priority"),
        ({"topic": "t", "body": b"x", "delivery_time": "tomorrow"}, "delivery_time"),
    ],
)
def test_invalid_messages_name_the_field(kwargs: dict[str, object], field: str) -> None:
    topic = kwargs.pop("topic")
    body = kwargs.pop("body")
    with pytest.raises(InvalidArgumentError) as info:
        Message(topic, body, **kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{field}:"), str(info.value)
    assert isinstance(info.value, ValueError)


def test_message_ids_follow_the_java_layout() -> None:
    ids = [_native.new_message_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    for i in ids[:10]:
        assert len(i) == 34
        assert i == i.upper()
        assert i.startswith("01")
        int(i, 16)
    # bytes 7..9: low 16 bits of the pid
    import os

    assert int(ids[0][14:18], 16) == os.getpid() & 0xFFFF
    # bytes 9..13: seconds since 2021-01-01
    secs = int(ids[0][18:26], 16)
    assert abs(secs - (time.time() - 1609459200)) < 5
    # bytes 13..17: an increasing sequence
    assert int(ids[1][26:], 16) == int(ids[0][26:], 16) + 1


@pytest.mark.parametrize(
    ("group", "hash_", "indexes"),
    [
        ("group-a", 4825829110184656078, (2, 6, 14)),
        ("order-42", -7687897554513327571, (1, 5, 13)),
        ("2", -1926782290642853668, (0, 4, 12)),
        ("1", 4126362672500276448, (0, 0, 0)),
        ("foo哈哈😄2222哈哈", -705383726186849630, (2, 2, 2)),
    ],
)
def test_fifo_siphash_vectors(group: str, hash_: int, indexes: tuple[int, int, int]) -> None:
    assert _native.message_group_hash(group) == hash_
    assert tuple(_native.fifo_queue_index(group, n) for n in (4, 8, 16)) == indexes


def test_fifo_queue_index_rejects_zero_queues() -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match="queues"):
        _native.fifo_queue_index("g", 0)
