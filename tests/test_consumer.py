"""RocketMQ consumers (simple and push) against the embedded broker.

Every test publishes real messages with the ferrymq producer and consumes them over loopback
gRPC; nothing is mocked. Waits poll a condition with a generous deadline; no assertion depends
on timing.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ferrymq
from _nats_server import HoldingProxy
from ferrymq.testing import EmbeddedBroker
from servers import FreshTopic
from waiting import InThread, async_wait_for, first_batch, receive_until, wait_for

Send = Callable[..., list[str]]


def make_sender(endpoints: str) -> tuple[Send, Callable[[], None]]:
    producers: dict[str, ferrymq.Producer] = {}

    def send(topic: str, n: int, *, groups: int = 0, tag: str | None = None) -> list[str]:
        """Send ``n`` messages to ``topic`` (round-robin over ``groups`` message groups)."""
        p = producers.get(topic)
        if p is None:
            p = ferrymq.Producer(endpoints, topics=[topic]).start()
            producers[topic] = p
        ids = []
        if groups:
            for i in range(n):
                g = f"g{i % groups}"
                m = ferrymq.Message(topic, f"{g}:{i}".encode(), message_group=g, tag=tag)
                ids.append(p.send(m).message_id)
        else:
            msgs = [ferrymq.Message(topic, f"m{i}".encode(), tag=tag) for i in range(n)]
            for start in range(0, n, 64):
                ids.extend(r.message_id for r in p.send_batch(msgs[start : start + 64]))
        return ids

    def close() -> None:
        for p in producers.values():
            p.close()

    return send, close


@pytest.fixture
def send(broker: EmbeddedBroker) -> Iterator[Send]:
    s, close = make_sender(broker.endpoints)
    yield s
    close()


@pytest.fixture
def topic(broker: EmbeddedBroker, unique: Callable[[str], str]) -> str:
    name = unique("topic")
    broker.create_topic(name, "NORMAL", 4)
    return name


def new_group(broker: EmbeddedBroker, unique: Callable[[str], str], **kwargs: Any) -> str:
    name = unique("group")
    kwargs.setdefault("retry_backoff", [0.1, 0.2, 0.3])
    broker.create_group(name, **kwargs)
    return name


Private = tuple[EmbeddedBroker, str, str, Send]


@pytest.fixture
def private(
    fresh_topic: FreshTopic, unique: Callable[[str], str]
) -> Iterator[Callable[..., Private]]:
    """``private(queues, kind, prefix, group, **broker_options)``: a broker of its own (for
    faults) with a fresh topic, a fresh group (``group``: its options) and a sender (closed at
    the end of the test)."""
    closers: list[Callable[[], None]] = []

    def make(
        queues: int, kind: str = "NORMAL", prefix: str = "topic", group: Any = None, **options: Any
    ) -> Private:
        b, topic = fresh_topic(kind, queues=queues, prefix=prefix, **options)
        send, close = make_sender(b.endpoints)
        closers.append(close)
        return b, topic, new_group(b, unique, **(group or {})), send

    yield make
    for close in closers:
        close()


class Recorder:
    """A listener that records deliveries and fails those ``fail`` says to."""

    def __init__(self, fail: Callable[[ferrymq.MessageView], bool] | None = None) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[tuple[str, int, str | None, bytes]] = []
        self.fail = fail

    def __call__(self, m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        with self.lock:
            self.deliveries.append((m.message_id, m.delivery_attempt, m.message_group, m.body))
        if self.fail is not None and self.fail(m):
            return ferrymq.ConsumeResult.FAILURE
        return ferrymq.ConsumeResult.SUCCESS

    def ids(self) -> set[str]:
        with self.lock:
            return {d[0] for d in self.deliveries}

    def count(self) -> int:
        with self.lock:
            return len(self.deliveries)


# -- simple consumer -------------------------------------------------------------------------


def test_simple_consumer_receives_filters_and_acks(
    broker: EmbeddedBroker, send: Send, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    tagged = set(send(topic, 10, tag="TagA"))
    send(topic, 10, tag="TagB")
    with ferrymq.SimpleConsumer(
        broker.endpoints, group, subscriptions={topic: "TagA || TagC"}, await_duration=1.0
    ) as c:
        assert c.client_id
        got = receive_until(c, 10, invisible=30, timeout=20)
        assert {(m.tag, m.topic, m.delivery_attempt) for m in got} == {("TagA", topic, 1)}
        assert {m.message_id for m in got} == tagged
        # Everything was acked: nothing comes back.
        assert c.receive(max_messages=8, invisible_duration=30) == []


def test_unacked_message_is_redelivered_and_new_receipt_handle_is_used(
    broker: EmbeddedBroker, send: Send, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    [sent] = send(topic, 1)
    with ferrymq.SimpleConsumer(
        broker.endpoints, group, subscriptions=[topic], await_duration=1.0
    ) as c:
        (first,) = first_batch(lambda: c.receive(1, 0.5))
        assert first.message_id == sent
        assert first.delivery_attempt == 1
        # Not acked: visible again after 0.5 s, as the second delivery.
        (second,) = first_batch(lambda: c.receive(1, 0.5))
        assert second.message_id == sent
        assert second.delivery_attempt == 2
        # Extend its invisibility; the ack must then use the new receipt handle.
        c.change_invisible_duration(second, 30)
        c.ack(second)
        assert c.receive(1, 0.5) == []
        # The first delivery's handle is stale: like a real RocketMQ proxy, the broker answers
        # OK and nothing happens (tests/test_conformance.py pins this).
        c.ack(first)
        assert c.receive(1, 0.5) == []


def test_sql_filters_reach_the_broker_as_sql(
    broker: EmbeddedBroker, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    f = ferrymq.FilterExpression.sql("a > 1 AND b = 'x'")
    assert (f.type, f.expression) == ("SQL", "a > 1 AND b = 'x'")
    with ferrymq.SimpleConsumer(
        broker.endpoints, group, subscriptions={topic: f}, await_duration=1.0
    ) as c:
        # The embedded broker, like a proxy without enablePropertyFilter, refuses SQL92.
        with pytest.raises(ferrymq.BrokerError) as e:
            c.receive(1, 10)
        assert e.value.code_name == "ILLEGAL_FILTER_EXPRESSION"
        assert not e.value.retriable


def test_bad_arguments_name_the_field(broker: EmbeddedBroker, topic: str) -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^expression"):
        ferrymq.FilterExpression.tag("A || ")
    with pytest.raises(ferrymq.InvalidArgumentError, match="filter"):
        ferrymq.SimpleConsumer(broker.endpoints, "g", subscriptions={topic: "A*"})
    with pytest.raises(ferrymq.InvalidArgumentError, match="subscriptions"):
        ferrymq.SimpleConsumer(broker.endpoints, "g", subscriptions={"bad topic": "*"})
    with pytest.raises(ferrymq.InvalidArgumentError, match="group"):
        ferrymq.SimpleConsumer(broker.endpoints, " ", subscriptions=[topic])
    with pytest.raises(ferrymq.InvalidArgumentError, match="listener"):
        ferrymq.PushConsumer(broker.endpoints, "g", subscriptions=[topic], listener=42)
    with pytest.raises(ferrymq.InvalidArgumentError, match="max_cache_messages"):
        ferrymq.PushConsumer(
            broker.endpoints, "g", subscriptions=[topic], listener=print, max_cache_messages=0
        )
    with pytest.raises(ferrymq.InvalidArgumentError, match="subscriptions"):
        ferrymq.PushConsumer(broker.endpoints, "g", subscriptions={}, listener=print)
    c = ferrymq.SimpleConsumer(broker.endpoints, "g", subscriptions=[topic])
    with pytest.raises(ferrymq.ClientClosedError, match="not started"):
        c.receive(1, 10)
    with pytest.raises(ferrymq.InvalidArgumentError, match="invisible_duration"):
        c.receive(1, -1)
    with pytest.raises(ferrymq.InvalidArgumentError, match="message"):
        c.ack("not a message")  # type: ignore[arg-type]


# -- push consumer ---------------------------------------------------------------------------


@pytest.mark.parametrize("accelerator", [False, True])
def test_fifo_order_under_failures_and_dlq(
    private: Callable[..., Private], accelerator: bool
) -> None:
    # The embedded broker does not wake a waiting long poll when an ack unblocks a FIFO group,
    # so receives that find every group blocked wait for the whole long-polling time: keep it
    # short.
    b, topic, group, send = private(
        2, "FIFO", "fifo", {"fifo": True, "max_delivery_attempts": 3}, long_polling_max=1.0
    )
    sent = send(topic, 30, groups=3)
    # Message 7 (group g1) fails twice then succeeds; message 11 (group g2) always fails.
    flaky, poison = sent[7], sent[11]
    rec = Recorder(
        fail=lambda m: m.message_id == poison or (m.message_id == flaky and m.delivery_attempt < 3)
    )
    with ferrymq.PushConsumer(
        b.endpoints,
        group,
        subscriptions=[topic],
        listener=rec,
        fifo_accelerator=accelerator,
    ) as c:
        wait_for(
            "settled",
            lambda: c.stats()["acked"] == 29 and c.stats()["dead_lettered"] == 1,
            timeout=90,
        )
        assert c.fifo is True
        stats = c.stats()
    assert [d["message_id"] for d in b.dead_letters(group)] == [poison]
    assert stats["local_retries"] == 2 + 2
    assert stats["nacked"] == 0
    # Per message group, the first delivery of each message follows the send order, and a
    # message's retries come before the next message of its group.
    order = {mid: i for i, mid in enumerate(sent)}
    by_group: dict[str | None, list[int]] = defaultdict(list)
    for mid, _attempt, g, _body in rec.deliveries:
        by_group[g].append(order[mid])
    assert set(by_group) == {"g0", "g1", "g2"}
    for g, seq in by_group.items():
        assert seq == sorted(seq), f"group {g} out of order: {seq}"
    assert sorted(a for m, a, _, _ in rec.deliveries if m == flaky) == [1, 2, 3]
    assert sorted(a for m, a, _, _ in rec.deliveries if m == poison) == [1, 2, 3]


def test_cache_limits_bound_memory_with_a_slow_listener(
    broker: EmbeddedBroker, send: Send, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    send(topic, 200)

    def slow(m: ferrymq.MessageView) -> None:
        time.sleep(0.005)

    with ferrymq.PushConsumer(
        broker.endpoints,
        group,
        subscriptions=[topic],
        listener=slow,
        consumption_threads=2,
        max_cache_messages=10,
        max_cache_bytes=2_000,
    ) as c:
        wait_for("all acked", lambda: c.stats()["acked"] == 200)
        s = c.stats()
    assert s["max_cached_messages"] <= 10, s
    # Sizes are known after a receive: at most one batch (10 small messages) over the limit.
    assert s["max_cached_bytes"] <= 2_000 + 10 * 200, s
    assert s["cache_full_waits"] > 0, s


def test_throttled_receives_back_off_and_recover(private: Callable[..., Private]) -> None:
    b, topic, group, send = private(2)
    sent = send(topic, 20)
    b.inject_status(0, "TOO_MANY_REQUESTS", rpc="ReceiveMessage", count=5)
    rec = Recorder()
    with ferrymq.PushConsumer(b.endpoints, group, subscriptions=[topic], listener=rec) as c:
        wait_for("all acked", lambda: c.stats()["acked"] == 20)
        s = c.stats()
    assert s["receive_throttled"] == 5, s
    assert s["receive_failures"] == 0, s
    assert rec.ids() == set(sent)


def test_failed_acks_are_retried(private: Callable[..., Private]) -> None:
    b, topic, group, send = private(1)
    send(topic, 10)
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage", count=2)
    rec = Recorder()
    with ferrymq.PushConsumer(b.endpoints, group, subscriptions=[topic], listener=rec) as c:
        wait_for("all acked", lambda: c.stats()["acked"] == 10)
        s = c.stats()
    assert s["settle_retries"] >= 2, s
    # Acked after the retries: no redelivery.
    assert Counter(d[1] for d in rec.deliveries) == {1: 10}


def test_shutdown_loses_nothing(private: Callable[..., Private]) -> None:
    # Messages received but not consumed at close come back after this invisibility.
    b, topic, group, send = private(4, auto_renew_invisible=1.0)
    # Far more than the slow first consumer can finish before it is closed.
    sent = set(send(topic, 2000))
    first = Recorder()

    def slow(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        time.sleep(0.002)
        return first(m)

    c1 = ferrymq.PushConsumer(
        b.endpoints, group, subscriptions=[topic], listener=slow, consumption_threads=4
    )
    c1.start()
    wait_for("some consumed", lambda: first.count() >= 50)
    c1.close()
    s1 = c1.stats()
    # Everything the first consumer consumed was acked before close returned.
    assert s1["acked"] == s1["consumed_ok"] == first.count(), s1
    assert s1["cached_messages"] == 0
    assert first.count() < 2000

    second = Recorder()
    with ferrymq.PushConsumer(b.endpoints, group, subscriptions=[topic], listener=second):
        wait_for("the rest", lambda: (first.ids() | second.ids()) == sent)
    assert first.ids() | second.ids() == sent
    # The first consumer's acks held: none of its messages came back.
    assert not first.ids() & second.ids()


def test_broker_restart_is_survived(private: Callable[..., Private]) -> None:
    b, topic, group, send = private(2)
    rec = Recorder()
    with ferrymq.PushConsumer(b.endpoints, group, subscriptions=[topic], listener=rec) as c:
        before = set(send(topic, 10))
        wait_for("before restart", lambda: rec.ids() >= before)
        b.restart(0)
        # (The producer may see the cut connection once; that is not what is tested here.)
        after: set[str] = set()
        for _ in range(10):
            try:
                after = set(send(topic, 10))
                break
            except ferrymq.FerryError:
                time.sleep(0.5)
        assert after
        wait_for("after restart", lambda: rec.ids() >= after, timeout=60)
        wait_for("acked", lambda: c.stats()["acked"] >= 20, timeout=60)
        # The restarted broker knows the consumer again (settings re-sent).
        assert any(cl["group"] == group for cl in b.clients(0))


def test_verify_message_command_runs_the_listener(
    broker: EmbeddedBroker, send: Send, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    [mid] = send(topic, 1)
    rec = Recorder()
    with ferrymq.PushConsumer(broker.endpoints, group, subscriptions=[topic], listener=rec) as c:
        wait_for("consumed", lambda: c.stats()["acked"] == 1)
        assert c.client_id is not None
        nonce = broker.verify_message(c.client_id, topic, mid)
        wait_for(
            "verify reply",
            lambda: any(r["nonce"] == nonce for r in broker.telemetry_replies()),
        )
        reply = next(r for r in broker.telemetry_replies() if r["nonce"] == nonce)
        assert reply["code"] == 20000, reply
    assert [d[0] for d in rec.deliveries] == [mid, mid]


def test_closed_consumers_refuse_work(
    broker: EmbeddedBroker, topic: str, unique: Callable[[str], str]
) -> None:
    group = new_group(broker, unique)
    c = ferrymq.PushConsumer(broker.endpoints, group, subscriptions=[topic], listener=print)
    c.start()
    c.start()  # idempotent
    c.close()
    c.close()  # idempotent
    with pytest.raises(ferrymq.ClientClosedError):
        c.start()
    s = ferrymq.SimpleConsumer(broker.endpoints, group, subscriptions=[topic])
    s.start()
    s.close()
    with pytest.raises(ferrymq.ClientClosedError, match="closed"):
        s.receive(1, 10)
    assert "closed" in repr(s)


@pytest.fixture(params=["push", "simple"])
def held_start(
    request: pytest.FixtureRequest,
    broker: EmbeddedBroker,
    topic: str,
    unique: Callable[[str], str],
) -> Iterator[tuple[HoldingProxy, ferrymq.PushConsumer | ferrymq.SimpleConsumer]]:
    """A consumer of each kind whose broker answers are held by a proxy: its start cannot
    finish until ``proxy.release()``."""
    group = new_group(broker, unique)
    proxy = HoldingProxy(int(broker.endpoints.rsplit(":", 1)[1]))
    try:
        proxy.hold()
        endpoints = f"127.0.0.1:{proxy.port}"
        c: ferrymq.PushConsumer | ferrymq.SimpleConsumer
        if request.param == "push":
            c = ferrymq.PushConsumer(endpoints, group, subscriptions=[topic], listener=print)
        else:
            c = ferrymq.SimpleConsumer(endpoints, group, subscriptions=[topic])
        yield proxy, c
    finally:
        proxy.close()


def test_close_during_start_leaves_the_consumer_closed(
    held_start: tuple[HoldingProxy, ferrymq.PushConsumer | ferrymq.SimpleConsumer],
) -> None:
    # close() while start() waits for the broker: the start must not leave a running consumer
    # behind (before, the push consumer went on consuming after close() had returned).
    proxy, c = held_start
    started = InThread(c.start)
    wait_for("the consumer to connect to the proxy", lambda: proxy.accepted >= 1)
    c.close()
    proxy.release()
    with pytest.raises(ferrymq.ClientClosedError):
        started.wait(60)
    assert "closed" in repr(c)
    with pytest.raises(ferrymq.ClientClosedError):
        c.start()


def test_a_cancelled_start_async_leaves_the_consumer_startable(
    held_start: tuple[HoldingProxy, ferrymq.PushConsumer | ferrymq.SimpleConsumer],
) -> None:
    # The awaitable of start_async cancelled while the broker's answers are held: the consumer
    # is created again (before, it stayed "starting" and every later start was refused).
    proxy, c = held_start

    async def cancel_start() -> None:
        start = asyncio.ensure_future(c.start_async())
        await async_wait_for("the consumer to reach the proxy", lambda: proxy.accepted >= 1)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start

    asyncio.run(cancel_start())
    # The runtime drops the cancelled start on its own thread, just after.
    wait_for("the cancelled start to be undone", lambda: "created" in repr(c))
    proxy.release()
    c.start()
    assert "running" in repr(c)
    c.close()


EXIT_SCRIPT = """
import sys, time
import ferrymq
from ferrymq.testing import EmbeddedBroker

broker = EmbeddedBroker()
broker.create_topic("t", "NORMAL", 4)
producer = ferrymq.Producer(broker.endpoints, topics=["t"])
producer.start()
for _ in range(40):
    producer.send_batch([ferrymq.Message("t", b"x" * 64) for _ in range(64)])
seen = open(sys.argv[1], "w", buffering=1)

def listener(m):
    seen.write(m.message_id + "\\n")
    time.sleep(0.002)
    return ferrymq.ConsumeResult.SUCCESS

consumer = ferrymq.PushConsumer(
    broker.endpoints, "g", subscriptions={"t": "*"}, listener=listener, consumption_threads=4
)
consumer.start()
time.sleep(0.3)
# Returns with the consumer busy and never closed.
"""


def test_interpreter_exit_closes_a_running_push_consumer(tmp_path: Path) -> None:
    """A program that returns while its push consumer is calling the listener exits cleanly:
    the consumer is closed at exit while Python can still run the callbacks (before, the
    consumption threads took the GIL during finalization and CPython aborted the process)."""
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    for _ in range(3):
        seen = tmp_path / "seen.txt"
        proc = subprocess.run(
            [sys.executable, str(script), str(seen)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Fatal Python error" not in proc.stderr
        assert seen.read_text().count("\n") > 0, "the listener ran before the exit"
