"""``stats()`` of ``SimpleConsumer`` and ``PushConsumer`` over every protocol (``backend``): the
counts of receives, acks, nacks and listener calls, their latency percentiles, and failures
counted by error type (the embedded broker's fault injection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from backends import Backend
from ferrymq.testing import EmbeddedBroker
from stats_checks import assert_latencies, receive_all
from waiting import first_batch, wait_for

FreshTopic = Callable[..., tuple[EmbeddedBroker, str]]


def test_simple_consumer_stats_count_received_acked_and_nacked(backend: Backend) -> None:
    sent = backend.send(20)
    c = backend.simple_consumer()
    before = c.stats()
    assert (before["received"], before["acked"], before["failed"]) == (0, 0, 0)
    assert before["client"] is None
    assert before["operations"] == {}
    with c:
        (first,) = first_batch(lambda: c.receive(1))
        c.change_invisible_duration(first, 0.2)
        got = receive_all(c, len(sent))
        stats = c.stats()
    assert sorted(m.body for m in got) == sorted(sent)
    assert stats["received"] == 21  # the one made visible again came back
    assert stats["acked"] == 20
    assert stats["nacked"] == 1
    assert (stats["failed"], stats["in_flight"], stats["overflowed"]) == (0, 0, 0)
    assert stats["client"]["system"] == {"rocketmq": "rocketmq", "jmq": "jmq"}.get(
        backend.protocol, "nats"
    )
    assert stats["client"]["group"] == backend.group
    assert stats["client"]["server_port"] > 0
    ops = stats["operations"]
    assert set(ops) == {"receive", "ack", "change_invisible_duration"}
    assert ops["receive"]["type"] == "receive"
    assert ops["receive"]["messages"] == 21
    assert ops["receive"]["calls"] >= 2
    assert ops["ack"]["type"] == ops["change_invisible_duration"]["type"] == "settle"
    assert ops["ack"]["messages"] == 20
    assert ops["change_invisible_duration"]["calls"] == 1
    for op in ops.values():
        assert (op["failed"], op["errors"], op["in_flight"]) == (0, {}, 0)
        assert_latencies(op)
    # Closed: the figures stay.
    assert c.stats()["acked"] == 20


def test_push_consumer_stats_count_receives_acks_and_listener_calls(backend: Backend) -> None:
    sent = backend.send(30)
    failed_once: set[bytes] = set()

    def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        if m.body == sent[0] and m.body not in failed_once:
            failed_once.add(m.body)
            return ferrymq.ConsumeResult.FAILURE
        return ferrymq.ConsumeResult.SUCCESS

    with backend.push_consumer(listener, consumption_threads=2) as pc:
        wait_for(
            "every message acked and the cache empty",
            lambda: pc.stats()["acked"] == 30 and pc.stats()["cached_messages"] == 0,
        )
        stats = pc.stats(percentiles=[50, 99.9])
    # The existing counters stay, and agree with the operations.
    assert (stats["received"], stats["consumed_ok"], stats["consumed_failed"]) == (31, 30, 1)
    assert stats["nacked"] == 1
    ops = stats["operations"]
    assert ops["receive"]["messages"] - ops["receive"]["failed_messages"] == 31
    assert ops["ack"]["messages"] == 30
    assert ops["nack"]["messages"] == 1
    process = ops["process"]
    assert process["type"] == "process"
    assert (process["calls"], process["messages"], process["failed"]) == (31, 31, 1)
    assert process["errors"] == {"consume_failure": 1}
    assert stats["failed"] >= 1
    assert stats["client"]["group"] == backend.group
    for name in ("receive", "ack", "process"):
        assert_latencies(ops[name], ("p50", "p99.9"))
        assert "p90" not in ops[name]["latency_ms"]
    # Closed: the figures stay.
    after = pc.stats()
    assert after["operations"]["ack"]["messages"] == 30
    assert after["in_flight"] == 0


def _group(b: EmbeddedBroker, unique: Callable[[str], str]) -> str:
    g = unique("g")
    b.create_group(g)
    return g


def test_failed_calls_are_counted_by_the_brokers_status_name(
    fresh_topic: FreshTopic, unique: Callable[[str], str]
) -> None:
    b, topic = fresh_topic(queues=1)
    group = _group(b, unique)
    with ferrymq.Producer(b.endpoints) as p:
        p.send(ferrymq.Message(topic, b"x"))
    with ferrymq.SimpleConsumer(b.endpoints, group, subscriptions=topic, await_duration=1.0) as c:
        b.inject_status(0, "TOO_MANY_REQUESTS", rpc="ReceiveMessage", count=1)
        with pytest.raises(ferrymq.FerryError):
            c.receive(4)
        (m,) = first_batch(lambda: c.receive(4))
        b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage", count=1)
        with pytest.raises(ferrymq.FerryError):
            c.ack(m)
        c.ack(m)
        stats = c.stats()
    ops = stats["operations"]
    assert ops["receive"]["errors"] == {"TOO_MANY_REQUESTS": 1}
    assert ops["receive"]["failed"] == 1
    assert ops["ack"]["errors"] == {"INTERNAL_SERVER_ERROR": 1}
    assert (ops["ack"]["calls"], ops["ack"]["failed_messages"]) == (2, 1)
    assert (stats["received"], stats["acked"], stats["failed"]) == (1, 1, 2)
    assert_latencies(ops["ack"])


def test_push_consumer_counts_a_failed_ack_it_retried(
    fresh_topic: FreshTopic, unique: Callable[[str], str]
) -> None:
    b, topic = fresh_topic(queues=1)
    group = _group(b, unique)
    with ferrymq.Producer(b.endpoints) as p:
        for i in range(5):
            p.send(ferrymq.Message(topic, b"m%d" % i))
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage", count=1)
    with ferrymq.PushConsumer(
        b.endpoints, group, subscriptions=topic, listener=lambda m: None
    ) as pc:
        wait_for("every message acked", lambda: pc.stats()["acked"] == 5)
        stats = pc.stats()
    ack = stats["operations"]["ack"]
    assert ack["errors"] == {"INTERNAL_SERVER_ERROR": 1}
    assert ack["messages"] - ack["failed_messages"] == 5
    assert stats["settle_retries"] >= 1


@pytest.mark.parametrize(
    ("percentiles", "why"),
    [
        ([0], "0"),
        ([100], "100"),
        ([50, -1], "-1"),
        ([float("nan")], "NaN"),
        ([50] * 17, "at most 16"),
        ("50", "not a str"),
        (["a"], "sequence of numbers"),
        (50, "sequence of numbers"),
    ],
)
def test_bad_percentiles_are_refused_naming_the_parameter(percentiles: Any, why: str) -> None:
    simple = ferrymq.SimpleConsumer("127.0.0.1:1", "g", subscriptions="t")
    push = ferrymq.PushConsumer("127.0.0.1:1", "g", subscriptions="t", listener=lambda m: None)
    for c in (simple, push):
        with pytest.raises(ferrymq.InvalidArgumentError, match=f"percentiles: .*{why}"):
            c.stats(percentiles=percentiles)
    # Good ones, before the start: no figures yet.
    assert simple.stats(percentiles=(1, 99.99))["operations"] == {}
    assert push.stats()["client"] is None
