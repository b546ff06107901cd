"""``stats()`` of ``Producer`` (every protocol, every sending path) and ``AsyncPublisher``:
messages sent, failures by error type (the embedded broker's fault injection), retries,
latency percentiles; and the periodic ``stats_callback`` of every client."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from backends import Backend
from ferrymq.testing import EmbeddedBroker
from stats_checks import assert_latencies
from waiting import async_wait_for, wait_for

FreshTopic = Callable[..., tuple[EmbeddedBroker, str]]

SYSTEMS = {"rocketmq": "rocketmq", "jmq": "jmq", "nats": "nats"}


def test_sends_of_every_path_are_counted(backend: Backend) -> None:
    p = backend.producer()
    before = p.stats()
    assert (before["sent"], before["failed"], before["retried"], before["pending"]) == (0, 0, 0, 0)
    assert before["operations"] == {}
    with p:
        for i in range(5):
            p.send(ferrymq.Message(backend.topic, b"s%d" % i))
        p.send_batch([ferrymq.Message(backend.topic, b"b%d" % i) for i in range(4)])
        for i in range(3):
            p.produce(ferrymq.Message(backend.topic, b"p%d" % i))
        assert p.flush(30) == 0
        stats = p.stats(percentiles=[10, 50, 99.9])
    assert backend.stored() == 12
    assert stats["sent"] == 12
    assert (stats["failed"], stats["retried"], stats["in_flight"], stats["pending"]) == (0, 0, 0, 0)
    assert stats["overflowed"] == 0
    assert stats["client"]["system"] == SYSTEMS[backend.protocol]
    assert stats["client"]["server_port"] > 0
    assert stats["client"]["group"] is None
    (send,) = stats["operations"].values()
    assert send["type"] == "send"
    assert send["messages"] == 12
    # One call per request: JMQ4 sends a batch (and each produced chunk) in one request.
    if backend.protocol == "jmq":
        assert 7 <= send["calls"] <= 9
    else:
        assert send["calls"] == 12
    assert (send["failed"], send["errors"], send["retried"], send["in_flight"]) == (0, {}, 0, 0)
    assert_latencies(send, ("p10", "p50", "p99.9"))
    # Closed: the figures stay.
    assert p.stats()["sent"] == 12


def test_remoting_sends_are_counted(broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    topic = unique("t")
    broker.create_topic(topic, "NORMAL", 4)
    with ferrymq.Producer(broker.remoting_endpoint) as p:
        assert "pending" not in p.stats()
        p.send(ferrymq.Message(topic, b"one"))
        p.send_batch([ferrymq.Message(topic, b"b%d" % i) for i in range(10)])
        stats = p.stats()
    assert stats["sent"] == 11
    assert stats["client"]["system"] == "rocketmq"
    send = stats["operations"]["send"]
    assert (send["calls"], send["messages"], send["failed"]) == (2, 11, 0)
    assert_latencies(send)


def test_packed_batches_and_transactions_are_counted(
    fresh_topic: FreshTopic, unique: Callable[[str], str]
) -> None:
    b, topic = fresh_topic()
    tx_topic = unique("tx")
    b.create_topic(tx_topic, "TRANSACTION", 2)
    with ferrymq.Producer(b.endpoints, topics=[topic, tx_topic]) as p:
        p.send_batch([ferrymq.Message(topic, b"x%d" % i) for i in range(20)], packed=True)
        with p.begin_transaction() as tx:
            tx.send(ferrymq.Message(tx_topic, b"half-1"))
            tx.send(ferrymq.Message(tx_topic, b"half-2"))
        stats = p.stats()
    ops = stats["operations"]
    assert (ops["send"]["calls"], ops["send"]["messages"]) == (3, 22)
    end = ops["end_transaction"]
    assert (end["type"], end["calls"], end["messages"], end["failed"]) == ("send", 1, 2, 0)
    assert stats["sent"] == 22


def test_failures_are_counted_by_error_type_and_retries_apart(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic()
    with ferrymq.Producer(b.endpoints, topics=[topic], max_attempts=3) as p:
        b.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=2)
        p.send(ferrymq.Message(topic, b"after two refusals"))
        b.inject_status(0, "ILLEGAL_MESSAGE_TAG", rpc="SendMessage", count=1)
        with pytest.raises(ferrymq.FerryError):
            p.send(ferrymq.Message(topic, b"refused"))
        stats = p.stats()
    assert (stats["sent"], stats["failed"], stats["retried"]) == (1, 1, 2)
    send = stats["operations"]["send"]
    assert (send["calls"], send["failed"], send["failed_messages"]) == (2, 1, 1)
    assert send["errors"] == {"ILLEGAL_MESSAGE_TAG": 1}
    assert send["retried"] == 2


def test_jmq_failures_are_counted(jmq_broker: EmbeddedBroker, jmq_topic: str) -> None:
    with ferrymq.Producer(jmq_broker.jmq_endpoint, app="test_app", token="test_token") as p:
        p.send(ferrymq.Message(jmq_topic, b"connected"))
        jmq_broker.jmq.fail_next(6, command="PRODUCE_MESSAGE", times=1)  # not retriable
        with pytest.raises(ferrymq.BrokerError):
            p.send(ferrymq.Message(jmq_topic, b"refused"))
        p.send(ferrymq.Message(jmq_topic, b"stored"))
        stats = p.stats()
    assert (stats["sent"], stats["failed"], stats["retried"]) == (2, 1, 0)
    assert stats["operations"]["send"]["errors"] == {"CN_PARAM_ERROR": 1}


async def test_the_publisher_shows_its_sends_once_and_its_own_figures(backend: Backend) -> None:
    with backend.producer() as producer:
        async with ferrymq.AsyncPublisher(producer, max_in_flight=8) as pub:
            flights = [await pub.publish_async(backend.topic, b"%d" % i) for i in range(30)]
            running = pub.stats()
            assert running["state"] == "running"
            assert running["max_in_flight"] == 8
        for f in flights:
            await f
        stats = pub.stats()
        assert producer.stats()["sent"] == 30
    assert stats["sent"] == 30
    assert stats["operations"]["send"]["messages"] == 30
    assert (stats["failed"], stats["queued"], stats["in_flight_messages"]) == (0, 0, 0)
    assert stats["state"] == "finished"
    assert "pending" not in stats
    assert_latencies(stats["operations"]["send"])


async def test_publisher_retries_are_counted(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic()
    retry = ferrymq.RetryConfig(attempts=3, backoff=(0.01,))
    with ferrymq.Producer(b.endpoints, topics=[topic], max_attempts=1) as producer:
        b.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=1)
        async with ferrymq.AsyncPublisher(producer, retry=retry) as pub:
            flight = await pub.publish_async(topic, b"x")
            await flight
        stats = pub.stats()
    assert (stats["sent"], stats["failed"], stats["retried"]) == (1, 1, 1)
    assert stats["operations"]["send"]["errors"] == {"TOO_MANY_REQUESTS": 1}


# -- the periodic callback ------------------------------------------------------------------


class Calls:
    def __init__(self, fail_first: bool = False) -> None:
        self.got: list[dict[str, Any]] = []
        self.threads: set[str] = set()
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def __call__(self, stats: dict[str, Any]) -> None:
        with self.lock:
            self.got.append(stats)
            self.threads.add(threading.current_thread().name)
            if self.fail_first and len(self.got) == 1:
                raise RuntimeError("the callback failed")

    def count(self) -> int:
        with self.lock:
            return len(self.got)

    def last(self) -> dict[str, Any]:
        with self.lock:
            return self.got[-1] if self.got else {}


def test_the_producer_callback_runs_until_close(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls(fail_first=True)
    caplog.set_level(logging.ERROR, logger="ferrymq")
    p = backend.producer(stats_callback=calls, stats_interval=0.05)
    with p:
        p.send(ferrymq.Message(backend.topic, b"x"))
        wait_for(
            "two stats calls, the last after the send",
            lambda: calls.count() >= 2 and calls.last().get("sent") == 1,
        )
    reporter = p._stats_reporter
    assert reporter is not None
    assert not reporter.running
    n = calls.count()
    assert n >= 2  # the first raised, the next came all the same
    assert any("stats_callback raised" in r.getMessage() for r in caplog.records)
    assert calls.threads
    assert threading.current_thread().name not in calls.threads
    assert calls.count() == n


def test_the_consumers_callbacks_run_until_close(backend: Backend) -> None:
    simple_calls, push_calls = Calls(), Calls()
    simple = backend.simple_consumer(stats_callback=simple_calls, stats_interval=0.05)
    push = backend.push_consumer(
        lambda m: ferrymq.ConsumeResult.SUCCESS,
        stats_callback=push_calls,
        stats_interval=0.05,
    )
    with simple, push:
        wait_for("calls of both", lambda: simple_calls.count() >= 2 and push_calls.count() >= 2)
    assert "received" in simple_calls.got[-1]
    assert "consumed_ok" in push_calls.got[-1]
    for c in (simple, push):
        reporter = c._stats_reporter
        assert reporter is not None
        assert not reporter.running


async def test_the_publisher_callback_runs_until_drained(backend: Backend) -> None:
    calls = Calls()
    with backend.producer() as producer:
        pub = ferrymq.AsyncPublisher(producer, stats_callback=calls, stats_interval=0.05)
        async with pub:
            await pub.publish_async(backend.topic, b"x")
            await async_wait_for("a call", lambda: calls.count() >= 1)
        reporter = pub._stats_reporter
        assert reporter is not None
        assert not reporter.running
    assert "queued" in calls.got[-1]


def test_stats_arguments_are_checked() -> None:
    make: list[Callable[..., object]] = [
        lambda **kw: ferrymq.Producer("127.0.0.1:1", **kw),
        lambda **kw: ferrymq.SimpleConsumer("127.0.0.1:1", "g", **kw),
        lambda **kw: ferrymq.PushConsumer(
            "127.0.0.1:1", "g", subscriptions="t", listener=print, **kw
        ),
    ]
    for m in make:
        for bad in (0, -1, float("nan"), float("inf"), "5", True):
            with pytest.raises(ferrymq.InvalidArgumentError, match="stats_interval"):
                m(stats_callback=print, stats_interval=bad)
        with pytest.raises(ferrymq.InvalidArgumentError, match="stats_callback"):
            m(stats_callback=5)
        with pytest.raises(ferrymq.InvalidArgumentError, match="stats_interval"):
            m(stats_interval=1.0)
    p = ferrymq.Producer("127.0.0.1:1")
    for bad_q in ([0], [100], "50", [50.0] * 17):
        with pytest.raises(ferrymq.InvalidArgumentError, match="percentiles"):
            p.stats(bad_q)  # type: ignore[arg-type]
    with pytest.raises(ferrymq.InvalidArgumentError, match="stats_interval"):
        ferrymq.AsyncPublisher(p, stats_callback=print, stats_interval=0)
