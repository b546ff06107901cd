"""Changes made on the server while clients run, and that the clients must follow without a
restart:

* ``ReconnectEndpoints``: the client drops its connection and opens a new one;
* the periodic route refresh: a queue that becomes writable / readable is used;
* a settings change (body-size limit, retry policy) answered at the next settings sync;
* ``SimpleConsumer.subscribe`` / ``unsubscribe`` on a running consumer.

Each test observes the change through something that stays the same when the client ignores it
(a connection counter, the queue a message lands on, a refused send, a dead letter), so it fails
when the behaviour is broken. Periods are shortened with the client options
(``route_refresh_interval``, ``settings_sync_interval``); nothing sleeps where a condition can
be awaited.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from ferrymq import ConsumeResult, Message, MessageView, Producer
from ferrymq.testing import EmbeddedBroker
from servers import Collector, EmbeddedServer, FreshTopic, RealServer, Server, started
from waiting import wait_for

#: Short periods for the background tasks, so a test sees a change within a second.
FAST: dict[str, float] = {"route_refresh_interval": 0.2, "settings_sync_interval": 0.2}


def _endpoint(b: EmbeddedBroker, index: int = 0) -> dict[str, Any]:
    endpoint: dict[str, Any] = b.stats()["endpoints"][index]
    return endpoint


def _telemetry_open(b: EmbeddedBroker, client_id: str | None) -> bool:
    return any(c["client_id"] == client_id and c["connected"] for c in b.clients(0))


def _reads(simple: ferrymq.SimpleConsumer, message_id: str) -> Callable[[], bool]:
    """A condition for `wait_for`: ``simple`` has received ``message_id`` (each poll is one
    receive, which acks what it brings)."""
    received: set[str] = set()

    def got_it() -> bool:
        for m in simple.receive(32, 15):
            received.add(m.message_id)
            simple.ack(m)
        return message_id in received

    return got_it


# -- ReconnectEndpoints ----------------------------------------------------------------------


def test_reconnect_endpoints_moves_the_client_to_a_new_connection(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str], closing: list[Any]
) -> None:
    b = make_broker()
    topic, group = unique("t"), unique("g")
    b.create_topic(topic, "NORMAL", 2)
    producer = started(closing, Producer(b.endpoints, topics=[topic]))
    consumer = ferrymq.SimpleConsumer(
        b.endpoints, group, subscriptions={topic: "*"}, await_duration=1
    ).start()
    closing.append(consumer)
    producer.send(Message(topic, b"before"))
    # One connection per client: the access point and the route's broker are one address.
    wait_for("one connection per client", lambda: _endpoint(b)["connections_open"] == 2)
    accepted = _endpoint(b)["connections_accepted"]

    for n, client_id in enumerate((producer.client_id, consumer.client_id), 1):
        b.reconnect_endpoints(client_id or "")
        wait_for(
            "a new connection",
            lambda n=n: _endpoint(b)["connections_accepted"] == accepted + n,
        )
        wait_for("telemetry on it", lambda c=client_id: _telemetry_open(b, c))
    # The old connections are closed: only the two new ones remain open ...
    wait_for("the old connections closed", lambda: _endpoint(b)["connections_open"] == 2)
    assert _endpoint(b)["connections_accepted"] == accepted + 2
    # ... and traffic goes on over them, without any further connection.
    sent = producer.send(Message(topic, b"after")).message_id
    got: list[MessageView] = []
    wait_for("the message", lambda: bool(got.extend(consumer.receive(16, 15)) or got))
    assert sent in {m.message_id for m in got}
    stats = _endpoint(b)
    assert (stats["connections_accepted"], stats["connections_open"]) == (accepted + 2, 2)


# -- periodic route refresh ------------------------------------------------------------------


def test_route_refresh_follows_a_queue_opened_while_clients_run(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str], closing: list[Any]
) -> None:
    # Two endpoints, one queue each; the second queue is closed (NONE) when the clients start.
    b = make_broker(endpoints=2)
    topic, simple_group, push_group = unique("t"), unique("g"), unique("g")
    b.create_topic(topic, "NORMAL", 2)
    b.set_queue_permission(topic, 1, 0, "NONE")
    second = b.addresses[1]
    producer = started(closing, Producer(b.endpoints, topics=[topic], **FAST))
    simple = ferrymq.SimpleConsumer(
        b.endpoints, simple_group, subscriptions={topic: "*"}, await_duration=1, **FAST
    ).start()
    closing.append(simple)
    pushed = Collector(b.endpoints, push_group, topic, closing, **FAST)
    before = [producer.send(Message(topic, f"{i}".encode())) for i in range(8)]
    assert {r.endpoint for r in before} == {b.addresses[0]}

    b.set_queue_permission(topic, 1, 0, "READ_WRITE")
    # The producer's refreshed route has the queue: sends start landing there.
    on_second: list[str] = []

    def sent_to_second() -> bool:
        r = producer.send(Message(topic, b"x"))
        if r.endpoint == second:
            on_second.append(r.message_id)
        return bool(on_second)

    wait_for("a send to the opened queue", sent_to_second)
    assert [m["message_id"] for m in b.messages(topic) if m["endpoint"] == 1] == on_second
    # The simple consumer's refreshed route lets it receive from that queue ...
    wait_for("the simple consumer to read the opened queue", _reads(simple, on_second[0]))
    # ... and the push consumer's next assignment scan does too.
    wait_for("the push consumer to read the opened queue", lambda: on_second[0] in pushed.ids())


@pytest.mark.rocketmq
def test_route_refresh_follows_queues_added_on_the_real_server(
    rocketmq_server: RealServer, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("t"), unique("g")
    rocketmq_server.setup({topic: "NORMAL"}, [group])  # 8 queues
    producer = started(closing, Producer(rocketmq_server.endpoints, topics=[topic], **FAST))
    simple = ferrymq.SimpleConsumer(
        rocketmq_server.endpoints, group, subscriptions={topic: "*"}, await_duration=5, **FAST
    ).start()
    closing.append(simple)
    assert {producer.send(Message(topic, b"x")).queue_id for _ in range(16)} == set(range(8))

    rocketmq_server.run(
        "mqadmin", "updateTopic", "-b", _broker_addr(), "-t", topic, "-r", "12", "-w", "12",
        "-a", "+message.type=NORMAL",
    )  # fmt: skip
    # The proxy caches routes (about 20 s); the clients refresh theirs every 0.2 s here.
    new_queue: list[str] = []

    def sent_to_new_queue() -> bool:
        r = producer.send(Message(topic, b"y"))
        if r.queue_id >= 8:
            new_queue.append(r.message_id)
        return bool(new_queue)

    wait_for("a send to a new queue", sent_to_new_queue, timeout=120)
    wait_for("the simple consumer to read a new queue", _reads(simple, new_queue[0]), timeout=120)


def _broker_addr() -> str:
    import os

    return f"127.0.0.1:{os.environ.get('FERRYMQ_ROCKETMQ_BROKER_PORT', '10911')}"


# -- settings changed while clients run ------------------------------------------------------


def test_a_body_size_limit_lowered_mid_run_is_applied_by_the_running_producer(
    fresh_topic: FreshTopic, closing: list[Any]
) -> None:
    b, topic = fresh_topic()
    producer = started(closing, Producer(b.endpoints, topics=[topic], **FAST))
    producer.send(Message(topic, b"x" * 2000))
    assert producer.settings["max_body_size"] == 4 * 1024 * 1024

    b.update_settings(max_body_size=1000)
    wait_for("the new limit", lambda: producer.settings["max_body_size"] == 1000)
    sends = b.calls(0, "SendMessage")
    with pytest.raises(ferrymq.InvalidArgumentError, match="1000"):
        producer.send(Message(topic, b"x" * 2000))
    assert b.calls(0, "SendMessage") == sends  # refused by the client: nothing was sent
    producer.send(Message(topic, b"x" * 1000))

    b.update_settings(max_body_size=4 * 1024 * 1024)
    wait_for("the limit raised again", lambda: producer.settings["max_body_size"] > 1000)
    producer.send(Message(topic, b"x" * 2000))


def test_producer_attempts_changed_mid_run_are_applied_by_the_running_producer(
    fresh_topic: FreshTopic, closing: list[Any]
) -> None:
    b, topic = fresh_topic()
    producer = started(closing, Producer(b.endpoints, topics=[topic], **FAST))
    assert producer.settings["max_attempts"] == 3
    b.update_settings(producer_max_attempts=5)
    wait_for("five attempts", lambda: producer.settings["max_attempts"] == 5)
    # Every attempt answers a retriable error: the send gives up after the new count.
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="SendMessage", count=100)
    sends = b.calls(0, "SendMessage")
    with pytest.raises(ferrymq.BrokerError):
        producer.send(Message(topic, b"x"))
    assert b.calls(0, "SendMessage") - sends == 5


def test_bad_server_settings_name_the_parameter(broker: EmbeddedBroker) -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match="max_body_size"):
        broker.update_settings(max_body_size=0)
    with pytest.raises(ferrymq.InvalidArgumentError, match="producer_max_attempts"):
        broker.update_settings(producer_max_attempts=0)


def test_max_attempts_lowered_mid_run_sends_a_fifo_message_to_the_dlq(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    """A FIFO push consumer retries a failing message locally and forwards it to the DLQ after
    the group's max attempts, which it learns from the settings. Lowering them while the
    message is being retried must end the retries at the next settings sync."""
    topic, group = unique("fifo"), unique("g")
    server.setup({topic: "FIFO"})
    _fifo_group(server, group, max_attempts=1000)
    producer = started(closing, Producer(server.endpoints, topics=[topic]))
    poison = producer.send(Message(topic, b"poison", message_group="a")).message_id
    attempts: list[int] = []

    def listener(m: MessageView) -> ConsumeResult:
        attempts.append(m.delivery_attempt)
        return ConsumeResult.FAILURE

    consumer = ferrymq.PushConsumer(
        server.endpoints, group, subscriptions={topic: "*"}, listener=listener, **FAST
    ).start()
    closing.append(consumer)
    wait_for("three attempts", lambda: len(attempts) >= 3, timeout=60)
    assert consumer.stats()["dead_lettered"] == 0

    _fifo_group(server, group, max_attempts=2)
    wait_for("the dead letter", lambda: consumer.stats()["dead_lettered"] == 1, timeout=60)
    n = len(attempts)
    assert n < 1000
    if isinstance(server, EmbeddedServer):
        assert [d["message_id"] for d in server.broker.dead_letters(group)] == [poison]
    # Not retried any more.
    wait_for("settled", lambda: consumer.stats()["dead_lettered"] == 1)
    assert len(attempts) == n


def _fifo_group(server: Server, group: str, *, max_attempts: int) -> None:
    """Create or replace a FIFO group retried every 0.2 s (local retries of a FIFO consumer
    wait the retry policy's back-off)."""
    if isinstance(server, EmbeddedServer):
        server.broker.create_group(
            group, fifo=True, max_delivery_attempts=max_attempts, retry_backoff=[0.2]
        )
        return
    assert isinstance(server, RealServer)
    server.run(
        "create-group", group, "--fifo", "--max-attempts", str(max_attempts), "--retry-policy",
        '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":200,"max":200,"multiplier":1}}',
        timeout=120,
    )  # fmt: skip


# -- SimpleConsumer.subscribe / unsubscribe while running -------------------------------------


def test_simple_consumer_subscribe_and_unsubscribe_while_running(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    a, b, group = unique("a"), unique("b"), unique("g")
    server.setup({a: "NORMAL", b: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[a, b]))
    consumer = ferrymq.SimpleConsumer(
        server.endpoints, group, subscriptions={a: "*"}, await_duration=5
    ).start()
    closing.append(consumer)

    def receive_all(want: set[str], timeout: float = 60.0) -> list[MessageView]:
        got: list[MessageView] = []
        deadline = time.monotonic() + timeout
        while not want <= {m.message_id for m in got} and time.monotonic() < deadline:
            for m in consumer.receive(32, 15):
                got.append(m)
                consumer.ack(m)
        return got

    on_a = producer.send(Message(a, b"a1")).message_id
    on_b = producer.send(Message(b, b"b1")).message_id
    assert {m.topic for m in receive_all({on_a})} == {a}

    consumer.subscribe(b)
    assert set(consumer.subscriptions) == {a, b}
    got = receive_all({on_b})
    assert on_b in {m.message_id for m in got}

    consumer.unsubscribe(a)
    assert set(consumer.subscriptions) == {b}
    after_a = producer.send(Message(a, b"a2")).message_id
    after_b = producer.send(Message(b, b"b2")).message_id
    got = receive_all({after_b})
    assert {m.topic for m in got} == {b}
    assert after_b in {m.message_id for m in got}
    # Another receive (a long poll on the one topic left): still nothing from the other one.
    assert all(m.topic == b for m in consumer.receive(32, 15))
    # Subscribed again, the message sent meanwhile arrives.
    consumer.subscribe(a, "*")
    assert after_a in {m.message_id for m in receive_all({after_a})}


@pytest.mark.parametrize("expression", ["", "a||", "a || *", "a|b"])
def test_simple_consumer_subscribe_refuses_a_bad_expression(
    server: Server, unique: Callable[[str], str], closing: list[Any], expression: str
) -> None:
    a, b, group = unique("a"), unique("b"), unique("g")
    server.setup({a: "NORMAL", b: "NORMAL"}, [group])
    consumer = ferrymq.SimpleConsumer(
        server.endpoints, group, subscriptions={a: "*"}, await_duration=5
    ).start()
    closing.append(consumer)
    with pytest.raises(ferrymq.InvalidArgumentError, match="filter"):
        consumer.subscribe(b, expression)
    assert set(consumer.subscriptions) == {a}


def test_push_consumer_subscribe_and_unsubscribe_while_running(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    a, b, group = unique("a"), unique("b"), unique("g")
    server.setup({a: "NORMAL", b: "NORMAL"}, [group])
    producer = started(closing, Producer(server.endpoints, topics=[a, b]))
    seen: dict[str, MessageView] = {}
    lock = threading.Lock()

    def listener(m: MessageView) -> ConsumeResult:
        with lock:
            seen[m.message_id] = m
        return ConsumeResult.SUCCESS

    def delivered(*ids: str) -> Callable[[], bool]:
        return lambda: all(i in seen for i in ids)

    consumer = ferrymq.PushConsumer(
        server.endpoints, group, subscriptions={a: "*"}, listener=listener
    )
    with pytest.raises(ferrymq.ClientClosedError, match="not started"):
        consumer.subscribe(b)
    consumer.start()
    closing.append(consumer)
    a1 = producer.send(Message(a, b"a1")).message_id
    wait_for("a1 delivered", delivered(a1), timeout=60)

    # A new topic, read with a tag filter.
    consumer.subscribe(b, "x")
    assert {t: f.expression for t, f in consumer.subscriptions.items()} == {a: "*", b: "x"}
    b_y = producer.send(Message(b, b"b-y", tag="y")).message_id
    b_x = producer.send(Message(b, b"b-x", tag="x")).message_id
    wait_for("b-x delivered", delivered(b_x), timeout=60)
    assert b_y not in seen

    # Unsubscribed: nothing more from a, while b goes on.
    consumer.unsubscribe(a)
    assert set(consumer.subscriptions) == {b}
    a2 = producer.send(Message(a, b"a2")).message_id
    b2 = producer.send(Message(b, b"b2", tag="x")).message_id
    wait_for("b2 delivered", delivered(b2), timeout=60)
    assert a2 not in seen
    # Subscribed again, the message sent meanwhile arrives.
    consumer.subscribe(a)
    wait_for("a2 delivered", delivered(a2), timeout=60)
    assert {m.topic for m in seen.values()} == {a, b}

    # A topic the server does not know, a bad filter: refused, nothing changes.
    with pytest.raises(ferrymq.FerryError):
        consumer.subscribe(unique("missing"))
    with pytest.raises(ferrymq.InvalidArgumentError, match="filter"):
        consumer.subscribe(b, "a||")
    assert {t: f.expression for t, f in consumer.subscriptions.items()} == {a: "*", b: "x"}

    # The filter of a subscribed topic changed: tag y is read from now on. A broker may go on
    # serving a receive with the old filter that the client abandoned, and a message it meets
    # is filtered out by it, so tag-y messages are sent until one arrives.
    consumer.subscribe(b, "y")
    sent_y: list[str] = []
    last_sent = [0.0]

    def a_tag_y_arrived() -> bool:
        if any(i in seen for i in sent_y):
            return True
        if time.monotonic() - last_sent[0] > 0.5:
            sent_y.append(producer.send(Message(b, b"b-y2", tag="y")).message_id)
            last_sent[0] = time.monotonic()
        return False

    wait_for("a tag-y message delivered", a_tag_y_arrived, timeout=90)
    consumer.close()
    with pytest.raises(ferrymq.ClientClosedError):
        consumer.unsubscribe(b)
