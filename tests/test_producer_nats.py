"""``ferrymq.Producer("nats://…")``: the one Producer publishing to NATS JetStream (real
nats-server), with the receipts typed by the shared ``Receipt`` interface."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import ferrymq
from _nats_server import NatsServer, free_port, read_stream
from ferrymq import InvalidArgumentError, Message, NatsSendReceipt, Receipt

pytestmark = pytest.mark.nats


def test_send_publishes_to_jetstream_with_a_typed_receipt(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    subject = f"s{tok}.a"
    with ferrymq.Producer(nats_server.url, request_timeout=timedelta(seconds=5)) as p:
        assert p.started
        r = p.send(Message(subject, b"one", properties={"h": "v"}))
        assert isinstance(r, Receipt)
        assert isinstance(r, NatsSendReceipt)
        assert (r.topic, r.stream, r.sequence, r.duplicate) == (subject, f"S{tok}", 1, False)
        batch = p.send_batch([Message(subject, b"%d" % i) for i in range(5)])
        assert [b.sequence for b in batch] == [2, 3, 4, 5, 6]
        delivered: list[tuple[object, object]] = []
        p.produce(Message(subject, b"produced"), lambda e, rr: delivered.append((e, rr)))
        assert p.flush(timedelta(seconds=1)) == 0
        assert len(delivered) == 1
        assert delivered[0][0] is None
        produced = delivered[0][1]
        assert isinstance(produced, NatsSendReceipt)
        assert produced.sequence == 7
    got = read_stream(js, f"S{tok}", 7)
    assert [m.body for m in got] == [b"one", *(b"%d" % i for i in range(5)), b"produced"]
    assert got[0].properties.get("h") == "v"
    # the receipt's id is the Nats-Msg-Id JetStream de-duplicates by
    assert got[0].message_id == r.message_id
    ids = {m.message_id for m in got}
    assert len(ids) == 7


def test_a_nats_msg_id_property_is_the_message_id(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    subject = f"s{tok}.id"
    with ferrymq.Producer(nats_server.url) as p:
        first = p.send_batch(
            [Message(subject, b"%d" % i, properties={"Nats-Msg-Id": f"w{i}"}) for i in range(3)]
        )
        # a resend (e.g. a retried Spark task) is recognised by its id and not stored again
        again = p.send(Message(subject, b"1", properties={"Nats-Msg-Id": "w1"}))
    assert [r.message_id for r in first] == ["w0", "w1", "w2"]
    assert [r.duplicate for r in first if isinstance(r, NatsSendReceipt)] == [False] * 3
    assert isinstance(again, NatsSendReceipt)
    assert (again.message_id, again.duplicate, again.sequence) == ("w1", True, 2)
    got = read_stream(js, f"S{tok}", 3)
    assert [(m.message_id, m.body) for m in got] == [("w0", b"0"), ("w1", b"1"), ("w2", b"2")]


def test_userinfo_stays_out_of_repr_and_endpoints() -> None:
    p = ferrymq.Producer(f"nats://u:secret@127.0.0.1:{free_port()}")
    assert "secret" not in repr(p)
    assert "secret" not in p.endpoints


def test_options_of_other_protocols_are_refused() -> None:
    for kwargs, name in [
        ({"namespace": "ns"}, "namespace"),
        ({"max_attempts": 2}, "max_attempts"),
        ({"topics": ["t"]}, "topics"),
        ({"jmq_options": {}}, "jmq_options"),
        ({"credentials": ("only-user",)}, "credentials"),
        ({"request_timeout": float("nan")}, "request_timeout"),
    ]:
        with pytest.raises(InvalidArgumentError, match=name):
            ferrymq.Producer("nats://127.0.0.1:4222", **kwargs)  # type: ignore[arg-type]


def test_transactions_and_recall_are_refused_by_name(nats_server: NatsServer) -> None:
    with ferrymq.Producer(nats_server.url) as p:
        with pytest.raises(InvalidArgumentError, match="begin_transaction"):
            p.begin_transaction()
        with pytest.raises(InvalidArgumentError, match="recall"):
            p.recall("t", "h")
        with pytest.raises(InvalidArgumentError, match="timeout"):
            p.poll(timedelta(days=-1))
        with pytest.raises(InvalidArgumentError, match="timeout"):
            p.flush(1e20)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"keys": ["k"]}, "keys"),
        ({"tag": "t"}, "tag"),
        ({"message_group": "g"}, "message_group"),
        ({"delivery_time": 60.0}, "delivery_time"),
    ],
)
def test_what_jetstream_cannot_carry_is_refused_not_dropped(
    nats_server: NatsServer,
    nats_stream: tuple[ferrymq.JetStream, str],
    fields: dict[str, Any],
    named: str,
) -> None:
    js, tok = nats_stream
    subject = f"s{tok}.refused"
    m = Message(subject, b"x", **fields)
    with ferrymq.Producer(nats_server.url) as p:
        with pytest.raises(InvalidArgumentError, match=named):
            p.send(m)
        with pytest.raises(InvalidArgumentError, match=named):
            p.send_batch([Message(subject, b"ok"), m])
        with pytest.raises(InvalidArgumentError, match=named):
            p.produce(m)
        # Nothing of the refused calls was published; a plain message still is.
        p.send(Message(subject, b"plain"))
    assert [g.body for g in read_stream(js, f"S{tok}", 1)] == [b"plain"]
