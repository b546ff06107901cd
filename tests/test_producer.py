"""The RocketMQ producer against the embedded broker: every step of the publishing workflow,
isolation / rejoin / rotation, flow control, transactions, FIFO, delay + recall, batches, the
produce/poll/flush path, telemetry recovery and bad input."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

import ferrymq
from ferrymq import (
    BrokerError,
    ClientClosedError,
    FerryError,
    FlowControlError,
    InvalidArgumentError,
    Message,
    Producer,
    TransactionResolution,
)
from ferrymq.testing import EmbeddedBroker
from servers import FreshTopic
from waiting import wait_for

FAST = {"heartbeat_interval": 0.2, "route_refresh_interval": 0.5}


@pytest.fixture
def topic(broker: EmbeddedBroker, unique: Callable[[str], str]) -> str:
    name = unique("t")
    broker.create_topic(name, "NORMAL", queues=4)
    return name


@pytest.fixture
def producer(broker: EmbeddedBroker, topic: str) -> Iterator[Producer]:
    with Producer(broker.endpoints, topics=[topic], **FAST) as p:
        yield p


# -- startup ---------------------------------------------------------------------------------


def test_start_fetches_settings_and_routes(broker: EmbeddedBroker, producer: Producer) -> None:
    assert producer.started
    s = producer.settings
    assert s["from_server"] is True
    assert s["max_body_size"] > 0
    # Server back-off policy (exponential) replaced the local immediate one.
    assert s["backoff"][1] > s["backoff"][0] > 0
    clients = {c["client_id"]: c for c in broker.clients(0)}
    assert producer.client_id in clients
    assert clients[producer.client_id]["language"] == "PYTHON"


def test_start_fails_on_unknown_topic(broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    p = Producer(broker.endpoints, topics=[unique("missing")])
    with pytest.raises(BrokerError) as e:
        p.start()
    assert e.value.code_name == "TOPIC_NOT_FOUND"
    assert not p.started


def test_credentials_accepted_and_refused(fresh_topic: FreshTopic) -> None:
    # A secret no random client id can contain, so the repr check cannot pass or fail by chance.
    secret = "Secret-Key/42"
    b, t = fresh_topic(access_key="ak", secret_key=secret)
    with Producer(b.endpoints, topics=[t], credentials=("ak", secret)) as p:
        assert p.send(Message(t, b"signed")).topic == t
        assert secret not in repr(p)
    bad = Producer(b.endpoints, topics=[t], credentials=ferrymq.Credentials("ak", "wrong"))
    with pytest.raises(BrokerError) as e:
        bad.start()
    assert e.value.code_name == "UNAUTHORIZED"
    assert "wrong" not in repr(ferrymq.Credentials("ak", "wrong"))


# -- publishing workflow ---------------------------------------------------------------------


def test_send_returns_a_full_receipt(
    broker: EmbeddedBroker, producer: Producer, topic: str
) -> None:
    r = producer.send(Message(topic, b"hello", tag="a", keys=["k1"], properties={"p": "v"}))
    assert len(r.message_id) == 34
    assert r.topic == topic
    assert 0 <= r.queue_id < 4
    assert r.broker_name
    assert r.endpoint in broker.endpoints
    assert r.offset >= 0
    assert r.transaction_id is None
    stored = {m["message_id"]: m for m in broker.messages(topic)}
    assert stored[r.message_id]["body"] == b"hello"
    assert stored[r.message_id]["tag"] == "a"


def test_unknown_topic_fails_the_send(producer: Producer, unique: Callable[[str], str]) -> None:
    with pytest.raises(BrokerError) as e:
        producer.send(Message(unique("nope"), b"x"))
    assert e.value.code_name == "TOPIC_NOT_FOUND"


def test_type_mismatch_fails_without_sending(
    broker: EmbeddedBroker, producer: Producer, unique: Callable[[str], str]
) -> None:
    fifo = unique("fifo")
    broker.create_topic(fifo, "FIFO", queues=2)
    producer.send(Message(fifo, b"warm", message_group="g"))  # route cached
    before = broker.calls(0, "SendMessage")
    with pytest.raises(InvalidArgumentError, match="FIFO"):
        producer.send(Message(fifo, b"plain"))
    assert broker.calls(0, "SendMessage") == before


def test_bad_input(fresh_topic: FreshTopic, unique: Callable[[str], str]) -> None:
    b, t = fresh_topic(max_body_size=1024)
    with Producer(b.endpoints, topics=[t]) as p:
        assert p.settings["max_body_size"] == 1024
        with pytest.raises(InvalidArgumentError, match="body"):
            p.send(Message(t, b""))
        with pytest.raises(InvalidArgumentError, match="body"):
            p.send(Message(t, b"x" * 2000))
        with pytest.raises(InvalidArgumentError, match="messages"):
            p.send_batch([])
        with pytest.raises(InvalidArgumentError, match="topic"):
            p.send_batch([Message(t, b"a"), Message(unique("other"), b"b")])
        assert b.calls(0, "SendMessage") == 0
    with pytest.raises(ClientClosedError):
        p.send(Message(t, b"late"))
    with pytest.raises(ClientClosedError):
        p.produce(Message(t, b"late"))
    with pytest.raises(InvalidArgumentError, match="endpoints"):
        Producer("not-an-endpoint")
    with pytest.raises(InvalidArgumentError, match="max_attempts"):
        Producer(b.endpoints, max_attempts=0)
    with pytest.raises(InvalidArgumentError, match=r"tls\.ca_file"):
        Producer(b.endpoints, tls="/nonexistent/ca.pem")


# -- retries, isolation, rotation, flow control ----------------------------------------------


def test_failed_endpoint_is_isolated_rotated_away_from_and_rejoins(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic(queues=4, endpoints=2)
    bad, good = b.addresses[0], b.addresses[1]
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="SendMessage")
    # Heartbeats fail too, so endpoint 0 cannot rejoin before the faults are cleared.
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="Heartbeat")
    with Producer(b.endpoints, topics=[t], **FAST) as p:
        receipts = [p.send(Message(t, b"m%d" % i)) for i in range(10)]
        assert {r.endpoint for r in receipts} == {good}
        assert bad in p.isolated_endpoints
        # Once isolated, endpoint 0 is skipped: at most the first send touched it.
        assert b.calls(0, "SendMessage") <= 1
        b.clear_faults(0)
        wait_for("the endpoint back", lambda: p.isolated_endpoints == [])
        receipts = [p.send(Message(t, b"n%d" % i)) for i in range(10)]
        assert {r.endpoint for r in receipts} == {bad, good}


def test_retries_stop_after_max_attempts(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic()
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="SendMessage")
    with Producer(b.endpoints, topics=[t], max_attempts=4) as p:
        with pytest.raises(BrokerError) as e:
            p.send(Message(t, b"x"))
        assert e.value.code_name == "INTERNAL_SERVER_ERROR"
        assert "4 attempts" in str(e.value)
        assert b.calls(0, "SendMessage") == 4


def test_caller_errors_are_not_retried(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic()
    b.inject_status(0, "ILLEGAL_MESSAGE_KEY", rpc="SendMessage", count=1)
    with Producer(b.endpoints, topics=[t]) as p:
        with pytest.raises(BrokerError) as e:
            p.send(Message(t, b"x"))
        assert not e.value.retriable
        assert b.calls(0, "SendMessage") == 1
        assert p.isolated_endpoints == []


def test_flow_control_waits_the_server_backoff(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic()
    with Producer(b.endpoints, topics=[t], max_attempts=3) as p:
        backoff = p.settings["backoff"]
        b.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=2)
        start = time.monotonic()
        r = p.send(Message(t, b"x"))
        elapsed = time.monotonic() - start
        assert r.message_id
        assert b.calls(0, "SendMessage") == 3
        # Two throttled attempts: the send waited at least the first two back-off delays.
        assert elapsed >= backoff[0] + backoff[1]
        assert p.isolated_endpoints == [], "throttling does not isolate"
        b.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=3)
        with pytest.raises(FlowControlError):
            p.send(Message(t, b"y"))


# -- message kinds ---------------------------------------------------------------------------


def test_fifo_messages_keep_their_group_queue_and_order(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic("FIFO", queues=4, prefix="fifo", endpoints=2)
    with Producer(b.endpoints, topics=[t], **FAST) as p:
        per_group: dict[str, list[ferrymq.SendReceipt]] = {}
        for i in range(30):
            g = f"order-{i % 3}"
            per_group.setdefault(g, []).append(p.send(Message(t, b"%d" % i, message_group=g)))
        for receipts in per_group.values():
            assert len({(r.endpoint, r.queue_id) for r in receipts}) == 1
            offsets = [r.offset for r in receipts]
            assert offsets == sorted(offsets)
        # Isolation does not move a group: fail its endpoint once, it still goes there.
        g = "order-0"
        home = per_group[g][0].endpoint
        idx = b.addresses.index(home)
        b.inject_status(idx, "INTERNAL_SERVER_ERROR", rpc="SendMessage", count=1)
        r = p.send(Message(t, b"again", message_group=g))
        assert (r.endpoint, r.queue_id) == (home, per_group[g][0].queue_id)
    stored = [m for m in b.messages(t) if m["message_group"] == "order-1"]
    assert [m["body"] for m in stored] == [b"%d" % i for i in range(1, 30, 3)]


def test_delay_message_and_recall(
    broker: EmbeddedBroker, producer: Producer, unique: Callable[[str], str]
) -> None:
    t = unique("delay")
    broker.create_topic(t, "DELAY")
    r = producer.send(Message(t, b"later", delivery_time=timedelta(minutes=5)))
    assert r.recall_handle
    assert producer.recall(t, r.recall_handle) == r.message_id
    with pytest.raises(InvalidArgumentError, match="recall_handle"):
        producer.recall(t, "")


def test_priority_message(
    broker: EmbeddedBroker, producer: Producer, unique: Callable[[str], str]
) -> None:
    t = unique("prio")
    broker.create_topic(t, "PRIORITY")
    r = producer.send(Message(t, b"urgent", priority=5))
    assert r.topic == t


def test_batch_sends_each_message_with_its_own_id(
    broker: EmbeddedBroker, producer: Producer, topic: str
) -> None:
    # One SendMessage per message: a RocketMQ proxy stores a multi-message SendMessage under the
    # first message's id and metadata (tests/test_conformance.py), so ferrymq never sends one.
    before = broker.calls(0, "SendMessage")
    receipts = producer.send_batch(Message(topic, b"b%d" % i, keys=[f"k{i}"]) for i in range(50))
    assert broker.calls(0, "SendMessage") == before + 50
    assert len({r.message_id for r in receipts}) == 50
    stored = {m["message_id"]: m for m in broker.messages(topic)}
    for i, r in enumerate(receipts):
        assert stored[r.message_id]["body"] == b"b%d" % i
        assert stored[r.message_id]["keys"] == [f"k{i}"]


def test_packed_batch_is_one_request_and_checks_its_messages(
    broker: EmbeddedBroker, producer: Producer, topic: str
) -> None:
    before = broker.calls(0, "SendMessage")
    receipts = producer.send_batch(
        [Message(topic, b"p%d" % i, tag="t", keys=["k"]) for i in range(50)], packed=True
    )
    assert broker.calls(0, "SendMessage") == before + 1
    assert len({r.message_id for r in receipts}) == 1
    offsets = [r.offset for r in receipts]
    assert offsets == list(range(offsets[0], offsets[0] + 50))
    stored = [m for m in broker.messages(topic) if m["message_id"] == receipts[0].message_id]
    assert sorted(m["body"] for m in stored) == sorted(b"p%d" % i for i in range(50))
    # Anything but the body differing would be lost on a proxy: refused, nothing sent.
    for odd, field in [
        (Message(topic, b"x", tag="u", keys=["k"]), "tag"),
        (Message(topic, b"x", tag="t", keys=["other"]), "keys"),
        (Message(topic, b"x", tag="t", keys=["k"], properties={"a": "b"}), "properties"),
        (
            Message(
                topic,
                b"x",
                tag="t",
                keys=["k"],
                trace_context="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            "trace_context",
        ),
    ]:
        with pytest.raises(ferrymq.InvalidArgumentError, match=f"message 1 .*{field}"):
            producer.send_batch([Message(topic, b"y", tag="t", keys=["k"]), odd], packed=True)
    for kind in [
        Message(topic, b"y", delivery_time=60.0 + time.time()),
        Message(topic, b"y", message_group="g"),
        Message(topic, b"y", priority=1),
    ]:
        with pytest.raises(ferrymq.InvalidArgumentError, match="NORMAL messages only"):
            producer.send_batch([kind], packed=True)
    with pytest.raises(ferrymq.InvalidArgumentError, match="must not be empty"):
        producer.send_batch([], packed=True)
    assert broker.calls(0, "SendMessage") == before + 1


async def test_packed_batch_async(broker: EmbeddedBroker, topic: str) -> None:
    async with Producer(broker.endpoints, topics=[topic]) as p:
        receipts = await p.send_batch_async([Message(topic, b"a")] * 3000, packed=True)
    assert len(receipts) == 3000
    assert len({r.message_id for r in receipts}) == 3  # 1024 messages at most per request


# -- transactions ----------------------------------------------------------------------------


def test_transaction_commit_and_rollback(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    t = unique("tx")
    broker.create_topic(t, "TRANSACTION")
    with Producer(broker.endpoints, topics=[t]) as p:
        tx = p.begin_transaction()
        r = tx.send(Message(t, b"half"))
        assert r.transaction_id
        assert r.message_id in {x["message_id"] for x in broker.pending_transactions()}
        tx.commit()
        assert r.message_id not in {x["message_id"] for x in broker.pending_transactions()}
        assert r.message_id in {m["message_id"] for m in broker.messages(t)}
        with pytest.raises(InvalidArgumentError, match="committed"):
            tx.send(Message(t, b"late"))

        def failing_business() -> ferrymq.SendReceipt:
            with p.begin_transaction() as tx2:
                sent.append(tx2.send(Message(t, b"doomed")))
                raise RuntimeError("business failure")

        sent: list[ferrymq.SendReceipt] = []
        with pytest.raises(RuntimeError):
            failing_business()
        r2 = sent[0]
        assert r2.message_id not in {m["message_id"] for m in broker.messages(t)}
        assert r2.message_id not in {x["message_id"] for x in broker.pending_transactions()}

        with p.begin_transaction() as tx3:
            r3 = tx3.send(Message(t, b"ok"))
        assert r3.message_id in {m["message_id"] for m in broker.messages(t)}


def test_transactional_messages_are_never_retried(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic("TRANSACTION", prefix="tx")
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="SendMessage", count=1)
    with Producer(b.endpoints, topics=[t]) as p:
        with pytest.raises(BrokerError):
            p.begin_transaction().send(Message(t, b"x"))
        assert b.calls(0, "SendMessage") == 1
        with pytest.raises(InvalidArgumentError, match="transactional"):
            p.begin_transaction().send(Message(t, b"x", message_group="g"))


def test_orphaned_transaction_is_resolved_by_the_checker(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    t = unique("tx")
    broker.create_topic(t, "TRANSACTION")
    seen: list[ferrymq.MessageView] = []
    threads: list[str] = []

    def checker(view: ferrymq.MessageView) -> TransactionResolution:
        seen.append(view)
        threads.append(threading.current_thread().name)
        return TransactionResolution.COMMIT

    with Producer(broker.endpoints, topics=[t], transaction_checker=checker) as p:
        tx = p.begin_transaction()
        r = tx.send(Message(t, b"orphan"))
        broker.recover_orphaned_transaction(r.transaction_id or "", p.client_id)
        wait_for(
            "the checked message committed",
            lambda: r.message_id in {m["message_id"] for m in broker.messages(t)},
        )
    assert seen[0].message_id == r.message_id
    assert seen[0].transaction_id == r.transaction_id
    assert seen[0].body == b"orphan"


# -- telemetry -------------------------------------------------------------------------------


def test_telemetry_commands_are_answered(broker: EmbeddedBroker, producer: Producer) -> None:
    # ReconnectEndpoints: tests/test_runtime_changes.py (a new connection is observed).
    nonce = broker.print_thread_stack_trace(producer.client_id)
    wait_for("the reply", lambda: any(r["nonce"] == nonce for r in broker.telemetry_replies()))
    reply = next(r for r in broker.telemetry_replies() if r["nonce"] == nonce)
    assert "Thread" in reply["detail"]


def test_recovers_after_broker_restart(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic()
    with Producer(b.endpoints, topics=[t], **FAST) as p:
        p.send(Message(t, b"before"))
        b.restart(0)
        wait_for("the client back", lambda: p.client_id in {c["client_id"] for c in b.clients(0)})
        assert p.send(Message(t, b"after")).topic == t
        b.drop_telemetry(0)
        time.sleep(0.3)
        wait_for(
            "telemetry back",
            lambda: any(c["client_id"] == p.client_id and c["connected"] for c in b.clients(0)),
        )


# -- produce / poll / flush ------------------------------------------------------------------


def test_produce_reports_failures_and_callback_errors(fresh_topic: FreshTopic) -> None:
    b, t = fresh_topic()
    errors: list[FerryError | None] = []
    with Producer(b.endpoints, topics=[t], max_attempts=1) as p:
        b.inject_status(0, "FORBIDDEN", rpc="SendMessage", count=1)
        p.produce(Message(t, b"x"), lambda e, r: errors.append(e))
        p.flush(10)
        assert isinstance(errors[0], BrokerError)
        assert errors[0].code_name == "FORBIDDEN"

        def boom(e: object, r: object) -> None:
            raise ValueError("callback bug")

        p.produce(Message(t, b"y"), boom)
        with pytest.raises(ValueError, match="callback bug"):
            p.flush(10)


# -- asyncio ---------------------------------------------------------------------------------


async def test_async_transaction_send_checks_the_topic_type(
    broker: EmbeddedBroker, topic: str
) -> None:
    async with Producer(broker.endpoints, topics=[topic]) as p:
        # a NORMAL topic: half messages are refused by type before anything is sent
        with pytest.raises(InvalidArgumentError):
            await p.begin_transaction().send_async(Message(topic, b"x"))


def test_verify_message_is_answered_not_implemented_by_a_producer(
    broker: EmbeddedBroker, producer: Producer, topic: str
) -> None:
    r = producer.send(Message(topic, b"v"))
    nonce = broker.verify_message(producer.client_id, topic, r.message_id)
    wait_for("the reply", lambda: any(x["nonce"] == nonce for x in broker.telemetry_replies()))
    reply = next(x for x in broker.telemetry_replies() if x["nonce"] == nonce)
    assert reply["code"] == 50100  # NOT_IMPLEMENTED: a producer has no listener


def test_namespace_is_sent(broker: EmbeddedBroker, topic: str) -> None:
    with Producer(broker.endpoints, topics=[topic], namespace="ns-1") as p:
        assert p.namespace == "ns-1"
        assert p.send(Message(topic, b"ns")).topic == topic
    with pytest.raises(InvalidArgumentError, match="namespace"):
        Producer(broker.endpoints, namespace="has space")


def test_a_dropped_producer_stops_its_background_work(broker: EmbeddedBroker, topic: str) -> None:
    import gc

    p = Producer(broker.endpoints, topics=[topic], heartbeat_interval=0.1).start()
    client_id = p.client_id
    p.produce(Message(topic, b"x"))
    p.flush(10)
    del p
    gc.collect()

    def heartbeats() -> int:
        return next((c["heartbeats"] for c in broker.clients(0) if c["client_id"] == client_id), 0)

    time.sleep(0.5)
    seen = heartbeats()
    time.sleep(0.5)
    assert heartbeats() == seen
