"""Faithfulness: the official ``rocketmq-python-client`` (PyPI), unchanged, against the embedded
broker. That client is a strict peer: if it fails here, the broker is wrong."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ferrymq.testing import EmbeddedBroker
from waiting import receive_until, wait_for

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


def _topic_and_group(
    broker: EmbeddedBroker, unique: Callable[[str], str], kind: str, queues: int, **group: Any
) -> tuple[str, str]:
    """A fresh topic of ``kind`` and a fresh consumer group (``group`` options) on ``broker``."""
    topic, name = unique(kind.lower()), unique("g")
    broker.create_topic(topic, kind, queues)
    broker.create_group(name, **group)
    return topic, name


def _producer(
    broker: EmbeddedBroker, clients: list[object], topic: str, *checker: TransactionChecker
) -> Producer:
    """A started producer of ``topic`` (shut down at the end of the test)."""
    producer = Producer(_config(broker), (topic,), *checker)
    producer.startup()
    clients.append(producer)
    return producer


def _consumer(
    broker: EmbeddedBroker, clients: list[object], group: str, topic: str, tag: str | None = None
) -> SimpleConsumer:
    """A started consumer of ``topic`` (its messages with ``tag``, or all), once the broker
    holds its settings (shut down at the end of the test).

    The official SimpleConsumer does not wait for its settings to be acknowledged before
    ``startup()`` returns (only its PushConsumer does), so a receive right after start-up can
    race them; a real proxy then fails the receive as well. Not a broker issue."""
    expression = FilterExpression(tag) if tag else FilterExpression()
    consumer = SimpleConsumer(_config(broker), group, {topic: expression}, await_duration=2)
    consumer.startup()
    clients.append(consumer)
    wait_for(
        "the consumer's settings",
        lambda: consumer.client_id in {c["client_id"] for c in broker.clients(0)},
        timeout=10,
    )
    return consumer


def _message(topic: str, body: bytes, **fields: object) -> Message:
    """An official-client message (built by setting its attributes)."""
    m = Message()
    m.topic = topic
    m.body = body
    for name, value in fields.items():
        setattr(m, name, value)
    return m


def test_normal_topic_send_receive_ack(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = _topic_and_group(broker, unique, "NORMAL", 4)
    producer = _producer(broker, clients, topic)
    sent = []
    for i in range(5):
        m = _message(topic, f"hello-{i}".encode(), tag="greeting", keys=f"k{i}")
        m.add_property("n", str(i))
        receipt = producer.send(m)
        sent.append(receipt.message_id)
    consumer = _consumer(broker, clients, group, topic, "greeting")
    got = receive_until(consumer, 5)
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
    topic, group = _topic_and_group(broker, unique, "FIFO", 4, fifo=True)
    producer = _producer(broker, clients, topic)
    for i in range(6):
        producer.send(_message(topic, f"{i}".encode(), message_group="A" if i % 2 == 0 else "B"))
    consumer = _consumer(broker, clients, group, topic)
    # A receive may carry a group's consecutive messages, each group in send order.
    first = receive_until(consumer, 6, ack=False)
    order = {g: [m.body for m in first if m.message_group == g] for g in ("A", "B")}
    assert order == {"A": [b"0", b"2", b"4"], "B": [b"1", b"3", b"5"]}
    # While they are unacked, the group's next message is held back.
    producer.send(_message(topic, b"6", message_group="A"))
    assert consumer.receive(32, 15) == []
    for m in first:
        consumer.ack(m)
    rest = receive_until(consumer, 1)
    assert [(m.message_group, m.body) for m in rest] == [("A", b"6")]


def test_delay_topic_holds_messages_until_due(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = _topic_and_group(broker, unique, "DELAY", 2)
    producer = _producer(broker, clients, topic)
    producer.send(_message(topic, b"later", delivery_timestamp=int(time.time()) + 2))
    assert broker.stats()["topics"][topic]["delayed"] == 1
    consumer = _consumer(broker, clients, group, topic)
    got = receive_until(consumer, 1)
    assert [m.body for m in got] == [b"later"]
    assert broker.stats()["topics"][topic]["delayed"] == 0


def test_type_mismatch_is_refused(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic = unique("fifo")
    broker.create_topic(topic, "FIFO", 2)
    producer = _producer(broker, clients, topic)
    with pytest.raises(Exception, match=r"not match|accept"):
        producer.send(_message(topic, b"no group"))


def test_transaction_commit_and_orphan_check(
    broker: EmbeddedBroker, unique: Callable[[str], str], clients: list[object]
) -> None:
    topic, group = _topic_and_group(broker, unique, "TRANSACTION", 2)

    class Checker(TransactionChecker):
        def __init__(self) -> None:
            self.checked: list[str] = []

        def check(self, message: Message) -> TransactionResolution:
            self.checked.append(message.message_id)
            return TransactionResolution.COMMIT

    checker = Checker()
    producer = _producer(broker, clients, topic, checker)
    # The broker is shared by the session: other tests may have left transactions open.
    pending = broker.stats()["transactions"]["pending"]
    # Committed by the client.
    tx: Transaction = producer.begin_transaction()
    producer.send(_message(topic, b"committed"), tx)
    assert broker.stats()["transactions"]["pending"] == pending + 1
    tx.commit()
    # Left open: the broker checks it back through telemetry, the checker commits it.
    tx2 = producer.begin_transaction()
    orphan = producer.send(_message(topic, b"orphan"), tx2)
    consumer = _consumer(broker, clients, group, topic)
    got = receive_until(consumer, 2)
    assert sorted(m.body for m in got) == [b"committed", b"orphan"]
    assert orphan.message_id in checker.checked
    assert broker.stats()["transactions"]["committed"] >= 2
