"""The managed async publisher over the JMQ4 producer, against the embedded broker's JMQ4 side."""

from __future__ import annotations

import itertools

import pytest

import ferrymq
from ferrymq.testing import EmbeddedBroker
from test_jmq import consumer, drain
from test_publisher_nats import Recorder, check_window

_ids = itertools.count()


async def test_publish_async_over_jmq(
    jmq_broker: EmbeddedBroker, jmq_producer: ferrymq.Producer, jmq_topic: str
) -> None:
    producer, topic = jmq_producer, jmq_topic
    rec = Recorder()
    async with ferrymq.AsyncPublisher(
        producer, id_prefix="jmq", max_in_flight=6, refill_allowed_at=2, listener=rec
    ) as pub:
        flights = [await pub.publish_async(topic, f"m{i}".encode()) for i in range(30)]
    acks = [await f for f in flights]
    assert [f.id for f in flights] == [f"jmq-{i}" for i in range(1, 31)]
    assert all(a.stream == topic for a in acks)
    assert len({a.message_id for a in acks}) == 30
    check_window(rec.events, 6, 2)
    with consumer(jmq_broker, topic) as c:
        got = drain(c, 30)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(30))


async def test_failures_over_jmq(jmq_producer: ferrymq.Producer) -> None:
    producer = jmq_producer
    rec = Recorder()
    async with ferrymq.AsyncPublisher(producer, listener=rec) as pub:
        flight = await pub.publish_async(f"jmq-missing{next(_ids)}", b"x")
        with pytest.raises(ferrymq.FerryError):
            await flight
    assert rec.kinds("completed_exceptionally") == [flight]
    # the error names the expectation given
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^expected_last_sequence"):
        ferrymq.AsyncPublisher(producer).submit("t", b"x", expected_last_sequence=1)
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^expected_last_msg_id"):
        ferrymq.AsyncPublisher(producer).submit("t", b"x", expected_last_msg_id="m")
