"""Conformance: what a RocketMQ 5 server answers, pinned request for request with a raw gRPC
driver (``rmq_wire``: grpcio + the official client's generated stubs, no client logic), on BOTH
the embedded broker (with the proxy's default timers) and a real Apache RocketMQ 5.3 proxy.

Every behaviour here was first observed on the real server; where the embedded broker differed
it was changed to match (see the report of the conformance branch / docs/architecture.md).
Status messages differ between the servers and are not pinned, only codes and shapes.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from rmq_wire import Code, Wire, code_name, message, message_id, pb, seconds, spb
from servers import Server

_ids = itertools.count()


@pytest.fixture
def wire(proxy_server: Server) -> Iterator[Callable[[], Wire]]:
    opened: list[Wire] = []

    def make() -> Wire:
        w = Wire(proxy_server.address)
        opened.append(w)
        return w

    yield make
    for w in opened:
        w.close()


def producer(wire: Callable[[], Wire], *topics: str) -> Wire:
    """A fresh connection that has sent its producer settings for ``topics``."""
    w = wire()
    w.producer(*topics)
    return w


def consumer(wire: Callable[[], Wire], group: str, topic: str) -> Wire:
    """A fresh connection that has sent its consumer settings for ``group`` on ``topic``."""
    w = wire()
    w.consumer(group, topic)
    return w


def normal_topic(server: Server, unique: Callable[[str], str]) -> tuple[str, str]:
    """A fresh NORMAL topic and consumer group on ``server``."""
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    return topic, group


def statuses(stream: list[spb.ReceiveMessageResponse]) -> list[str]:
    """The shape of a receive stream: status names, "message" and "delivery_timestamp"."""
    out = []
    for r in stream:
        kind = r.WhichOneof("content")
        out.append(code_name(r.status.code) if kind == "status" else kind)
    return out


def collapse(shape: list[str]) -> list[str]:
    """A receive shape with runs of "message" folded into one."""
    return [k for i, k in enumerate(shape) if k != "message" or shape[i - 1 : i] != ["message"]]


def test_route_shape(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topics = {unique(k.lower()): k for k in ("NORMAL", "FIFO", "DELAY", "TRANSACTION")}
    proxy_server.setup(topics)
    w = wire()
    host, _, port = proxy_server.address.rpartition(":")
    for name, kind in topics.items():
        r = w.query_route(name)
        assert code_name(r.status.code) == "OK"
        queues = list(r.message_queues)
        assert sorted(q.id for q in queues) == list(range(8))
        assert {q.permission for q in queues} == {pb.READ_WRITE}
        assert {q.topic.name for q in queues} == {name}
        brokers = {q.broker.name for q in queues}
        assert len(brokers) == 1
        assert "" not in brokers
        assert {q.broker.id for q in queues} == {0}
        for q in queues:
            assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [(host, int(port))]
            assert [pb.MessageType.Name(t) for t in q.accept_message_types] == [kind]
    # Errors travel in the response status, not as gRPC errors.
    assert code_name(w.query_route(unique("missing")).status.code) == "TOPIC_NOT_FOUND"
    name = next(iter(topics))
    w.client_id = None
    assert code_name(w.query_route(name).status.code) == "CLIENT_ID_REQUIRED"


def test_query_assignment_shape(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    w = wire()
    r = w.query_assignment(topic, group)
    assert code_name(r.status.code) == "OK"
    (a,) = r.assignments
    mq = a.message_queue
    assert (mq.topic.name, mq.id, mq.permission) == (topic, -1, pb.READ_WRITE)
    assert mq.broker.endpoints.addresses
    assert list(mq.accept_message_types) == []
    assert code_name(w.query_assignment(unique("missing"), group).status.code) == (
        "TOPIC_NOT_FOUND"
    )
    # Consumer groups are created on first use (autoCreateSubscriptionGroup).
    r = w.query_assignment(topic, unique("new-group"))
    assert code_name(r.status.code) == "OK"
    assert len(r.assignments) == 1


def test_producer_settings_echo(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topics = [unique("a"), unique("b")]
    proxy_server.setup(dict.fromkeys(topics, "NORMAL"))
    w = wire()
    reply = w.producer(*topics)
    assert reply is not None
    assert code_name(reply.status.code) == "OK"
    s = reply.settings
    assert s.client_type == pb.PRODUCER
    assert s.backoff_policy.max_attempts == 3
    exp = s.backoff_policy.exponential_backoff
    assert (seconds(exp.initial), seconds(exp.max), exp.multiplier) == (0.01, 1.0, 2.0)
    assert [t.name for t in s.publishing.topics] == topics
    assert s.publishing.max_body_size == 4 * 1024 * 1024
    assert s.publishing.validate_message_type is True
    assert seconds(s.request_timeout) == 3.0
    assert s.HasField("metric")
    assert not s.metric.on
    assert s.user_agent.language == pb.PYTHON


ROCKETMQ_BACKOFF = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800]
ROCKETMQ_BACKOFF += [3600, 7200]


def test_consumer_settings_echo(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group, fifo_group, short = unique("t"), unique("g"), unique("fg"), unique("sg")
    proxy_server.setup({topic: "NORMAL"}, [group], fifo_groups=[fifo_group])
    proxy_server.setup(groups=[short], max_attempts=3)
    w = wire()
    reply = w.consumer(group, topic, long_polling=10)
    assert reply is not None
    assert code_name(reply.status.code) == "OK"
    s = reply.settings
    # RocketMQ's default group: retryMaxTimes 16, i.e. 17 deliveries.
    assert s.backoff_policy.max_attempts == 17
    steps = [seconds(d) for d in s.backoff_policy.customized_backoff.next]
    assert steps == ROCKETMQ_BACKOFF
    sub = s.subscription
    assert sub.group.name == group
    assert sub.fifo is False
    assert sub.receive_batch_size == 32
    assert seconds(sub.long_polling_timeout) == 20.0  # the client asked for 10 s
    assert [e.topic.name for e in sub.subscriptions] == [topic]
    w2 = wire()
    reply = w2.consumer(fifo_group, topic)
    assert reply is not None
    assert reply.settings.subscription.fifo is True
    w3 = wire()
    reply = w3.consumer(short, topic)
    assert reply is not None
    assert reply.settings.backoff_policy.max_attempts == 3
    # A group nobody created gets the defaults (created on first use).
    w4 = wire()
    reply = w4.consumer(unique("new-group"), topic)
    assert reply is not None
    assert code_name(reply.status.code) == "OK"
    assert reply.settings.backoff_policy.max_attempts == 17


def test_errors_before_settings(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    w = wire()
    assert code_name(w.heartbeat(group, pb.SIMPLE_CONSUMER).status.code) == (
        "UNRECOGNIZED_CLIENT_TYPE"
    )
    # The proxy fails with a NullPointerException here: INTERNAL_SERVER_ERROR, in the stream.
    assert statuses(w.receive(group, topic, long_polling=5, timeout=20)) == [
        "INTERNAL_SERVER_ERROR",
        "delivery_timestamp",
    ]
    # Sending needs no settings.
    r = w.send(message(topic, b"early"))
    assert code_name(r.status.code) == "OK"
    assert len(r.entries) == 1
    reply = w.consumer(group, topic)
    assert reply is not None
    assert code_name(reply.status.code) == "OK"
    assert code_name(w.heartbeat(group, pb.SIMPLE_CONSUMER).status.code) == "OK"


def test_send_errors_carry_no_entries(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    normal, fifo = unique("n"), unique("f")
    proxy_server.setup({normal: "NORMAL", fifo: "FIFO"})
    w = producer(wire, normal, fifo)
    cases = {
        "normal to fifo": message(fifo),
        "fifo to normal": message(normal, kind=pb.FIFO, group="g1"),
        "delay to normal": message(normal, kind=pb.DELAY, delivery=time.time() + 10),
        "transaction to normal": message(normal, kind=pb.TRANSACTION),
        # Not TOPIC_NOT_FOUND: the proxy's type check runs first, and an unknown topic's type
        # is UNSPECIFIED.
        "unknown topic": message(unique("missing")),
    }
    for case, m in cases.items():
        r = w.send(m)
        assert (case, code_name(r.status.code)) == (case, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE")
        assert (case, len(r.entries)) == (case, 0)
    expected = {
        "MESSAGE_BODY_EMPTY": message(normal, b""),
        "MESSAGE_BODY_TOO_LARGE": message(normal, b"x" * (4 * 1024 * 1024 + 1)),
        "ILLEGAL_MESSAGE_TAG": message(normal, tag="a|b"),
        "ILLEGAL_MESSAGE_PROPERTY_KEY": message(normal, properties={"UNIQ_KEY": "x"}),
    }
    for name, m in expected.items():
        r = w.send(m, timeout=30)
        assert (code_name(r.status.code), len(r.entries)) == (name, 0)
    r = w.send()
    assert (code_name(r.status.code), len(r.entries)) == ("MESSAGE_CORRUPTED", 0)


def test_send_answer_and_batch_shape(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    w = producer(wire, topic)
    single = message_id()
    r = w.send(message(topic, b"single", msg_id=single))
    assert code_name(r.status.code) == "OK"
    (entry,) = r.entries
    assert (code_name(entry.status.code), entry.message_id) == ("OK", single)
    assert entry.offset >= 0
    # A multi-message SendMessage is ONE RocketMQ batch: a single answer entry with a new id
    # (the first message's id is its transaction_id) ...
    ids = [message_id() for _ in range(3)]
    batch = [
        message(
            topic, b"b%d" % i, msg_id=ids[i], tag=f"t{i}", keys=[f"k{i}"], properties={"i": str(i)}
        )
        for i in range(3)
    ]
    r = w.send(*batch)
    assert code_name(r.status.code) == "OK"
    (entry,) = r.entries
    assert code_name(entry.status.code) == "OK"
    assert entry.transaction_id == ids[0]
    assert entry.message_id not in ids
    # ... and every message is stored under the FIRST message's id, tag, keys and properties:
    # only the bodies differ. (This is why ferrymq's send_batch sends one request per message.)
    c = consumer(wire, group, topic)
    got = c.receive_messages(group, topic, 4, long_polling=5)
    by_body = {m.body: m for m in got}
    assert set(by_body) == {b"single", b"b0", b"b1", b"b2"}
    assert by_body[b"single"].system_properties.message_id == single
    for i in range(3):
        sp = by_body[b"b%d" % i].system_properties
        assert (sp.message_id, sp.tag, list(sp.keys)) == (ids[0], "t0", ["k0"])
        assert dict(by_body[b"b%d" % i].user_properties) == {"i": "0"}


def test_receive_errors(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    w = consumer(wire, group, topic)
    end = ["delivery_timestamp"]
    # Invisible durations below 10 s, or none without auto_renew.
    assert statuses(w.receive(group, topic, invisible=5)) == ["ILLEGAL_INVISIBLE_TIME", *end]
    assert statuses(w.receive(group, topic, invisible=None)) == ["ILLEGAL_INVISIBLE_TIME", *end]
    # Less than the 5 s long-polling floor left on the call deadline: BAD_REQUEST, or
    # ILLEGAL_POLLING_TIME for clients whose version string is >= "5.0.3" (compared as strings,
    # so "5.0.10" is older).
    assert statuses(w.receive(group, topic, long_polling=5, timeout=3)) == ["BAD_REQUEST", *end]
    for version, code in [
        ("5.0.3", "ILLEGAL_POLLING_TIME"),
        ("5.1.0", "ILLEGAL_POLLING_TIME"),
        ("5.0.10", "BAD_REQUEST"),
    ]:
        w.client_version = version
        got = statuses(w.receive(group, topic, long_polling=5, timeout=3))
        assert (version, got) == (version, [code, *end])
    w.client_version = "5.0.0"
    # A 3 s long poll is raised to the 5 s floor, then ends without messages.
    assert statuses(w.receive(group, topic, long_polling=3, timeout=20)) == [
        "MESSAGE_NOT_FOUND",
        *end,
    ]
    # Unknown topic: a NullPointerException on the proxy.
    assert statuses(w.receive(group, unique("missing"), timeout=20)) == [
        "INTERNAL_SERVER_ERROR",
        *end,
    ]


def test_receive_stream_and_message_shape(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    p = producer(wire, topic)
    for i in range(3):
        assert code_name(p.send(message(topic, b"m%d" % i, tag="x")).status.code) == "OK"
    c = consumer(wire, group, topic)
    stream = c.receive(group, topic, long_polling=5, timeout=20)
    # Status first, then the messages, then the delivery timestamp.
    assert collapse(statuses(stream)) == ["OK", "message", "delivery_timestamp"]
    got = [r.message for r in stream if r.WhichOneof("content") == "message"]
    while len(got) < 3:
        got += c.receive_messages(group, topic, 3 - len(got), long_polling=5)
    sp = got[0].system_properties
    assert sp.delivery_attempt == 1
    assert sp.receipt_handle
    assert sp.message_id
    assert sp.message_type == pb.NORMAL
    assert sp.HasField("born_timestamp")
    assert sp.HasField("store_timestamp")
    assert sp.HasField("queue_offset")
    assert sp.HasField("body_digest")
    assert not sp.HasField("invisible_duration")
    assert sp.tag == "x"
    assert code_name(c.ack(group, topic, *got).status.code) == "OK"


def test_ack_and_change_invisible_duration(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    topic, group = normal_topic(proxy_server, unique)
    p = producer(wire, topic)
    for i in range(3):
        p.send(message(topic, b"m%d" % i))
    c = consumer(wire, group, topic)
    got = c.receive_messages(group, topic, 3, long_polling=5)
    assert len(got) == 3
    a, b, d = got
    # Change invisible duration: OK and a new handle; then the old handle is stale.
    r = c.change_invisible(group, topic, a, 30)
    assert code_name(r.status.code) == "OK"
    assert r.receipt_handle
    assert r.receipt_handle != a.system_properties.receipt_handle
    # A stale (well-formed) handle is still answered OK with a new handle.
    r2 = c.change_invisible(group, topic, a, 30)
    assert code_name(r2.status.code) == "OK"
    assert r2.receipt_handle
    fresh = pb.Message()
    fresh.CopyFrom(a)
    fresh.system_properties.receipt_handle = r.receipt_handle
    # Ack: OK, and OK again for an acked or stale handle (no effect, no error).
    assert code_name(c.ack(group, topic, fresh).status.code) == "OK"
    ack = c.ack(group, topic, fresh, a, b)
    assert code_name(ack.status.code) == "OK"
    assert [code_name(e.status.code) for e in ack.entries] == ["OK"] * 3
    # A handle that does not parse: INTERNAL_SERVER_ERROR.
    garbage = pb.Message()
    garbage.CopyFrom(d)
    garbage.system_properties.receipt_handle = "garbage"
    ack = c.ack(group, topic, garbage)
    assert code_name(ack.status.code) == "INTERNAL_SERVER_ERROR"
    assert [code_name(e.status.code) for e in ack.entries] == ["INTERNAL_SERVER_ERROR"]
    r = c.change_invisible(group, topic, garbage, 30)
    assert code_name(r.status.code) == "INTERNAL_SERVER_ERROR"
    assert not r.receipt_handle
    assert code_name(c.ack(group, topic, d).status.code) == "OK"


def test_errors_are_statuses_not_grpc_errors(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    # Every refusal above came as a Status inside an OK gRPC answer; a wrong method is the only
    # gRPC-level error.
    w = wire()
    call = w.channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchMethod")
    with pytest.raises(grpc.RpcError) as exc:
        call(b"", metadata=w.metadata(), timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert Code.Value("OK") == 20000


def test_fifo_receive_hands_out_a_groups_messages_in_order_then_holds_the_group(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    # A FIFO receive may carry several consecutive messages of one message group (the broker
    # pops a batch of the group's queue, in order); the group's next message is held back until
    # every one of them is settled.
    topic, group = unique("f"), unique("fg")
    proxy_server.setup({topic: "FIFO"}, fifo_groups=[group])
    p = producer(wire, topic)
    for i in range(3):
        r = p.send(message(topic, b"a%d" % i, kind=pb.FIFO, group="A"))
        assert code_name(r.status.code) == "OK"
    c = consumer(wire, group, topic)
    first = [
        r.message
        for r in c.receive(group, topic, long_polling=5, timeout=20)
        if r.WhichOneof("content") == "message"
    ]
    assert [m.body for m in first] == [b"a0", b"a1", b"a2"]
    r = p.send(message(topic, b"a3", kind=pb.FIFO, group="A"))
    assert code_name(r.status.code) == "OK"
    assert c.receive_messages(group, topic, 1, rounds=1, long_polling=2) == []
    assert code_name(c.ack(group, topic, *first[:2]).status.code) == "OK"
    assert c.receive_messages(group, topic, 1, rounds=1, long_polling=2) == []
    assert code_name(c.ack(group, topic, first[2]).status.code) == "OK"
    rest = c.receive_messages(group, topic, 1, long_polling=5)
    assert [m.body for m in rest] == [b"a3"]
    assert code_name(c.ack(group, topic, *rest).status.code) == "OK"


def test_body_digest_is_upper_case_md5(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    # The proxy attaches the MD5 of each delivered body as 32 upper-case hex digits; both
    # official clients recompute exactly that string and compare. A CRC32 cannot please both:
    # the Java client writes it without leading zeros, the Python client with them, so one in
    # 16 messages looked corrupted to one of them (a FIFO one went to the DLQ).
    topic, group = normal_topic(proxy_server, unique)
    # CRC32s with 1, 2 and 3 leading zero digits, and one without; MD5s with leading zeros.
    bodies = [b"crc-3", b"crc-320", b"crc-31", b"hello", b"md5-495"]
    p = producer(wire, topic)
    for body in bodies:
        assert code_name(p.send(message(topic, body)).status.code) == "OK"
    c = consumer(wire, group, topic)
    got = c.receive_messages(group, topic, len(bodies), long_polling=5)
    digests = {m.body: m.system_properties.body_digest for m in got}
    assert {b: (pb.DigestType.Name(d.type), d.checksum) for b, d in digests.items()} == {
        b: ("MD5", hashlib.md5(b).hexdigest().upper()) for b in bodies
    }
    assert digests[b"md5-495"].checksum.startswith("00")
    assert code_name(c.ack(group, topic, *got).status.code) == "OK"


def test_transaction_id_and_check_back_properties(
    server: Server, unique: Callable[[str], str]
) -> None:
    # The proxy answers a transactional send with the message id as transaction id, and a
    # check-back's message carries it (``__transactionId__``) and the number of checks so far
    # (``TRANSACTION_CHECK_TIMES``) as user properties: the official clients hand both to the
    # application's checker, and to consumers once committed.
    topic = unique("t")
    server.setup({topic: "TRANSACTION"})
    with Wire(server.address) as p:
        p.producer(topic)
        telemetry = p.stream
        sent = p.send(message(topic, b"orphan", kind=pb.TRANSACTION, properties={"a": "1"}))
        assert code_name(sent.status.code) == "OK"
        (entry,) = sent.entries
        assert entry.transaction_id == entry.message_id
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "no check-back"
            cmd = telemetry.next(timeout=60)
            assert cmd is not None
            if cmd.WhichOneof("command") == "recover_orphaned_transaction_command":
                break
        check = cmd.recover_orphaned_transaction_command
        assert check.transaction_id == entry.transaction_id
        assert check.message.system_properties.message_id == entry.message_id
        assert dict(check.message.user_properties) == {
            "a": "1",
            "__transactionId__": entry.transaction_id,
            "TRANSACTION_CHECK_TIMES": "1",
        }
        telemetry.close()


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_trace_context_survives_send_and_receive(
    proxy_server: Server, unique: Callable[[str], str], wire: Callable[[], Wire]
) -> None:
    # The system field `trace_context` comes back as it was sent, and the proxy repeats it as the
    # user property `TRACE_CONTEXT` (the stored message's property); `traceparent` /
    # `tracestate` user properties (what the OpenTelemetry Java instrumentation writes) come
    # back as user properties and fill no system field.
    topic, group = normal_topic(proxy_server, unique)
    p = producer(wire, topic)
    with_field = message(topic, b"field", properties={"k": "v"})
    with_field.system_properties.trace_context = TRACEPARENT
    as_props = message(
        topic, b"props", properties={"traceparent": TRACEPARENT, "tracestate": "a=1,b=2"}
    )
    for m in (with_field, as_props, message(topic, b"none")):
        assert code_name(p.send(m).status.code) == "OK"
    c = consumer(wire, group, topic)
    got = c.receive_messages(group, topic, 3, long_polling=5)
    while len(got) < 3:
        got += c.receive_messages(group, topic, 3 - len(got), long_polling=5)
    by_body = {m.body: m for m in got}
    field = by_body[b"field"]
    assert field.system_properties.trace_context == TRACEPARENT
    assert dict(field.user_properties) == {"k": "v", "TRACE_CONTEXT": TRACEPARENT}
    props = by_body[b"props"]
    assert not props.system_properties.HasField("trace_context")
    assert dict(props.user_properties) == {"traceparent": TRACEPARENT, "tracestate": "a=1,b=2"}
    assert not by_body[b"none"].system_properties.HasField("trace_context")
    assert code_name(c.ack(group, topic, *got).status.code) == "OK"
