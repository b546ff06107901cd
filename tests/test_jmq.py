"""JMQ4 (JoyQueue) end to end: ferrymq.Producer("jmq://…") / SimpleConsumer("jmq://…") against the
JMQ4 side of ferrymq.testing.EmbeddedBroker (topics made with ``create_topic`` are served over
JMQ4 too)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from ferrymq.testing import EmbeddedBroker
from waiting import first_batch, wait_for

APP = "test_app"
TOKEN = "test_token"
_ids = itertools.count()


@pytest.fixture
def topic(jmq_topic: str) -> str:
    return jmq_topic


@pytest.fixture
def producer(jmq_producer: ferrymq.Producer) -> ferrymq.Producer:
    return jmq_producer


def consumer(broker: EmbeddedBroker, topic: str, **kw: object) -> ferrymq.SimpleConsumer:
    return ferrymq.SimpleConsumer(
        broker.jmq_endpoint,
        APP,
        subscriptions=topic,
        token=TOKEN,
        await_duration=0.3,
        jmq_options={"long_poll": 0.5, **kw},
    )


def drain(c: ferrymq.SimpleConsumer, n: int, ack: bool = True) -> list[ferrymq.MessageView]:
    out: list[ferrymq.MessageView] = []
    for _ in range(100):
        if len(out) >= n:
            break
        got = c.receive(32)
        if ack and got:
            c.ack(got)
        out.extend(got)
    return out


def test_produce_consume_ack(
    jmq_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    big = b"x" * 4096
    r = producer.send(
        ferrymq.Message(topic, big, keys="order-1", tag="paid", properties={"k": "v=1"})
    )
    assert r.topic == topic
    assert r.index >= 0
    assert r.message_id.startswith(topic)
    for i in range(4):
        producer.send(ferrymq.Message(topic, f"m{i}".encode()))
    with consumer(jmq_broker, topic) as c:
        got = drain(c, 5)
        assert len(got) == 5
        first = next(m for m in got if m.body == big)
        assert first.keys == ("order-1",)
        assert first.tag == "paid"
        assert first.properties == {"k": "v=1"}
        assert c.receive(10) == []
    with consumer(jmq_broker, topic) as c:
        assert c.receive(10) == [], "every message was acked"
    assert jmq_broker.jmq.message_count(topic) == 5


def test_batch_and_multi_topic(
    jmq_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    other = topic + "-b"
    jmq_broker.create_topic(other, queues=2)
    receipts = producer.send_batch([ferrymq.Message(topic, b"%d" % i) for i in range(5)])
    assert [r.index - receipts[0].index for r in receipts] == [0, 1, 2, 3, 4]
    mixed = producer.send_batch(
        [ferrymq.Message(other, b"a"), ferrymq.Message(topic, b"b"), ferrymq.Message(other, b"c")]
    )
    assert [r.topic for r in mixed] == [other, topic, other]
    with consumer(jmq_broker, topic) as c:
        assert len(drain(c, 6)) == 6


@pytest.mark.parametrize("compression", ["zlib", "zip", "snappy", "none"])
def test_compression(jmq_broker: EmbeddedBroker, topic: str, compression: str) -> None:
    body = bytes(range(256)) * 100
    with ferrymq.Producer(
        jmq_broker.jmq_endpoint, app=APP, token=TOKEN, jmq_options={"compression": compression}
    ) as p:
        p.send(ferrymq.Message(topic, body))
    with consumer(jmq_broker, topic) as c:
        assert drain(c, 1)[0].body == body


def test_transactions(jmq_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str) -> None:
    with producer.begin_transaction() as tx:
        tx.send(ferrymq.Message(topic, b"t1"))
        tx.send(ferrymq.Message(topic, b"t2"))
        assert jmq_broker.jmq.message_count(topic) == 0
    assert [r.topic for r in tx.receipts] == [topic, topic]
    assert jmq_broker.jmq.message_count(topic) == 2
    with pytest.raises(ferrymq.ClientClosedError):
        tx.send(ferrymq.Message(topic, b"after commit"))
    tx2 = producer.begin_transaction()

    def fail_inside() -> None:
        with tx2:
            tx2.send(ferrymq.Message(topic, b"never"))
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        fail_inside()
    assert jmq_broker.jmq.message_count(topic) == 2
    with pytest.raises(ferrymq.ClientClosedError):
        tx2.commit()


def test_transaction_feedback_calls_the_checker(jmq_broker: EmbeddedBroker, topic: str) -> None:
    seen: list[Any] = []

    def checker(orphan: Any) -> ferrymq.TransactionResolution:
        seen.append(orphan)
        return ferrymq.TransactionResolution.COMMIT

    with ferrymq.Producer(
        jmq_broker.jmq_endpoint,
        app=APP,
        token=TOKEN,
        transaction_checker=checker,
        jmq_options={"transaction_timeout": 0.05, "feedback_interval": 0.05},
    ) as p:
        tx = p.begin_transaction()
        tx.send(ferrymq.Message(topic, b"compensated"))
        # never committed: the background feedback asks the checker, which commits
        wait_for("the orphan committed", lambda: jmq_broker.jmq.message_count(topic) == 1)
    assert (seen[0].topic, bool(seen[0].tx_id), bool(seen[0].transaction_id)) == (topic, True, True)


def test_broadcast_and_coordinator(
    jmq_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    producer.send_batch([ferrymq.Message(topic, b"%d" % i) for i in range(6)])
    with (
        consumer(jmq_broker, topic, mode="broadcast") as b1,
        consumer(jmq_broker, topic, mode="broadcast") as b2,
    ):
        assert len(drain(b1, 6)) == 6
        assert len(drain(b2, 6)) == 6
    with consumer(jmq_broker, topic, mode="coordinator") as c:
        assert len(drain(c, 6)) == 6


def test_retry_on_not_leader(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(jmq_nodes=2)
    topic = "faulty"
    b.create_topic(topic, queues=4)
    producer = ferrymq.Producer(b.jmq_endpoint, app=APP, token=TOKEN)
    producer.send(ferrymq.Message(topic, b"warm"))
    b.jmq.fail_next(188, command="PRODUCE_MESSAGE", times=1)
    producer.send(ferrymq.Message(topic, b"after-188"))
    # The leader of every partition group moves to node 2: the client follows.
    b.jmq.set_leader(topic, 0, 2)
    receipt = producer.send(ferrymq.Message(topic, b"moved"))
    assert receipt.broker_id == 2
    b.jmq.fail_next(6, command="PRODUCE_MESSAGE", times=1)
    with pytest.raises(ferrymq.BrokerError) as e:
        producer.send(ferrymq.Message(topic, b"bad"))
    assert e.value.code == 6
    assert e.value.code_name == "CN_PARAM_ERROR"
    assert e.value.protocol == "jmq"
    assert not e.value.retriable
    assert b.jmq.message_count(topic) == 3
    producer.close()


def test_bad_input(jmq_broker: EmbeddedBroker, producer: ferrymq.Producer) -> None:
    wrong = ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token="wrong-s3cret")
    assert "s3cret" not in repr(wrong)
    with pytest.raises(ferrymq.BrokerError) as e:
        wrong.start()
    assert e.value.code == 2
    assert "check app and token" in str(e.value)
    with pytest.raises(ferrymq.BrokerError) as e:
        producer.send(ferrymq.Message("no-such-topic", b"x"))
    assert e.value.code == 189
    assert "does not exist" in str(e.value)
    with pytest.raises(ferrymq.BrokerError, match="does not exist"):
        consumer(jmq_broker, "no-such-topic").start()
    with pytest.raises(ferrymq.InvalidArgumentError, match="body"):
        producer.send(ferrymq.Message("t", b"x" * (3 * 1024 * 1024 + 1)))
    # One key is the JMQ4 businessId; a second would be lost, so it is refused.
    with pytest.raises(ferrymq.InvalidArgumentError, match="keys"):
        producer.send(ferrymq.Message("t", b"x", keys=["a", "b"]))
    with pytest.raises(ferrymq.InvalidArgumentError, match="qos"):
        ferrymq.Producer(
            jmq_broker.jmq_endpoint, app=APP, token=TOKEN, jmq_options={"qos": "ack_flush"}
        )
    with pytest.raises(ferrymq.InvalidArgumentError, match="token"):
        ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token="")
    with pytest.raises(ferrymq.InvalidArgumentError, match="app"):
        ferrymq.Producer(jmq_broker.jmq_endpoint)
    with pytest.raises(ferrymq.InvalidArgumentError, match="recall"):
        producer.recall("t", "handle")
    with pytest.raises(ferrymq.InvalidArgumentError, match="message"):
        producer.send(b"raw bytes")  # type: ignore[arg-type]
    with pytest.raises(ferrymq.FerryConnectionError):
        ferrymq.Producer("jmq://127.0.0.1:1", app=APP, token=TOKEN).start()
    # A topic the app has no subscription to... is every topic for an unknown app.
    with pytest.raises(ferrymq.BrokerError):
        ferrymq.Producer(jmq_broker.jmq_endpoint, app="ghost", token="x").start()


def test_first_send_connects_without_start(jmq_broker: EmbeddedBroker, topic: str) -> None:
    # (Closing, and what a closed producer refuses: test_producer_protocols.py.)
    p = ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token=TOKEN)
    assert p.send(ferrymq.Message(topic, b"lazy connect")).topic == topic
    p.close()


async def test_async_transaction(jmq_broker: EmbeddedBroker, topic: str) -> None:
    async with ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token=TOKEN) as p:
        tx = p.begin_transaction()
        await tx.send_async(ferrymq.Message(topic, b"in-tx"))
        await tx.commit_async()
    async with consumer(jmq_broker, topic) as c:
        got = first_batch(lambda: c.receive(10))
        assert [m.body for m in got] == [b"in-tx"]
        await c.ack_async(got)


async def test_long_poll_wakes_on_a_new_message(jmq_broker: EmbeddedBroker, topic: str) -> None:
    async with (
        ferrymq.SimpleConsumer(
            jmq_broker.jmq_endpoint, APP, subscriptions=topic, token=TOKEN, await_duration=20.0
        ) as c,
        ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token=TOKEN) as p,
    ):
        waiting = asyncio.ensure_future(c.receive_async(1))
        await asyncio.sleep(0.2)
        await p.send_async(ferrymq.Message(topic, b"wake"))
        got = await waiting
        assert got[0].body == b"wake"
        await c.ack_async(got)


def test_broker_topics_are_served_over_jmq(jmq_broker: EmbeddedBroker) -> None:
    name = f"both-{next(_ids)}"
    jmq_broker.create_topic(name, queues=8)
    with (
        ferrymq.Producer(jmq_broker.jmq_endpoint, app=APP, token=TOKEN) as p,
        consumer(jmq_broker, name) as c,
    ):
        r = p.send(ferrymq.Message(name, b"over jmq"))
        assert 0 <= r.partition < 8
        assert drain(c, 1)[0].body == b"over jmq"
    assert jmq_broker.jmq_endpoint.startswith("jmq://127.0.0.1:")
    with EmbeddedBroker(jmq=False) as plain, pytest.raises(ferrymq.InvalidArgumentError):
        _ = plain.jmq_endpoint


def test_other_app_and_app_mismatch(jmq_broker: EmbeddedBroker, topic: str) -> None:
    with ferrymq.Producer(jmq_broker.jmq_endpoint, app="other_app", token="other_token") as p:
        assert p.send(ferrymq.Message(topic, b"from other")).index >= 0
    with pytest.raises(ferrymq.BrokerError) as e:
        ferrymq.Producer(jmq_broker.jmq_endpoint, app="other_app", token=TOKEN).start()
    assert e.value.code_name == "CN_AUTHENTICATION_ERROR"
