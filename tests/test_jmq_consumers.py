"""ferrymq.SimpleConsumer and ferrymq.PushConsumer over JMQ4 (``jmq://``), against the JMQ4 side
of ferrymq.testing.EmbeddedBroker: the RocketMQ consumer API, selected by the endpoint scheme."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import ferrymq
from ferrymq.testing import EmbeddedBroker
from test_jmq import APP, TOKEN, consumer, drain
from waiting import first_batch, wait_for


@pytest.fixture
def topic(jmq_topic: str) -> str:
    return jmq_topic


def send(broker: EmbeddedBroker, topic: str, n: int, *, batch: bool = False) -> set[bytes]:
    """Send ``n`` messages, one by one or as JMQ4 batches (stored, and retried, as one entry)."""
    bodies = [f"m{i}".encode() for i in range(n)]
    messages = [ferrymq.Message(topic, b, keys=b.decode(), tag="t") for b in bodies]
    with ferrymq.Producer(broker.jmq_endpoint, app=APP, token=TOKEN) as p:
        if batch:
            for i in range(0, n, 50):
                p.send_batch(messages[i : i + 50])
        else:
            for m in messages:
                p.send(m)
    return set(bodies)


def test_received_batches_carry_the_jmq4_coordinates(
    jmq_broker: EmbeddedBroker, topic: str
) -> None:
    sent = send(jmq_broker, topic, 20, batch=True)
    with consumer(jmq_broker, topic) as c:
        assert c.group == APP
        assert "token" not in repr(c)
        got = drain(c, len(sent))  # a batch comes whole and is acked together
        assert c.receive(16) == []
    assert {m.body for m in got} == sent
    m = got[0]
    assert m.keys == (m.body.decode(),)
    assert m.tag == "t"
    assert 0 <= m.queue_id < 4
    assert m.offset >= 0
    assert m.message_group is None
    assert m.message_id == f"{topic}/{m.queue_id}/{m.offset}"
    assert m.store_timestamp >= m.born_timestamp > 0


def test_invisible_duration_is_the_ack_timeout(jmq_broker: EmbeddedBroker, topic: str) -> None:
    send(jmq_broker, topic, 1)
    with consumer(jmq_broker, topic) as c:
        first = c.receive(16, invisible_duration=0.2)
        assert len(first) == 1
        time.sleep(0.4)  # not acked: visible again once the fetch's ack timeout passed
        again = first_batch(lambda: c.receive(16))
        assert [m.offset for m in again] == [first[0].offset]
        c.ack(again)


def test_push_consumer_cache_takes_whole_batches(jmq_broker: EmbeddedBroker, topic: str) -> None:
    sent = send(jmq_broker, topic, 300, batch=True)
    ids: set[tuple[str, int, int, int]] = set()
    lock = threading.Lock()

    def listener(m: ferrymq.MessageView) -> None:
        with lock:
            ids.add((m.message_id, m.queue_id, m.offset, m.delivery_attempt))

    with ferrymq.PushConsumer(
        jmq_broker.jmq_endpoint,
        APP,
        subscriptions={topic: "*"},
        listener=listener,
        consumption_threads=4,
        max_cache_messages=64,
        token=TOKEN,
    ) as pc:
        wait_for(
            "every message consumed and the cache empty",
            lambda: len(ids) == len(sent) and pc.stats()["cached_messages"] == 0,
        )
        stats = pc.stats()
    # Slots are reserved before each receive, but a JMQ4 batch (50 here) is delivered whole:
    # each of the 4 receives in flight may bring one batch beyond its reservation.
    assert stats["max_cached_messages"] <= 64 + 4 * 50
    # The listener's views carry the JMQ4 coordinates.
    assert all(i == f"{topic}/{q}/{o}" and 0 <= q < 4 and a == 1 for i, q, o, a in ids)


def test_push_consumer_unsubscribes_and_subscribes_again(
    jmq_broker: EmbeddedBroker, topic: str
) -> None:
    seen: set[bytes] = set()
    lock = threading.Lock()

    def listener(m: ferrymq.MessageView) -> None:
        with lock:
            seen.add(m.body)

    with ferrymq.PushConsumer(
        jmq_broker.jmq_endpoint, APP, subscriptions=topic, listener=listener, token=TOKEN
    ) as pc:
        first = send(jmq_broker, topic, 5)
        wait_for("first messages consumed", lambda: first <= seen)
        pc.unsubscribe(topic)
        assert pc.subscriptions == {}
        assert pc.stats()["process_queues"] == 0
        # JMQ4 reads the topics named at construction, without filters.
        with pytest.raises(ferrymq.InvalidArgumentError, match="topic"):
            pc.subscribe("another-topic")
        with pytest.raises(ferrymq.InvalidArgumentError, match="filter"):
            pc.subscribe(topic, "tagA")
        later = send(jmq_broker, topic, 5)
        pc.subscribe(topic)
        assert set(pc.subscriptions) == {topic}
        wait_for("messages sent while unsubscribed consumed", lambda: later <= seen)


def test_bad_input(jmq_broker: EmbeddedBroker, topic: str, broker: EmbeddedBroker) -> None:
    ep = jmq_broker.jmq_endpoint

    def push(**kw: Any) -> ferrymq.PushConsumer:
        return ferrymq.PushConsumer(ep, APP, subscriptions=topic, listener=lambda m: None, **kw)

    with pytest.raises(ferrymq.BrokerError, match="check app and token"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions=topic, token="wrong").start()
    with pytest.raises(ferrymq.BrokerError, match="check app and token"):
        push(token="wrong").start()
    with pytest.raises(ferrymq.InvalidArgumentError, match="'bogus'"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions=topic, token=TOKEN, jmq_options={"bogus": 1})
    with pytest.raises(ferrymq.InvalidArgumentError, match="'bogus'"):
        push(token=TOKEN, jmq_options={"bogus": 1})
    with pytest.raises(ferrymq.InvalidArgumentError, match="'bogus'"):
        ferrymq.Producer(ep, app=APP, token=TOKEN, jmq_options={"bogus": 1})
    with pytest.raises(ferrymq.InvalidArgumentError, match="token"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions=topic)
    with pytest.raises(ferrymq.InvalidArgumentError, match="app"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions=topic, app="other_app", token=TOKEN)
    with pytest.raises(ferrymq.InvalidArgumentError, match="subscriptions"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions={topic: "paid"}, token=TOKEN)
    with pytest.raises(ferrymq.InvalidArgumentError, match="subscriptions"):
        ferrymq.SimpleConsumer(ep, APP, token=TOKEN)
    with pytest.raises(ferrymq.InvalidArgumentError, match="credentials"):
        ferrymq.SimpleConsumer(ep, APP, subscriptions=topic, token=TOKEN, credentials=("ak", "sk"))
    with pytest.raises(ferrymq.InvalidArgumentError, match="fifo_accelerator"):
        push(token=TOKEN, fifo_accelerator=True)
    with pytest.raises(ferrymq.InvalidArgumentError, match="fifo_pipelining"):
        push(token=TOKEN, fifo_pipelining=True)
    with pytest.raises(ferrymq.InvalidArgumentError, match="listener"):
        ferrymq.PushConsumer(ep, APP, subscriptions=topic, listener=42, token=TOKEN)  # type: ignore[arg-type]
    with ferrymq.SimpleConsumer(ep, APP, subscriptions=topic, token=TOKEN) as c:
        with pytest.raises(ferrymq.InvalidArgumentError, match="named at construction"):
            c.subscribe("other")
        with pytest.raises(ferrymq.InvalidArgumentError, match="filters"):
            c.subscribe(topic, "paid")
    # The RocketMQ side keeps its API; JMQ4-only parts are refused there.
    r = ferrymq.SimpleConsumer(broker.endpoints, "g", subscriptions=topic)
    assert r.protocol == "rocketmq"
    assert isinstance(r, ferrymq.SimpleConsumer)
    with pytest.raises(ferrymq.InvalidArgumentError, match="jmq_options"):
        ferrymq.SimpleConsumer(broker.endpoints, "g", subscriptions=topic, jmq_options={})
    r.close()
