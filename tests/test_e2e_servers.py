"""The producer and both consumers end to end, on BOTH servers: the embedded broker and a real
Apache RocketMQ 5 (name server + local-mode proxy from ``scripts/rocketmq-server``).

Only ferrymq's public API is used (no broker internals), so the same test body proves the same
behaviour on both. Waits poll a condition with a generous deadline; nothing asserts timing.
Durations respect the real proxy's floors (invisible durations >= 10 s on receive).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import ferrymq
from ferrymq import ConsumeResult, Message, MessageView, Producer, TransactionResolution
from ferrymq.testing import EmbeddedBroker
from servers import Collector, EmbeddedServer, RealServer, Server, started
from waiting import receive_until, wait_for


def simple_consumer(
    server: Server, closing: list[Any], group: str, topic: str, tag: str = "*"
) -> ferrymq.SimpleConsumer:
    """A started simple consumer of ``topic``'s messages with ``tag``, closed at the end of the
    test."""
    consumer = ferrymq.SimpleConsumer(
        server.endpoints, group, subscriptions={topic: tag}, await_duration=5
    )
    return started(closing, consumer)


def test_send_receive_keeps_keys_tag_and_properties(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    sent = {}
    for i in range(5):
        m = Message(
            topic,
            b"body-%d" % i,
            keys=[f"k{i}", f"order-{i}"],
            tag="wanted",
            properties={"n": str(i), "source": "e2e"},
        )
        sent[producer.send(m).message_id] = m
    # send_batch: one request per message, so every message keeps its own id and metadata.
    batch = [
        Message(topic, b"batch-%d" % i, keys=[f"b{i}"], tag="wanted", properties={"n": f"b{i}"})
        for i in range(5)
    ]
    for r, m in zip(producer.send_batch(batch), batch, strict=True):
        sent[r.message_id] = m
    producer.send(Message(topic, b"filtered out", tag="other"))
    assert len(sent) == 10
    consumer = simple_consumer(server, closing, group, topic, "wanted")
    got = receive_until(consumer, 10)
    assert sorted(m.message_id for m in got) == sorted(sent)
    for m in got:
        s = sent[m.message_id]
        assert (m.topic, m.body, m.tag, m.keys, m.properties) == (
            topic,
            s.body,
            "wanted",
            s.keys,
            s.properties,
        )
        assert m.delivery_attempt == 1
        assert not m.corrupted
    # Everything acked, the other tag filtered out: nothing more comes.
    assert consumer.receive(32, 15) == []


def test_packed_batches_deliver_every_body_under_one_id(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    """send_batch(packed=True): many messages per SendMessage, stored as one RocketMQ batch. On
    both servers every body arrives with the shared tag, keys and properties, under the id and
    at the offset its receipt names (consecutive offsets of one queue)."""
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    props = {"source": "packed"}
    batch = [
        Message(topic, b"p-%04d" % i, tag="wanted", keys=["k"], properties=props)
        for i in range(300)
    ]
    receipts = producer.send_batch(batch, packed=True)
    assert len(receipts) == 300
    by_body = {m.body: r for m, r in zip(batch, receipts, strict=True)}
    consumer = simple_consumer(server, closing, group, topic, "wanted")
    got = receive_until(consumer, 300)
    assert sorted(m.body for m in got) == sorted(by_body)
    for m in got:
        r = by_body[m.body]
        assert (m.message_id, m.offset) == (r.message_id, r.offset)
        assert (m.tag, list(m.keys), m.properties) == ("wanted", ["k"], props)
    # One request, one queue: the proxy picks it (not always the client's choice, which the
    # receipt names), the embedded broker takes the client's.
    assert len({m.queue_id for m in got}) == 1
    if isinstance(server, EmbeddedServer):
        assert got[0].queue_id == receipts[0].queue_id


def test_fifo_order_per_message_group(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("fifo"), unique("g")
    server.setup({topic: "FIFO"}, fifo_groups=[group])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    groups = [f"order-{i}" for i in range(4)]
    for i in range(20):
        g = groups[i % len(groups)]
        producer.send(Message(topic, f"{g}:{i}".encode(), message_group=g))
    # One batch holding every group: each group is sent in order, the groups side by side.
    batch = [
        Message(topic, f"{g}:{i}".encode(), message_group=g)
        for i in range(20, 40)
        for g in [groups[i % len(groups)]]
    ]
    receipts = producer.send_batch(batch)
    for g in groups:
        mine = [r for r, m in zip(receipts, batch, strict=True) if m.message_group == g]
        assert len({r.queue_id for r in mine}) == 1
        assert [r.offset for r in mine] == sorted(r.offset for r in mine)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def listener(m: MessageView) -> ConsumeResult:
        g, _, i = m.body.decode().partition(":")
        assert m.message_group == g
        with lock:
            seen[g].append(int(i))
        return ConsumeResult.SUCCESS

    consumer = ferrymq.PushConsumer(
        server.endpoints, group, subscriptions={topic: "*"}, listener=listener
    )
    closing.append(consumer)
    consumer.start()
    wait_for("every message", lambda: sum(len(v) for v in seen.values()) >= 40)
    assert consumer.fifo is True
    for k, g in enumerate(groups):
        assert seen[g] == list(range(k, 40, len(groups))), g


def test_delayed_delivery(server: Server, unique: Callable[[str], str], closing: list[Any]) -> None:
    topic, group = unique("delay"), unique("g")
    server.setup({topic: "DELAY"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    due = time.time() + 4
    receipt = producer.send(Message(topic, b"later", delivery_time=due))
    consumer = simple_consumer(server, closing, group, topic)
    got = receive_until(consumer, 1)
    received_at = time.time()
    assert [m.message_id for m in got] == [receipt.message_id]
    # Never delivered before it was due (second precision on the wire).
    assert received_at >= due - 1.0
    ts = got[0].delivery_timestamp
    assert ts is not None
    assert abs(ts - due) < 1.5


def test_transactions_commit_rollback_and_orphan_check(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("tx"), unique("g")
    server.setup({topic: "TRANSACTION"}, [group])
    checked: list[str] = []

    def checker(view: MessageView) -> TransactionResolution:
        # Answer from the transaction's own state, as a real checker must: the check is
        # at-least-once, and a real RocketMQ 5.3 sometimes also checks half messages it has
        # already committed or rolled back (seen in CI); a blanket COMMIT would then publish
        # the rolled-back message.
        checked.append(view.message_id)
        if view.body == b"rollback":
            return TransactionResolution.ROLLBACK
        return TransactionResolution.COMMIT

    producer = Producer(server.endpoints, topics=[topic], transaction_checker=checker).start()
    closing.append(producer)
    with producer.begin_transaction() as tx:
        committed = tx.send(Message(topic, b"commit", keys=["c"])).message_id
    rolled = producer.begin_transaction()
    rolled.send(Message(topic, b"rollback"))
    rolled.rollback()
    orphan_tx = producer.begin_transaction()
    orphan = orphan_tx.send(Message(topic, b"orphan", tag="o")).message_id
    # Neither committed nor rolled back: the server asks the producer (after ~6 s on the proxy).
    consumer = simple_consumer(server, closing, group, topic)
    # Such a late check of the committed message, answered COMMIT, delivers it a second time
    # (at-least-once): compare distinct ids.
    got: list[MessageView] = []
    deadline = time.monotonic() + 90
    while {m.message_id for m in got} != {committed, orphan} and time.monotonic() < deadline:
        got += receive_until(consumer, 1, timeout=max(1.0, deadline - time.monotonic()))
    assert {m.message_id for m in got} == {committed, orphan}
    assert {m.body for m in got} == {b"commit", b"orphan"}
    assert orphan in checked
    # The rolled-back message never comes. A further late check of the committed or the orphan
    # message may deliver that one once more (at-least-once, seen in CI): only those ids may.
    late = receive_until(consumer, 10_000, timeout=10)
    assert {m.message_id for m in late} <= {committed, orphan}
    assert b"rollback" not in {m.body for m in late}


def test_simple_consumer_ack_and_change_invisible_duration(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    keep, retry = (producer.send(Message(topic, b)).message_id for b in (b"keep", b"retry"))
    consumer = simple_consumer(server, closing, group, topic)
    first = receive_until(consumer, 2, ack=False, invisible=60)
    by_id = {m.message_id: m for m in first}
    assert set(by_id) == {keep, retry}
    consumer.ack(by_id[keep])
    # Make the other one visible again soon: it comes back as the second delivery.
    consumer.change_invisible_duration(by_id[retry], timedelta(seconds=1))
    again = receive_until(consumer, 1, ack=False, invisible=60)
    assert [(m.message_id, m.delivery_attempt) for m in again] == [(retry, 2)]
    # Extending the invisibility returns a new receipt handle that the ack then uses.
    consumer.change_invisible_duration(again[0], 30)
    consumer.ack(again[0])
    assert consumer.receive(32, 15) == []


def test_push_consumer_moves_a_failing_message_to_the_dlq(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group, dlq_reader = unique("t"), unique("g"), unique("dlq")
    server.setup({topic: "NORMAL"}, [group], max_attempts=3)
    server.setup(groups=[dlq_reader])
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    poison = producer.send(Message(topic, b"poison", keys=["p"])).message_id
    good = producer.send(Message(topic, b"good")).message_id
    attempts: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def listener(m: MessageView) -> ConsumeResult:
        with lock:
            attempts[m.message_id].append(m.delivery_attempt)
        return ConsumeResult.FAILURE if m.message_id == poison else ConsumeResult.SUCCESS

    consumer = ferrymq.PushConsumer(
        server.endpoints, group, subscriptions={topic: "*"}, listener=listener
    )
    closing.append(consumer)
    consumer.start()
    # Three deliveries (max attempts 3, back-off 1 s then 5 s), then the consumer forwards it.
    t0 = time.monotonic()
    wait_for("three attempts", lambda: len(attempts[poison]) >= 3, timeout=90)
    t3 = time.monotonic()
    wait_for("good acked", lambda: consumer.stats()["acked"] >= 1)
    # The dead letter is readable from the group's DLQ topic.
    dlq = f"%DLQ%{group}"
    reader = ferrymq.SimpleConsumer(
        server.endpoints, dlq_reader, subscriptions={dlq: "*"}, await_duration=5
    )
    closing.append(reader)
    deadline = time.monotonic() + 90
    while True:
        try:
            reader.start()
            break
        except ferrymq.BrokerError as e:  # the DLQ topic appears with the first dead letter
            if time.monotonic() > deadline or e.code_name != "TOPIC_NOT_FOUND":
                raise
            time.sleep(2)
    t_route = time.monotonic()
    dead = receive_until(reader, 1, timeout=90)
    print(
        f"{server.kind}: 3 attempts after {t3 - t0:.1f} s, DLQ route after {t_route - t3:.1f} s, "
        f"dead letter read after {time.monotonic() - t_route:.1f} s"
    )
    assert [(m.message_id, m.body, m.keys) for m in dead] == [(poison, b"poison", ("p",))]
    assert attempts[poison][:3] == [1, 2, 3]
    assert attempts[good] == [1]
    time.sleep(2)
    assert len(attempts[poison]) == 3  # not delivered again


# -- a server restart in the middle of a run -------------------------------------------------


def _restart(server: Server) -> None:
    if isinstance(server, RealServer):
        server.stop()
        server.start()
    else:
        assert isinstance(server, EmbeddedServer)
        server.broker.set_unavailable(0, "refuse")
        time.sleep(3)
        server.broker.restart(0)
        server.broker.set_unavailable(0, None)


@pytest.fixture
def restart_server(
    request: pytest.FixtureRequest, make_broker: Callable[..., EmbeddedBroker]
) -> Server:
    # The embedded side gets a private broker: restarting the session one would disturb others.
    if request.param == "embedded":
        return EmbeddedServer(make_broker())
    real: RealServer = request.getfixturevalue("rocketmq_server")
    return real


@pytest.mark.restarts_server
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "restart_server", ["embedded", pytest.param("real", marks=pytest.mark.rocketmq)], indirect=True
)
def test_clients_recover_from_a_server_restart_without_losing_messages(
    restart_server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    server = restart_server
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[topic], request_timeout=5))
    pushed = Collector(server.endpoints, group, topic, closing)
    acked: list[str] = []  # sends the server confirmed
    failed: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                acked.append(producer.send(Message(topic, b"m%d" % i)).message_id)
            except ferrymq.FerryError as e:  # while the server is down
                failed.append(type(e).__name__)
                time.sleep(0.5)
            i += 1
            time.sleep(0.02)

    sender = threading.Thread(target=produce)
    sender.start()
    try:
        wait_for("traffic before", lambda: len(pushed.ids()) >= 20)
        t0 = time.monotonic()
        _restart(server)
        t_up = time.monotonic()
        before = len(acked)
        # The same producer and consumer, untouched: sends succeed again and new messages
        # arrive.
        wait_for("a send after the restart", lambda: len(acked) > before, timeout=240)
        t_send = time.monotonic()
        wait_for("sends after the restart", lambda: len(acked) >= before + 20, timeout=240)
    finally:
        stop.set()
        sender.join()
    wait_for(
        "every confirmed message",
        lambda: set(acked) <= pushed.ids(),
        timeout=240,
    )
    received = pushed.ids()
    lost = set(acked) - received
    print(
        f"{server.kind}: restart took {t_up - t0:.1f} s; first send {t_send - t_up:.1f} s after "
        f"it was back; {len(acked)} sends confirmed, {len(failed)} failed while down, "
        f"{len(received)} distinct messages received, {len(lost)} lost"
    )
    assert not lost
    assert len(acked) >= 40
