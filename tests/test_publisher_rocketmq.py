"""The managed async publisher over the RocketMQ producer, against the embedded broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

import ferrymq
from ferrymq.testing import EmbeddedBroker
from test_publisher_nats import Recorder, check_window

FAST = {"heartbeat_interval": 0.2, "route_refresh_interval": 0.5}


@pytest.fixture
def own_broker(make_broker: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    """A private broker (these tests add latency and faults)."""
    return make_broker(endpoints=1)


@pytest.fixture
def topic(own_broker: EmbeddedBroker, unique: Callable[[str], str]) -> str:
    name = unique("pub")
    own_broker.create_topic(name, "NORMAL", queues=4)
    return name


@pytest.fixture
def producer(own_broker: EmbeddedBroker, topic: str) -> Iterator[ferrymq.Producer]:
    with ferrymq.Producer(own_broker.endpoints, topics=[topic], **FAST) as p:
        yield p


async def test_publish_async_over_rocketmq(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    rec = Recorder()
    async with ferrymq.AsyncPublisher(
        producer, id_prefix="rmq", max_in_flight=8, listener=rec
    ) as pub:
        flights = [
            await pub.publish_async(topic, f"m{i}".encode(), headers={"n": str(i)})
            for i in range(50)
        ]
    acks = [await f for f in flights]
    assert [f.id for f in flights] == [f"rmq-{i}" for i in range(1, 51)]
    assert all(a.stream == topic for a in acks)
    assert len({a.message_id for a in acks}) == 50
    assert sorted(f.id for f in rec.kinds("acked")) == sorted(f.id for f in flights)
    check_window(rec.events, 8, 0)
    stored = own_broker.messages(topic)
    assert len(stored) == 50
    # The flight id is a key of the RocketMQ message, so it can be looked up by it.
    assert {k for m in stored for k in m["keys"]} == {f.id for f in flights}
    assert {m["properties"]["n"] for m in stored} == {str(i) for i in range(50)}


async def test_hold_and_refill_over_rocketmq(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    rec = Recorder()
    own_broker.set_latency(0, 0.2, rpc="SendMessage")
    pub = ferrymq.AsyncPublisher(producer, max_in_flight=4, refill_allowed_at=1, listener=rec)
    pub.start()
    flights = [await pub.publish_async(topic, b"x") for _ in range(16)]
    await pub.drain()
    assert all(f.state == "acked" for f in flights)
    assert check_window(rec.events, 4, 1) >= 2
    assert len(own_broker.messages(topic)) == 16


async def test_timeouts_over_rocketmq(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    rec = Recorder()
    own_broker.set_latency(0, 2.0, rpc="SendMessage")
    async with ferrymq.AsyncPublisher(producer, wait_timeout=0.3, listener=rec) as pub:
        flights = [await pub.publish_async(topic, b"x") for _ in range(3)]
        for f in flights:
            with pytest.raises(ferrymq.FerryTimeoutError):
                await f
    assert {f.id for f in rec.kinds("timeout")} == {f.id for f in flights}


async def test_failures_over_rocketmq(
    producer: ferrymq.Producer, unique: Callable[[str], str]
) -> None:
    rec = Recorder()
    async with ferrymq.AsyncPublisher(producer, listener=rec) as pub:
        flight = await pub.publish_async(unique("missing"), b"x")
        with pytest.raises(ferrymq.BrokerError) as e:
            await flight
    assert e.value.protocol == "rocketmq"
    assert rec.kinds("completed_exceptionally") == [flight]
    assert flight.state == "failed"


async def test_drain_over_rocketmq(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    own_broker.set_latency(0, 0.3, rpc="SendMessage")
    pub = ferrymq.AsyncPublisher(producer, max_in_flight=5)
    pub.start()
    flights = [await pub.publish_async(topic, b"x") for _ in range(10)]
    drain = asyncio.ensure_future(pub.drain())
    with pytest.raises(ferrymq.ClientClosedError):
        await pub.publish_async(topic, b"late")
    await drain
    assert all(f.state == "acked" for f in flights)
    assert len(own_broker.messages(topic)) == 10


def test_jetstream_options_are_refused_by_rocketmq(producer: ferrymq.Producer, topic: str) -> None:
    pub = ferrymq.AsyncPublisher(producer)
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^expected_stream"):
        pub.submit(topic, b"x", expected_stream="S")
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^topic"):
        pub.submit("bad topic", b"x")
    pub.stop()


async def test_wide_window_over_rocketmq(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    """A thousand sends in flight on one HTTP/2 connection: every one is acked.

    With HTTP/2 adaptive windows the client's h2 allowed only ~32 KiB of framing overhead of
    unread DATA frames per connection and closed it (ENHANCE_YOUR_CALM) once a few hundred small
    responses were waiting to be read.
    """
    n = 5000
    async with ferrymq.AsyncPublisher(producer, max_in_flight=1000, refill_allowed_at=999) as pub:
        futures = [(await pub.publish_async(topic, b"x" * 128)).ack_future for _ in range(n)]
        acks = await asyncio.gather(*futures)
    assert len({a.message_id for a in acks}) == n
    assert len(own_broker.messages(topic)) == n
