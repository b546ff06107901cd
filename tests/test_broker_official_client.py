"""Faithfulness: the official ``rocketmq-python-client`` (PyPI), unchanged, against the embedded
broker. That client is a strict peer: if it fails here, the broker is wrong."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from ferrymq.testing import EmbeddedBroker

rocketmq = pytest.importorskip("rocketmq")

from rocketmq import (  # noqa: E402
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    Transaction,
    TransactionChecker,
    TransactionResolution,
)


def _config(broker: EmbeddedBroker) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoints, Credentials(), request_timeout=5)


@pytest.fixture
def clients() -> Iterator[list[Producer | SimpleConsumer]]:
    started: list[Producer | SimpleConsumer] = []
    yield started
    for c in started:
        c.shutdown()


def _started(broker: EmbeddedBroker, client: SimpleConsumer) -> SimpleConsumer:
    """Wait until the broker holds the client's settings.

    The official SimpleConsumer does not wait for its settings to be acknowledged before
    ``startup()`` returns (only its PushConsumer does), so a receive right after start-up can
    race them; a real proxy then fails the receive as well. Not a broker issue."""
    deadline = time.monotonic() + 10
    while client.client_id not in {c["client_id"] for c in broker.clients(0)}:
        assert time.monotonic() < deadline, "the consumer never sent its settings"
        time.sleep(0.01)
    return client


def _receive_all(
    consumer: SimpleConsumer, want: int, *, ack: bool = True, rounds: int = 20
) -> list[Message]:
    got: list[Message] = []
    for _ in range(rounds):
        if len(got) >= want:
            break
        for m in consumer.receive(32, 15):
            got.append(m)
            if ack:
                consumer.ack(m)
    return got


def test_normal_topic_send_receive_ack(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = unique("t"), unique("g")
    broker.create_topic(topic, "NORMAL", 4)
    broker.create_group(group)
    producer = Producer(_config(broker), (topic,))
    producer.startup()
    clients.append(producer)
    sent = []
    for i in range(5):
        m = Message()
        m.topic = topic
        m.body = f"hello-{i}".encode()
        m.tag = "greeting"
        m.keys = f"k{i}"
        m.add_property("n", str(i))
        receipt = producer.send(m)
        sent.append(receipt.message_id)
    consumer = SimpleConsumer(
        _config(broker), group, {topic: FilterExpression("greeting")}, await_duration=2
    )
    consumer.startup()
    _started(broker, consumer)
    clients.append(consumer)
    got = _receive_all(consumer, 5)
    assert sorted(m.message_id for m in got) == sorted(sent)
    assert {m.body for m in got} == {f"hello-{i}".encode() for i in range(5)}
    assert all(m.delivery_attempt == 1 and not m.corrupted for m in got)
    assert {m.properties["n"] for m in got} == {"0", "1", "2", "3", "4"}
    # Everything acked: the group's cursor is at the end of every queue.
    queues = broker.stats()["topics"][topic]["queues"]
    assert all(
        q["groups"].get(group, {"acked_offset": 0})["acked_offset"] == q["max_offset"]
        for q in queues
    )
    # The broker saw the client's settings on Telemetry before its heartbeat.
    kinds = {c["client_type"] for c in broker.clients(0)}
    assert {"PRODUCER", "SIMPLE_CONSUMER"} <= kinds


def test_fifo_topic_delivers_each_group_in_order(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = unique("fifo"), unique("g")
    broker.create_topic(topic, "FIFO", 4)
    broker.create_group(group, fifo=True)
    producer = Producer(_config(broker), (topic,))
    producer.startup()
    clients.append(producer)
    for i in range(6):
        m = Message()
        m.topic = topic
        m.body = f"{i}".encode()
        m.message_group = "A" if i % 2 == 0 else "B"
        producer.send(m)
    consumer = SimpleConsumer(_config(broker), group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    _started(broker, consumer)
    clients.append(consumer)
    # A receive may carry a group's consecutive messages, each group in send order.
    first = _receive_all(consumer, 6, ack=False, rounds=3)
    order = {g: [m.body for m in first if m.message_group == g] for g in ("A", "B")}
    assert order == {"A": [b"0", b"2", b"4"], "B": [b"1", b"3", b"5"]}
    # While they are unacked, the group's next message is held back.
    m = Message()
    m.topic = topic
    m.body = b"6"
    m.message_group = "A"
    producer.send(m)
    assert _receive_all(consumer, 1, ack=False, rounds=1) == []
    for m in first:
        consumer.ack(m)
    rest = _receive_all(consumer, 1)
    assert [(m.message_group, m.body) for m in rest] == [("A", b"6")]


def test_delay_topic_holds_messages_until_due(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = unique("delay"), unique("g")
    broker.create_topic(topic, "DELAY", 2)
    broker.create_group(group)
    producer = Producer(_config(broker), (topic,))
    producer.startup()
    clients.append(producer)
    m = Message()
    m.topic = topic
    m.body = b"later"
    m.delivery_timestamp = int(time.time()) + 2
    producer.send(m)
    assert broker.stats()["topics"][topic]["delayed"] == 1
    consumer = SimpleConsumer(_config(broker), group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    _started(broker, consumer)
    clients.append(consumer)
    got = _receive_all(consumer, 1)
    assert [m.body for m in got] == [b"later"]
    assert broker.stats()["topics"][topic]["delayed"] == 0


def test_type_mismatch_is_refused(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic = unique("fifo")
    broker.create_topic(topic, "FIFO", 2)
    producer = Producer(_config(broker), (topic,))
    producer.startup()
    clients.append(producer)
    m = Message()
    m.topic = topic
    m.body = b"no group"
    with pytest.raises(Exception, match=r"not match|accept"):
        producer.send(m)


def test_transaction_commit_and_orphan_check(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = unique("tx"), unique("g")
    broker.create_topic(topic, "TRANSACTION", 2)
    broker.create_group(group)

    class Checker(TransactionChecker):
        def __init__(self) -> None:
            self.checked: list[str] = []

        def check(self, message: Message) -> TransactionResolution:
            self.checked.append(message.message_id)
            return TransactionResolution.COMMIT

    checker = Checker()
    producer = Producer(_config(broker), (topic,), checker)
    producer.startup()
    clients.append(producer)
    # Committed by the client.
    tx: Transaction = producer.begin_transaction()
    m = Message()
    m.topic = topic
    m.body = b"committed"
    producer.send(m, tx)
    assert broker.stats()["transactions"]["pending"] == 1
    tx.commit()
    # Left open: the broker checks it back through telemetry, the checker commits it.
    tx2 = producer.begin_transaction()
    m2 = Message()
    m2.topic = topic
    m2.body = b"orphan"
    orphan = producer.send(m2, tx2)
    consumer = SimpleConsumer(_config(broker), group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    _started(broker, consumer)
    clients.append(consumer)
    got = _receive_all(consumer, 2)
    assert sorted(m.body for m in got) == [b"committed", b"orphan"]
    assert orphan.message_id in checker.checked
    assert broker.stats()["transactions"]["committed"] >= 2
