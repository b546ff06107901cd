"""The managed async publisher: what it does over every protocol (``backend``: the embedded
broker's RocketMQ and JMQ4 sides, a real nats-server), then over RocketMQ in detail, slow sends
made by the embedded broker's injected latency (NATS in detail: test_publisher_nats.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

import ferrymq
from backends import Backend
from ferrymq.testing import EmbeddedBroker


class Recorder(ferrymq.PublisherListener):
    """Records every listener call in order, with the thread it ran on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ferrymq.Flight]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def _add(self, kind: str, flight: ferrymq.Flight) -> None:
        with self.lock:
            self.events.append((kind, flight))
            self.threads.add(threading.current_thread().name)

    def published(self, flight: ferrymq.Flight) -> None:
        self._add("published", flight)

    def acked(self, flight: ferrymq.Flight) -> None:
        self._add("acked", flight)

    def completed_exceptionally(self, flight: ferrymq.Flight) -> None:
        self._add("completed_exceptionally", flight)

    def timeout(self, flight: ferrymq.Flight) -> None:
        self._add("timeout", flight)

    def kinds(self, kind: str) -> list[ferrymq.Flight]:
        with self.lock:
            return [f for k, f in self.events if k == kind]


def check_window(events: list[tuple[str, ferrymq.Flight]], max_in_flight: int, refill: int) -> int:
    """Replay listener events: the in-flight count never exceeds the window, and once it reaches
    the window nothing is published until it is back at `refill`. Returns how often it held."""
    n = 0
    held = False
    holds = 0
    for kind, _ in events:
        if kind == "published":
            assert not held, "published while the hold was on"
            n += 1
            assert n <= max_in_flight
            if n == max_in_flight:
                held = True
                holds += 1
        else:
            n -= 1
            if n <= refill:
                held = False
    assert n == 0
    return holds


async def test_publish_async_acks_every_message_with_stamped_ids(backend: Backend) -> None:
    rec = Recorder()
    with backend.producer() as producer:
        async with ferrymq.AsyncPublisher(
            producer, id_prefix="order", max_in_flight=16, refill_allowed_at=4, listener=rec
        ) as pub:
            assert pub.state == "running"
            flights = [
                await pub.publish_async(
                    backend.topic, f"body-{i}".encode(), headers={"X-N": str(i)}
                )
                for i in range(200)
            ]
    assert pub.state == "finished"
    assert [f.id for f in flights] == [f"order-{i}" for i in range(1, 201)]
    acks = [await f for f in flights]
    assert all(a.stream == backend.stream and not a.duplicate for a in acks)
    assert len({a.message_id for a in acks}) == 200
    for f in flights:
        assert (f.state, f.done, f.attempts) == ("acked", True, 1)
        assert f.publish_time is not None
        assert f.exception is None
        assert f.subject == f.topic == backend.topic
    assert flights[7].body == b"body-7"
    assert flights[7].headers == {"X-N": "7"}
    # The listener saw published then acked for every flight, on the event loop's thread.
    assert rec.kinds("published") == flights
    assert sorted(rec.kinds("acked"), key=lambda f: f.id) == sorted(flights, key=lambda f: f.id)
    assert rec.threads == {threading.current_thread().name}
    check_window(rec.events, 16, 4)
    assert backend.stored() == 200


async def test_failures_reach_both_the_listener_and_the_futures(backend: Backend) -> None:
    rec = Recorder()
    retry = ferrymq.RetryConfig(attempts=3, backoff=(0.01,))
    with backend.producer() as producer:
        async with ferrymq.AsyncPublisher(producer, retry=retry, listener=rec) as pub:
            flight = await pub.publish_async(backend.missing, b"x")
            with pytest.raises(ferrymq.BrokerError) as e:
                await flight
    assert e.value.protocol == backend.protocol
    assert flight.state == "failed"
    (failed,) = rec.kinds("completed_exceptionally")
    assert failed == flight
    assert isinstance(failed.exception, ferrymq.FerryError)


async def test_lifecycle_start_async_and_close_async(backend: Backend) -> None:
    producer = await backend.producer().start_async()
    pub = ferrymq.AsyncPublisher(producer)
    assert await pub.start_async() is pub
    flights = [await pub.publish_async(backend.topic, b"%d" % i) for i in range(5)]
    assert await pub.close_async(timedelta(seconds=10)) is True
    assert all(f.state == "acked" for f in flights)
    assert pub.state == "finished"
    sync = ferrymq.AsyncPublisher(producer)
    assert sync.start() is sync
    sync.stop()
    await producer.close_async()


@pytest.mark.parametrize("backend", ["rocketmq", "jmq"], indirect=True)
def test_jetstream_expectations_are_refused_by_other_protocols(backend: Backend) -> None:
    with backend.producer() as producer:
        pub = ferrymq.AsyncPublisher(producer)
        # the error names the expectation given
        for option, value in [
            ("expected_stream", "S"),
            ("expected_last_sequence", 1),
            ("expected_last_msg_id", "m"),
        ]:
            with pytest.raises(ferrymq.InvalidArgumentError, match=f"^{option}"):
                pub.submit(backend.topic, b"x", **{option: value})
        with pytest.raises(ferrymq.InvalidArgumentError, match=r"^topic"):
            pub.submit("bad topic", b"x")
        pub.stop()


# -- over RocketMQ in detail -------------------------------------------------------------------

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


async def test_flight_ids_are_keys_of_the_rocketmq_messages(
    own_broker: EmbeddedBroker, producer: ferrymq.Producer, topic: str
) -> None:
    async with ferrymq.AsyncPublisher(producer, id_prefix="rmq") as pub:
        flights = [
            await pub.publish_async(topic, f"m{i}".encode(), headers={"n": str(i)})
            for i in range(50)
        ]
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
