"""``Producer.produce`` over jmq:// (embedded JMQ4 server) and nats:// (real nats-server): the
core's batched produce path, as for RocketMQ: bounded by ``max_pending``, reports in produce
order through ``poll``/``flush`` on the caller's thread, failures reported, ``close`` drains."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable

import pytest

import ferrymq
from _nats_server import HoldingProxy, NatsServer
from ferrymq import FerryError, JmqSendReceipt, Message, NatsSendReceipt
from ferrymq.testing import EmbeddedBroker

APP = "test_app"
TOKEN = "test_token"
_ids = itertools.count()

Report = tuple[int, FerryError | None, object]


def recorder(reports: list[Report], i: int) -> Callable[[FerryError | None, object], None]:
    caller = threading.get_ident()

    def on_delivery(err: FerryError | None, receipt: object) -> None:
        assert threading.get_ident() == caller, "callback ran off the caller's thread"
        reports.append((i, err, receipt))

    return on_delivery


@pytest.fixture
def nats_subject(nats_stream: tuple[ferrymq.JetStream, str]) -> str:
    return f"s{nats_stream[1]}.a"


def jmq_producer(broker: EmbeddedBroker, **kw: int) -> ferrymq.Producer:
    return ferrymq.Producer(broker.jmq_endpoint, app=APP, token=TOKEN, **kw)


def produce_all(p: ferrymq.Producer, topic: str, n: int, max_pending: int) -> list[Report]:
    reports: list[Report] = []
    for i in range(n):
        p.produce(Message(topic, b"%d" % i), recorder(reports, i))
        assert p.pending <= max_pending
    assert p.flush(30.0) == 0
    assert p.pending == 0
    return reports


def test_jmq_produce_is_bounded_and_reports_in_order(
    jmq_broker: EmbeddedBroker, jmq_topic: str
) -> None:
    with jmq_producer(jmq_broker, max_pending=50) as p:
        p.produce(Message(jmq_topic, b"first"))
        assert p.pending == 1, "a report waits for poll/flush"
        reports = produce_all(p, jmq_topic, 1000, 50)
    assert [i for i, _, _ in reports] == list(range(1000))
    assert all(err is None and isinstance(r, JmqSendReceipt) for _, err, r in reports)
    assert all(isinstance(r, JmqSendReceipt) and r.topic == jmq_topic for _, _, r in reports)
    assert jmq_broker.jmq.message_count(jmq_topic) == 1001


def test_jmq_produce_failures_are_reported(jmq_broker: EmbeddedBroker) -> None:
    reports: list[Report] = []
    with jmq_producer(jmq_broker) as p:
        for i in range(3):
            p.produce(Message(f"no-such-topic-{next(_ids)}", b"x"), recorder(reports, i))
        assert p.flush(30.0) == 0
    # three topics: in order per topic only
    assert sorted(i for i, _, _ in reports) == [0, 1, 2]
    assert all(isinstance(err, FerryError) and r is None for _, err, r in reports)


def test_jmq_close_delivers_what_was_produced(jmq_broker: EmbeddedBroker, jmq_topic: str) -> None:
    reports: list[Report] = []
    p = jmq_producer(jmq_broker)
    p.start()
    for i in range(200):
        p.produce(Message(jmq_topic, b"%d" % i), recorder(reports, i))
    p.close()
    assert [i for i, _, _ in reports] == list(range(200))
    assert jmq_broker.jmq.message_count(jmq_topic) == 200
    with pytest.raises(ferrymq.ClientClosedError):
        p.produce(Message(jmq_topic, b"late"))


def test_nats_produce_is_bounded_and_reports_in_order(
    nats_server: NatsServer, nats_subject: str
) -> None:
    with ferrymq.Producer(nats_server.url, max_pending=50) as p:
        reports = produce_all(p, nats_subject, 1000, 50)
    assert [i for i, _, _ in reports] == list(range(1000))
    receipts = [r for _, err, r in reports if err is None and isinstance(r, NatsSendReceipt)]
    assert len(receipts) == 1000
    # every message stored once (chunks in flight together may interleave in the stream)
    assert sorted(r.sequence for r in receipts) == list(range(1, 1001))
    assert len({r.message_id for r in receipts}) == 1000


def test_nats_produce_does_not_wait_for_acks(nats_proxy: HoldingProxy, nats_subject: str) -> None:
    reports: list[Report] = []
    with ferrymq.Producer(nats_proxy.url, request_timeout=10.0) as p:
        nats_proxy.hold()
        for i in range(100):
            p.produce(Message(nats_subject, b"%d" % i), recorder(reports, i))
        # every publish went out; no ack came back: nothing to report yet
        assert p.poll(0) == 0
        assert p.pending == 100
        nats_proxy.release()
        assert p.flush(30.0) == 0
    assert [i for i, _, _ in reports] == list(range(100))
    assert all(err is None for _, err, _ in reports)


def test_nats_produce_failures_are_reported(nats_server: NatsServer, nats_subject: str) -> None:
    reports: list[Report] = []
    with ferrymq.Producer(nats_server.url, request_timeout=2.0) as p:
        p.produce(Message(nats_subject, b"stored"), recorder(reports, 0))
        p.produce(Message(f"nostream{uuid.uuid4().hex[:8]}.a", b"lost"), recorder(reports, 1))
        assert p.flush(30.0) == 0
    by_id = {i: (err, r) for i, err, r in reports}
    assert by_id[0][0] is None
    assert isinstance(by_id[0][1], NatsSendReceipt)
    assert isinstance(by_id[1][0], FerryError)
    assert by_id[1][1] is None


async def test_nats_close_async_delivers_what_was_produced(
    nats_server: NatsServer, nats_subject: str
) -> None:
    reports: list[Report] = []
    p = ferrymq.Producer(nats_server.url)
    await p.start_async()
    for i in range(200):
        p.produce(Message(nats_subject, b"%d" % i), recorder(reports, i))
    await p.close_async()
    assert [i for i, _, _ in reports] == list(range(200))
    assert all(err is None for _, err, _ in reports)
