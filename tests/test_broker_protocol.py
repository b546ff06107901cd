"""Every RPC of the embedded broker over the raw gRPC protocol, including error answers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from ferrymq.testing import STATUS_CODES as C
from ferrymq.testing import EmbeddedBroker

pytest.importorskip("rocketmq")

from rocketmq.grpc_protocol import definition_pb2 as d

from rmq_wire import OK, Wire, message
from waiting import InThread, first_batch


@pytest.fixture
def raw(broker: EmbeddedBroker, unique: Callable[[str], str]) -> Iterator[Wire]:
    with Wire(broker.addresses[0], unique("client")) as r:
        yield r


@pytest.fixture
def names(broker: EmbeddedBroker, unique: Callable[[str], str]) -> tuple[str, str]:
    topic, group = unique("t"), unique("g")
    broker.create_topic(topic, "NORMAL", 4)
    broker.create_group(group, max_delivery_attempts=3)
    return topic, group


def test_client_id_is_required(broker: EmbeddedBroker, names: tuple[str, str]) -> None:
    with Wire(broker.addresses[0]) as anon:
        anon.client_id = None
        assert anon.query_route(names[0]).status.code == C["CLIENT_ID_REQUIRED"]
        assert anon.send(message(names[0])).status.code == C["CLIENT_ID_REQUIRED"]
        status, _ = anon.receive_once(names[1], names[0])
        assert status.code == C["CLIENT_ID_REQUIRED"]


def test_query_route(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(endpoints=3)
    b.create_topic("rt", "FIFO", 8)
    b.set_queue_permission("rt", 1, 0, "READ")
    with Wire(b.addresses[2]) as r:
        resp = r.query_route("rt")
        assert resp.status.code == OK
        queues = resp.message_queues
        assert len(queues) == 8
        ports = {q.broker.name: q.broker.endpoints.addresses[0].port for q in queues}
        assert sorted(ports) == ["broker-0", "broker-1", "broker-2"]
        assert sorted(f"127.0.0.1:{p}" for p in ports.values()) == sorted(b.addresses)
        assert all(list(q.accept_message_types) == [d.FIFO] for q in queues)
        assert all(q.broker.id == 0 for q in queues)
        b1 = [q for q in queues if q.broker.name == "broker-1"]
        # read-only queues are listed first, as the proxy does
        assert (b1[0].id, b1[0].permission) == (0, d.READ)
        assert all(q.permission == d.READ_WRITE for q in b1[1:])
        assert r.query_route("missing").status.code == C["TOPIC_NOT_FOUND"]
        assert r.query_route("bad topic!").status.code == C["ILLEGAL_TOPIC"]


def test_auto_create(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(auto_create=True, auto_create_queues=2)
    with Wire(b.addresses[0]) as r:
        assert len(r.query_route("fresh").message_queues) == 2
        r.consumer("fresh-group")
        assert r.send(message("fresh", b"1")).status.code == OK
        status, msgs = r.receive_once("fresh-group", "fresh")
        assert status.code == OK
        assert [m.body for m in msgs] == [b"1"]


def test_telemetry_settings_echo(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    # The echoed producer settings are pinned against the proxy in
    # test_conformance.py::test_producer_settings_echo; here: what the broker records.
    topic, group = names
    assert raw.producer(topic).status.code == OK
    seen = {c["client_id"]: c for c in broker.clients(0)}
    assert seen[raw.client_id]["client_type"] == "PRODUCER"
    assert seen[raw.client_id]["topics"] == [topic]

    fifo_group = group + "-fifo"
    broker.create_group(fifo_group, fifo=True, max_delivery_attempts=5, retry_backoff=[0.5, 2])
    with Wire(broker.addresses[0], raw.client_id + "-c") as c:
        sub = c.consumer(fifo_group, client_type=d.PUSH_CONSUMER).settings
        assert sub.subscription.fifo
        assert sub.subscription.receive_batch_size == 32
        assert sub.subscription.long_polling_timeout.seconds == 20
        assert sub.backoff_policy.max_attempts == 5
        nxt = [x.ToMilliseconds() for x in sub.backoff_policy.customized_backoff.next]
        assert nxt == [500, 2000]


def test_heartbeat_needs_settings(raw: Wire, names: tuple[str, str]) -> None:
    _topic, group = names
    assert raw.heartbeat(group).status.code == C["UNRECOGNIZED_CLIENT_TYPE"]
    raw.consumer(group)
    assert raw.heartbeat(group).status.code == OK
    # Groups are created on first use, as RocketMQ's autoCreateSubscriptionGroup does.
    assert raw.heartbeat("no-such-group").status.code == OK
    assert raw.heartbeat("bad group!").status.code == C["ILLEGAL_CONSUMER_GROUP"]


def test_send_single_and_batch(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    topic, _ = names
    one = raw.send(message(topic, b"a", queue_id=2))
    assert one.status.code == OK
    assert len(one.entries) == 1
    assert one.entries[0].status.code == OK
    # A multi-message send is one RocketMQ batch, as on the proxy: ONE entry (a new id, the
    # first message's id as transaction id, the first offset), every message stored under the
    # first message's id and metadata.
    msgs = [message(topic, bytes([i]), queue_id=3, tag=f"t{i}") for i in range(5)]
    batch = raw.send(*msgs)
    assert batch.status.code == OK
    [entry] = batch.entries
    first_id = msgs[0].system_properties.message_id
    assert entry.transaction_id == first_id
    stored = [m for m in broker.messages(topic) if m["queue_id"] == 3]
    assert [m["body"] for m in stored] == [bytes([i]) for i in range(5)]
    assert {(m["message_id"], m["tag"]) for m in stored} == {(first_id, "t0")}
    assert stored[0]["offset"] == entry.offset
    stored_one = {m["message_id"]: m for m in broker.messages(topic)}
    assert stored_one[one.entries[0].message_id]["queue_id"] == 2


def test_send_errors(
    raw: Wire, names: tuple[str, str], make_broker: Callable[..., EmbeddedBroker]
) -> None:
    topic, _ = names

    def code(*msgs: d.Message) -> int:
        resp = raw.send(*msgs)
        assert len(resp.entries) == 0  # the proxy answers a refused send with no entries
        return int(resp.status.code)

    # Empty body, bad tag, reserved property key, type conflicts, an unknown topic and no
    # message: pinned against the proxy in test_conformance.py (test_send_errors_carry_no_entries).
    assert code(message(topic, b"x", msg_id="")) == C["ILLEGAL_MESSAGE_ID"]
    assert code(message(topic, b"x", keys=[" "])) == C["ILLEGAL_MESSAGE_KEY"]
    assert code(message(topic, b"x", group="g" * 65)) == C["ILLEGAL_MESSAGE_GROUP"]
    assert code(message(topic, b"x", properties={"KEYS": "v"})) == C["ILLEGAL_MESSAGE_PROPERTY_KEY"]
    big_props = {"p": "v" * 20_000}
    assert code(message(topic, b"x", properties=big_props)) == C["MESSAGE_PROPERTIES_TOO_LARGE"]
    assert code(message(topic, b"x"), message("other", b"y")) == C["ILLEGAL_TOPIC"]

    small = make_broker(max_body_size=16)
    small.create_topic("s", "NORMAL", 1)
    with Wire(small.addresses[0]) as r:
        assert r.send(message("s", b"x" * 17)).status.code == C["MESSAGE_BODY_TOO_LARGE"]
        assert r.send(message("s", b"x" * 16)).status.code == OK
        small.create_topic("d", "DELAY", 1)
        far = message("d", b"x", delivery=time.time() + 4 * 86400)
        assert r.send(far).status.code == C["ILLEGAL_DELIVERY_TIME"]


def test_query_assignment(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(endpoints=2)
    b.create_topic("qa", "NORMAL", 4)
    b.create_group("qa-g")
    with Wire(b.addresses[0]) as r:
        resp = r.query_assignment("qa", "qa-g")
        assert resp.status.code == OK
        got = sorted((a.message_queue.broker.name, a.message_queue.id) for a in resp.assignments)
        assert got == [("broker-0", -1), ("broker-1", -1)]
        assert r.query_assignment("qa", "nope").status.code == OK  # groups are created on first use
        assert r.query_assignment("nope", "qa-g").status.code == C["TOPIC_NOT_FOUND"]
        for q in range(2):
            b.set_queue_permission("qa", 1, q, "WRITE")
        names = [a.message_queue.broker.name for a in r.query_assignment("qa", "qa-g").assignments]
        assert names == ["broker-0"]


def test_receive_ack_and_handles(raw: Wire, names: tuple[str, str]) -> None:
    topic, group = names
    status, _ = raw.receive_once(group, topic)
    assert status.code == C["INTERNAL_SERVER_ERROR"]  # as the proxy (a NullPointerException)
    raw.consumer(group)
    for i in range(3):
        raw.send(message(topic, bytes([i]), queue_id=0))
    status, msgs = raw.receive_once(group, topic, batch=2)
    assert status.code == OK
    assert len(msgs) == 2
    # The message and ack shapes the proxy gives (attempt, handle, digest, acking twice, a
    # handle that does not parse) are pinned in test_conformance.py; here: the store host and
    # an ack mixing a good and a bad handle.
    assert {m.system_properties.store_host for m in msgs} == {raw.target}
    ack = raw.ack(group, topic, *msgs)
    assert [e.status.code for e in ack.entries] == [OK, OK]
    status, rest = raw.receive_once(group, topic)
    assert len(rest) == 1
    both = raw.ack(group, topic, rest[0], handles=["garbage"])
    assert both.status.code == C["MULTIPLE_RESULTS"]
    assert [e.status.code for e in both.entries] == [OK, C["INTERNAL_SERVER_ERROR"]]
    status, none = raw.receive_once(group, topic, long_polling=1)
    assert status.code == C["MESSAGE_NOT_FOUND"]
    assert none == []


def test_receive_errors(
    raw: Wire, names: tuple[str, str], make_broker: Callable[..., EmbeddedBroker]
) -> None:
    topic, group = names
    raw.consumer(group)
    # No invisible duration, one under the proxy's 10 s floor, an unknown topic: pinned in
    # test_conformance.py::test_receive_errors. As the proxy: an unknown group is created on
    # first use; batch 0 long-polls for nothing.
    assert raw.receive_once("missing", topic, long_polling=1)[0].code == C["MESSAGE_NOT_FOUND"]
    assert raw.receive_once("bad group!", topic)[0].code == C["ILLEGAL_CONSUMER_GROUP"]
    assert raw.receive_once(group, topic, batch=0, long_polling=1)[0].code == C["MESSAGE_NOT_FOUND"]
    sql = d.FilterExpression(type=d.SQL, expression="a > 1")
    assert (
        raw.receive_once(group, topic, filter_expression=sql)[0].code
        == C["ILLEGAL_FILTER_EXPRESSION"]
    )
    # A deadline shorter than the long-polling floor (1 s here): BAD_REQUEST for a client that
    # sends no x-mq-client-version (ILLEGAL_POLLING_TIME from version "5.0.3" on), as the proxy.
    raw.client_version = None
    status, _ = raw.receive_once(group, topic, long_polling=5, timeout=0.5)
    assert status.code == C["BAD_REQUEST"]
    # Under the proxy's floor of the invisible duration (10 s by default), auto-renewal needs
    # none.
    b = make_broker(min_invisible=10.0)
    b.create_topic("t", "NORMAL", 1)
    b.create_group("g")
    with Wire(b.addresses[0]) as r:
        r.consumer("g")
        assert (
            r.receive_once("g", "t", invisible=None, auto_renew=True, long_polling=1)[0].code
            == C["MESSAGE_NOT_FOUND"]
        )


def test_tag_filter(raw: Wire, names: tuple[str, str]) -> None:
    topic, group = names
    raw.consumer(group)
    for body, tag in [(b"a", "A"), (b"b", "B"), (b"c", "C")]:
        raw.send(message(topic, body, tag=tag))
    expr = d.FilterExpression(type=d.TAG, expression="A || C")
    got: list[bytes] = []
    for _ in range(4):
        _, msgs = raw.receive_once(group, topic, filter_expression=expr)
        got += [m.body for m in msgs]
        raw.ack(group, topic, *msgs) if msgs else None
    assert sorted(got) == [b"a", b"c"]


def test_long_polling_wakes_on_send(
    raw: Wire, names: tuple[str, str], broker: EmbeddedBroker
) -> None:
    topic, group = names
    raw.consumer(group)
    polled = InThread(lambda: raw.receive_once(group, topic, long_polling=20))
    time.sleep(0.3)
    with Wire(broker.addresses[0], topic + "-sender") as s:
        s.send(message(topic, b"wake"))
    status, msgs = polled.wait(15)
    assert status.code == OK
    assert [m.body for m in msgs] == [b"wake"]


def test_change_invisible_duration(raw: Wire, names: tuple[str, str]) -> None:
    topic, group = names
    raw.consumer(group)
    raw.send(message(topic, b"nack"))
    _, [m] = raw.receive_once(group, topic)
    old = m.system_properties.receipt_handle
    resp = raw.change_invisible(group, topic, old, 0.2)
    assert resp.status.code == OK
    assert resp.receipt_handle
    assert resp.receipt_handle != old
    # the old handle stops working: as on the proxy, it is answered OK without effect
    assert raw.change_invisible(group, topic, old, 1).status.code == OK
    assert raw.ack(group, topic, handles=[old]).status.code == OK
    # redelivered with attempt 2 once the new invisibility ends
    _, [again] = raw.receive_once(group, topic, long_polling=5)
    assert again.system_properties.delivery_attempt == 2
    assert again.system_properties.message_id == m.system_properties.message_id
    # the handle of the previous delivery is stale (OK, no effect); junk does not parse
    expired = raw.change_invisible(group, topic, resp.receipt_handle, 1)
    assert expired.status.code == OK
    assert raw.change_invisible(group, topic, "junk", 1).status.code == C["INTERNAL_SERVER_ERROR"]
    bad = raw.change_invisible(group, topic, again.system_properties.receipt_handle, -1)
    assert bad.status.code == C["ILLEGAL_INVISIBLE_TIME"]
    assert raw.ack(group, topic, again).status.code == OK


def test_max_attempts_move_to_dlq(
    raw: Wire, names: tuple[str, str], broker: EmbeddedBroker
) -> None:
    topic, group = names  # max_delivery_attempts=3
    raw.consumer(group)
    sent = raw.send(message(topic, b"poison")).entries[0].message_id
    for attempt in (1, 2, 3):
        _, [m] = raw.receive_once(group, topic, invisible=0.1, long_polling=5)
        assert m.system_properties.delivery_attempt == attempt
    _status, msgs = raw.receive_once(group, topic, invisible=0.1, long_polling=1)
    assert msgs == []
    [dead] = broker.dead_letters(group)
    assert dead["message_id"] == sent
    assert dead["topic"] == f"%DLQ%{group}"
    assert dead["dead_letter_queue"] == {"topic": topic, "message_id": sent}
    # the DLQ is a topic: a consumer can read it
    assert raw.query_route(f"%DLQ%{group}").status.code == OK


def test_forward_to_dlq(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    topic, group = names
    raw.consumer(group)
    raw.send(message(topic, b"bad"))
    _, [m] = raw.receive_once(group, topic)
    assert raw.forward_dlq(group, topic, m).status.code == OK
    assert [x["body"] for x in broker.dead_letters(group)] == [b"bad"]
    assert raw.forward_dlq(group, topic, m).status.code == C["INVALID_RECEIPT_HANDLE"]
    assert raw.ack(group, topic, m).status.code == OK  # no effect, as on the proxy
    assert raw.receive_once(group, topic)[1] == []


def test_fifo_group_blocks_until_ack(
    raw: Wire, broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic, group, plain = unique("fifo"), unique("g"), unique("g")
    broker.create_topic(topic, "FIFO", 1)
    broker.create_group(group, fifo=True)
    broker.create_group(plain)
    raw.consumer(group)
    raw.send(*[message(topic, f"a{i}".encode(), group="A") for i in range(3)])
    raw.send(message(topic, b"b0", group="B"))
    # One receive hands out a group's consecutive messages in order (as a real broker hands
    # out a batch of a FIFO queue); the group then stays blocked until all of them are settled.
    _, first = raw.receive_once(group, topic)
    assert [m.body for m in first] == [b"a0", b"a1", b"a2", b"b0"]
    assert raw.receive_once(group, topic, long_polling=1)[1] == []
    # a non-FIFO group on the same topic is not blocked
    _, all_ = raw.receive_once(plain, topic)
    assert len(all_) == 4
    raw.send(message(topic, b"a3", group="A"))
    raw.send(message(topic, b"b1", group="B"))
    raw.ack(group, topic, first[0], first[1], first[3])
    _, second = raw.receive_once(group, topic)
    assert [m.body for m in second] == [b"b1"], "a2 is still in flight: a3 waits"
    raw.ack(group, topic, first[2], *second)
    _, second = raw.receive_once(group, topic)
    assert [m.body for m in second] == [b"a3"]
    # a nack keeps the group blocked and redelivers the same message first
    raw.change_invisible(group, topic, second[0].system_properties.receipt_handle, 0.1)
    _, third = raw.receive_once(group, topic, long_polling=5)
    assert [m.body for m in third] == [b"a3"]
    assert third[0].system_properties.delivery_attempt == 2


def test_transactions(raw: Wire, broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    topic, group = unique("tx"), unique("g")
    broker.create_topic(topic, "TRANSACTION", 1)
    broker.create_group(group)
    raw.consumer(group)
    before = broker.stats()["transactions"]
    assert (
        raw.send(message(topic, b"plain")).status.code == C["MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"]
    )
    commit, rollback, unknown = (
        raw.send(message(topic, body, kind=d.TRANSACTION)).entries[0]
        for body in (b"commit", b"rollback", b"unknown")
    )
    assert all(e.transaction_id for e in (commit, rollback, unknown))
    pending = [t for t in broker.pending_transactions() if t["topic"] == topic]
    assert len(pending) == 3
    assert raw.receive_once(group, topic, long_polling=1)[1] == [], "half messages are hidden"
    assert (
        raw.end_transaction(topic, commit.message_id, commit.transaction_id, d.COMMIT).status.code
        == OK
    )
    assert (
        raw.end_transaction(
            topic, rollback.message_id, rollback.transaction_id, d.ROLLBACK
        ).status.code
        == OK
    )
    # UNSPECIFIED keeps the half message for a later check
    assert (
        raw.end_transaction(topic, unknown.message_id, unknown.transaction_id, 0).status.code == OK
    )
    again = raw.end_transaction(topic, commit.message_id, commit.transaction_id, d.COMMIT)
    assert again.status.code == C["INVALID_TRANSACTION_ID"]
    wrong = raw.end_transaction(topic, "other-id", unknown.transaction_id, d.COMMIT)
    assert wrong.status.code == C["INVALID_TRANSACTION_ID"]
    _, msgs = raw.receive_once(group, topic)
    assert [m.body for m in msgs] == [b"commit"]
    still = [t["transaction_id"] for t in broker.pending_transactions() if t["topic"] == topic]
    assert still == [unknown.transaction_id]
    after = broker.stats()["transactions"]
    assert after["committed"] - before["committed"] == 1
    assert after["rolled_back"] - before["rolled_back"] == 1


def test_orphaned_transaction_check_back(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic, group = unique("tx"), unique("g")
    broker.create_topic(topic, "TRANSACTION", 1)
    broker.create_group(group)
    with Wire(broker.addresses[0], topic + "-p") as p, Wire(broker.addresses[0], topic + "-c") as c:
        p.producer(topic)
        entry = p.send(message(topic, b"orphan", kind=d.TRANSACTION)).entries[0]
        # after transaction_check_delay (1 s here) the producer is asked over Telemetry
        cmd = p.stream.next(timeout=10)
        rec = cmd.recover_orphaned_transaction_command
        assert rec.transaction_id == entry.transaction_id
        assert rec.message.system_properties.message_id == entry.message_id
        assert rec.message.body == b"orphan"
        resp = p.end_transaction(
            topic, entry.message_id, entry.transaction_id, d.COMMIT, d.SOURCE_SERVER_CHECK
        )
        assert resp.status.code == OK
        c.consumer(group)
        assert [m.body for m in c.receive_once(group, topic)[1]] == [b"orphan"]


def test_orphaned_transactions_are_discarded(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(
        transaction_check_delay=0.05, transaction_check_interval=0.05, transaction_check_max=2
    )
    b.create_topic("tx", "TRANSACTION", 1)
    with Wire(b.addresses[0]) as p:
        p.send(message("tx", b"x", kind=d.TRANSACTION))
        deadline = time.time() + 10
        while b.stats()["transactions"]["discarded"] == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert b.stats()["transactions"]["discarded"] == 1
        assert b.pending_transactions() == []


def test_delay_and_recall(raw: Wire, broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    topic, group = unique("delay"), unique("g")
    broker.create_topic(topic, "DELAY", 1)
    broker.create_group(group)
    raw.consumer(group)
    keep = raw.send(message(topic, b"keep", delivery=time.time() + 1)).entries[0]
    drop = raw.send(message(topic, b"drop", delivery=time.time() + 1)).entries[0]
    assert keep.recall_handle
    assert drop.recall_handle
    assert broker.stats()["topics"][topic]["delayed"] == 2
    resp = raw.recall(topic, drop.recall_handle)
    assert (resp.status.code, resp.message_id) == (OK, drop.message_id)
    assert raw.recall(topic, drop.recall_handle).status.code == C["NOT_FOUND"]
    assert raw.recall(topic, "junk").status.code == C["BAD_REQUEST"]
    assert raw.recall("missing", keep.recall_handle).status.code == C["TOPIC_NOT_FOUND"]
    got = first_batch(lambda: raw.receive_once(group, topic, long_polling=2)[1], tries=5)
    assert [m.body for m in got] == [b"keep"]
    assert raw.recall(topic, keep.recall_handle).status.code == C["NOT_FOUND"]
    past = raw.send(message(topic, b"past", delivery=time.time() - 10))
    assert past.status.code == OK


def test_notify_client_termination(
    raw: Wire, names: tuple[str, str], broker: EmbeddedBroker
) -> None:
    _topic, group = names
    assert raw.terminate(group).status.code == C["UNRECOGNIZED_CLIENT_TYPE"]
    raw.consumer(group)
    assert raw.terminate("bad group!").status.code == C["ILLEGAL_CONSUMER_GROUP"]
    assert raw.terminate(group).status.code == OK
    assert raw.client_id not in {c["client_id"] for c in broker.clients(0)}
    assert raw.heartbeat(group).status.code == C["UNRECOGNIZED_CLIENT_TYPE"]


def test_pull_and_offsets(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    topic, group = names
    mq = Wire.queue(topic, 1)
    for i in range(5):
        raw.send(message(topic, bytes([i]), queue_id=1, tag="even" if i % 2 == 0 else "odd"))
    begin = raw.query_offset(mq, d.BEGINNING)
    end = raw.query_offset(mq, d.END)
    assert (begin.status.code, begin.offset, end.offset) == (OK, 0, 5)
    assert raw.query_offset(mq, d.TIMESTAMP, time.time() + 60).offset == 5
    assert raw.query_offset(mq, d.TIMESTAMP, 0).offset == 0
    status, msgs, nxt = raw.pull(group, mq, 0, batch=3)
    assert status.code == OK
    assert [m.body for m in msgs] == [b"\x00", b"\x01", b"\x02"]
    assert nxt == 3
    status, msgs, nxt = raw.pull(group, mq, 3)
    assert ([m.body for m in msgs], nxt) == ([b"\x03", b"\x04"], 5)
    # replayable: the same offset again
    assert [m.body for m in raw.pull(group, mq, 0, batch=1)[1]] == [b"\x00"]
    odd = d.FilterExpression(type=d.TAG, expression="odd")
    assert [m.body for m in raw.pull(group, mq, 0, filter_expression=odd)[1]] == [b"\x01", b"\x03"]
    status, msgs, nxt = raw.pull(group, mq, 5, long_polling=0.2)
    assert (status.code, msgs, nxt) == (C["MESSAGE_NOT_FOUND"], [], 5)
    status, _, nxt = raw.pull(group, mq, 99)
    assert (status.code, nxt) == (C["ILLEGAL_OFFSET"], 5)
    assert raw.pull("missing", mq, 0)[0].code == OK  # groups are created on first use
    assert raw.pull(group, Wire.queue("missing", 0), 0)[0].code == C["TOPIC_NOT_FOUND"]
    assert raw.pull(group, Wire.queue(topic, 77), 0)[0].code == C["BAD_REQUEST"]

    assert raw.get_offset(group, mq).status.code == C["OFFSET_NOT_FOUND"]
    assert raw.update_offset(group, mq, 3).status.code == OK
    assert raw.get_offset(group, mq).offset == 3
    assert raw.update_offset(group, mq, 99).status.code == C["ILLEGAL_OFFSET"]
    assert raw.update_offset(group, Wire.queue("missing", 0), 1).status.code == C["TOPIC_NOT_FOUND"]


def test_pull_long_polls(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    topic, group = names
    mq = Wire.queue(topic, 0)
    pulled = InThread(lambda: raw.pull(group, mq, 0, long_polling=10))
    time.sleep(0.3)
    with Wire(broker.addresses[0], topic + "-sender") as s:
        s.send(message(topic, b"late", queue_id=0))
    _status, msgs, nxt = pulled.wait(15)
    assert [m.body for m in msgs] == [b"late"]
    assert nxt == 1


def test_sync_lite_subscription_is_not_implemented(raw: Wire) -> None:
    from rocketmq.grpc_protocol import service_pb2 as s

    resp = raw.stub.SyncLiteSubscription(s.SyncLiteSubscriptionRequest(), metadata=raw.metadata())
    assert resp.status.code == C["NOT_IMPLEMENTED"]


def test_server_pushed_commands(raw: Wire, names: tuple[str, str], broker: EmbeddedBroker) -> None:
    from rocketmq.grpc_protocol import service_pb2 as s

    topic, _ = names
    raw.producer(topic)
    mid = raw.send(message(topic, b"verify-me")).entries[0].message_id
    nonce = broker.print_thread_stack_trace(raw.client_id)
    cmd = raw.stream.next(timeout=5)
    assert cmd.print_thread_stack_trace_command.nonce == nonce
    raw.stream.send(
        s.TelemetryCommand(
            thread_stack_trace=s.ThreadStackTrace(nonce=nonce, thread_stack_trace="main: idle")
        )
    )
    nonce2 = broker.verify_message(raw.client_id, topic, mid)
    cmd = raw.stream.next(timeout=5)
    assert cmd.verify_message_command.nonce == nonce2
    assert cmd.verify_message_command.message.body == b"verify-me"
    raw.stream.send(
        s.TelemetryCommand(
            status=d.Status(code=OK, message="consumed"),
            verify_message_result=s.VerifyMessageResult(nonce=nonce2),
        )
    )
    nonce3 = broker.reconnect_endpoints(raw.client_id)
    assert raw.stream.next(timeout=5).reconnect_endpoints_command.nonce == nonce3
    deadline = time.time() + 5
    while len([r for r in broker.telemetry_replies() if r["nonce"] in (nonce, nonce2)]) < 2:
        assert time.time() < deadline
        time.sleep(0.02)
    replies = {r["nonce"]: r for r in broker.telemetry_replies()}
    assert replies[nonce]["kind"] == "thread_stack_trace"
    assert replies[nonce]["detail"] == "main: idle"
    assert replies[nonce2]["kind"] == "verify_message_result"
    assert replies[nonce2]["code"] == OK
    from ferrymq import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="client_id"):
        broker.reconnect_endpoints("nobody")


def test_authentication(make_broker: Callable[..., EmbeddedBroker]) -> None:
    b = make_broker(access_key="AK", secret_key="SK")
    b.create_topic("auth", "NORMAL", 1)
    address = b.addresses[0]
    with (
        Wire(address) as anon,
        Wire(address, access_key="AK", secret_key="SK") as good,
        Wire(address, access_key="AK", secret_key="wrong") as bad,
    ):
        assert anon.send(message("auth")).status.code == C["UNAUTHORIZED"]
        assert bad.send(message("auth")).status.code == C["UNAUTHORIZED"]
        assert good.send(message("auth")).status.code == OK
        # QueryRoute and QueryAssignment are not checked (StatusCode.md)
        assert anon.query_route("auth").status.code == OK
        assert bad.producer("auth").status.code == C["UNAUTHORIZED"]
        assert good.producer("auth").status.code == OK
