"""Faithfulness: the official Apache RocketMQ 5 Java client (``rocketmq-client-java``, unchanged,
driven by ``tests/java/FerryPeer.java``) against BOTH servers, the embedded broker and a real
Apache RocketMQ 5 proxy, and exchanging messages with ferrymq in both directions.

The Java client is a strict peer: what it does against the real server it must do against the
embedded broker. Each scenario runs Java → Java, ferrymq → Java and Java → ferrymq at once (two
consumer groups on one topic each see every message): keys, tag, properties, message group and
delivery time must arrive intact. Waits poll a condition with a deadline; nothing asserts timing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ferrymq import Message, MessageView, Producer, TransactionResolution
from java_peer import JavaPeer, JavaProcess, body_of
from servers import Collector, EmbeddedServer, Server

PROPS = {"origin": "peer-test", "colour": "blue"}


def by_body(events: list[dict[str, Any]]) -> dict[bytes, dict[str, Any]]:
    return {body_of(e): e for e in events}


#: Properties a server adds to transactional messages (tests/test_conformance.py).
TX_PROPS = ("__transactionId__", "TRANSACTION_CHECK_TIMES")


def user_props(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in TX_PROPS}


def assert_java_view(e: dict[str, Any], topic: str, i: int, prefix: str, tag: str) -> None:
    """A message as the Java consumer saw it: the fields its producer set."""
    assert e["topic"] == topic
    assert e["tag"] == tag
    assert e["keys"] == [f"{prefix}-key-{i}"]
    assert user_props(e["props"]) == {**PROPS, "seq": str(i)}


def assert_ferry_view(m: MessageView, topic: str, i: int, prefix: str, tag: str) -> None:
    assert m.topic == topic
    assert m.tag == tag
    assert list(m.keys) == [f"{prefix}-key-{i}"]
    assert user_props(m.properties) == {**PROPS, "seq": str(i)}
    assert not m.corrupted


def ferry_message(topic: str, i: int, prefix: str, tag: str, **kw: Any) -> Message:
    return Message(
        topic,
        f"{prefix}{i}".encode(),
        keys=[f"{prefix}-key-{i}"],
        tag=tag,
        properties={**PROPS, "seq": str(i)},
        **kw,
    )


def java_produce(java: JavaPeer, server: Server, topic: str, prefix: str, **kw: Any) -> JavaProcess:
    props = ",".join(f"{k}={v}" for k, v in PROPS.items())
    return java.start(
        "produce",
        endpoints=server.endpoints,
        topic=topic,
        body_prefix=prefix,
        key_prefix=f"{prefix}-key-",
        props=props,
        **kw,
    )


def test_normal_messages_both_ways(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer, closing: list[Any]
) -> None:
    topic, jgroup, fgroup = unique("t"), unique("gj"), unique("gf")
    server.setup({topic: "NORMAL"}, [jgroup, fgroup])
    n = 20
    jc = java_peer.start(
        "push", endpoints=server.endpoints, topic=topic, group=jgroup, count=2 * n, timeout=60
    )
    fc = Collector(server.endpoints, fgroup, topic, closing)
    jc.wait_for("ready")
    jp = java_produce(java_peer, server, topic, "j", count=n, tag="TagJ", threads=4)
    with Producer(server.endpoints, topics=[topic]) as p:
        for i in range(n):
            p.send(ferry_message(topic, i, "f", "TagF"))
    jp.finish()
    assert len(jp.of("sent")) == n
    assert jc.wait_for("done", 90)["complete"]
    seen = by_body(jc.of("msg"))
    assert len(jc.of("msg")) == 2 * n  # no duplicates
    for i in range(n):
        assert_java_view(seen[b"j%d" % i], topic, i, "j", "TagJ")
        assert_java_view(seen[b"f%d" % i], topic, i, "f", "TagF")
        assert seen[b"f%d" % i]["group"] is None
        assert not set(TX_PROPS) & set(seen[b"f%d" % i]["props"])
    # Java -> ferrymq: ids as the Java producer reported them.
    sent_ids = {e["id"] for e in jp.of("sent")}
    got = {m.body: m for m in fc.wait(2 * n)}
    for i in range(n):
        m = got[b"j%d" % i]
        assert_ferry_view(m, topic, i, "j", "TagJ")
        assert m.message_id in sent_ids


def check_fifo_order(order: dict[str, list[int]], per_group: dict[str, int]) -> None:
    """Each message group's sequence numbers arrived complete and in order."""
    assert set(order) == set(per_group)
    for g, seqs in order.items():
        assert seqs == sorted(seqs), f"message group {g} out of order"
        assert len(seqs) == per_group[g], f"message group {g}: {len(seqs)} of {per_group[g]}"


def test_fifo_20_groups_in_order_nothing_discarded(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer, closing: list[Any]
) -> None:
    # ferrymq sends 20 message groups x 200 messages (x 50 on the real server, where the Java
    # client consumes FIFO slowly: the reference needs no volume, the embedded broker does, for
    # the one-in-16 digest failures), the Java producer 20 x 10; both consumer groups (Java's
    # and ferrymq's) consume all of them, each message group in order.
    topic, jgroup, fgroup = unique("t"), unique("gj"), unique("gf")
    server.setup({topic: "FIFO"}, fifo_groups=[jgroup, fgroup])
    groups, java_per_group = 20, 10
    per_group = 200 if isinstance(server, EmbeddedServer) else 50
    n, jn = groups * per_group, groups * java_per_group
    expected = {f"fg{g}": per_group for g in range(groups)}
    expected |= {f"jg{g}": java_per_group for g in range(groups)}
    jc = java_peer.start(
        "push",
        endpoints=server.endpoints,
        topic=topic,
        group=jgroup,
        count=n + jn,
        timeout=90,
        linger=0.5,
    )
    fc = Collector(server.endpoints, fgroup, topic, closing)
    jc.wait_for("ready")
    jp = java_produce(
        java_peer,
        server,
        topic,
        "j",
        count=jn,
        kind="fifo",
        groups=groups,
        group_prefix="jg",
        tag="TagJ",
    )
    with Producer(server.endpoints, topics=[topic]) as p:
        p.send_batch(
            [
                ferry_message(topic, i, "f", "TagF", message_group=f"fg{i % groups}")
                for i in range(n)
            ]
        )
    jp.finish()
    assert len(jp.of("sent")) == jn
    done = jc.wait_for("done", 120)
    msgs = jc.of("msg")
    # Every message consumed once, none rejected as corrupted (it would never reach the
    # listener: a corrupted FIFO message goes straight to the DLQ).
    assert done["complete"], f"the Java consumer got {done['received']} of {n + jn}"
    assert len(msgs) == n + jn
    java_order: dict[str, list[int]] = defaultdict(list)
    for e in msgs:
        java_order[e["group"]].append(int(e["props"]["seq"]))
        assert e["attempt"] == 1
        assert e["tag"] == ("TagJ" if e["group"].startswith("j") else "TagF")
    check_fifo_order(java_order, expected)
    ferry_order: dict[str, list[int]] = defaultdict(list)
    for m in fc.wait(n + jn, 120):
        assert not m.corrupted
        assert m.message_group is not None
        ferry_order[m.message_group].append(int(m.properties["seq"]))
    check_fifo_order(ferry_order, expected)
    if isinstance(server, EmbeddedServer):
        assert server.broker.dead_letters(jgroup) == []
        assert server.broker.dead_letters(fgroup) == []


def test_delay_messages_both_ways(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer, closing: list[Any]
) -> None:
    topic, jgroup, fgroup = unique("t"), unique("gj"), unique("gf")
    server.setup({topic: "DELAY"}, [jgroup, fgroup])
    n, delay = 3, 2.0
    jc = java_peer.start(
        "simple", endpoints=server.endpoints, topic=topic, group=jgroup, count=2 * n, timeout=60
    )
    fc = Collector(server.endpoints, fgroup, topic, closing)
    jc.wait_for("ready")
    t0 = time.time()
    jp = java_produce(
        java_peer, server, topic, "j", count=n, kind="delay", delay_ms=int(delay * 1000), tag="D"
    )
    with Producer(server.endpoints, topics=[topic]) as p:
        for i in range(n):
            p.send(ferry_message(topic, i, "f", "D", delivery_time=t0 + delay))
    jp.finish()
    assert jc.wait_for("done", 60)["complete"]
    seen = by_body(jc.of("msg"))
    assert len(seen) == 2 * n
    for prefix in ("j", "f"):
        for i in range(n):
            e = seen[b"%s%d" % (prefix.encode(), i)]
            assert_java_view(e, topic, i, prefix, "D")
            assert e["delivery_ts"] is not None
            assert e["recv_ms"] >= e["delivery_ts"] - 50  # not delivered before its time
            assert e["delivery_ts"] >= t0 * 1000 + delay * 1000 - 1000
    got = {m.body: m for m in fc.wait(2 * n)}
    for i in range(n):
        m = got[b"j%d" % i]
        assert_ferry_view(m, topic, i, "j", "D")
        assert m.delivery_timestamp is not None
        assert abs(m.delivery_timestamp * 1000 - seen[b"j%d" % i]["delivery_ts"]) < 1


def resolve(m: MessageView) -> TransactionResolution:
    """ferrymq's checker: answers from the message (a server checks at least once, and may ask
    any producer of the topic, including about the Java producer's transactions)."""
    if m.body.startswith((b"jr", b"fr")):
        return TransactionResolution.ROLLBACK
    return TransactionResolution.COMMIT


def test_transactions_commit_rollback_and_check_back(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer, closing: list[Any]
) -> None:
    topic, jgroup, fgroup = unique("t"), unique("gj"), unique("gf")
    server.setup({topic: "TRANSACTION"}, [jgroup, fgroup])
    n = 2
    # Committed: jc*, fc*; rolled back: jr*, fr*; orphans resolved by check-back: jo*, fo*.
    # Each consumer group sees 4n messages.
    want = {b"%s%d" % (p.encode(), i) for p in ("jc", "jo", "fc", "fo") for i in range(n)}
    jc = java_peer.start(
        "push",
        endpoints=server.endpoints,
        topic=topic,
        group=jgroup,
        count=len(want),
        timeout=90,
        linger=1,
    )
    fcol = Collector(server.endpoints, fgroup, topic, closing)
    jc.wait_for("ready")
    tx_options: dict[str, Any] = {"tag": "T", "check_rollback_prefix": "jr,fr"}
    # The Java orphans first, while the Java producer is the topic's only producer: the server
    # must ask it (RecoverOrphanedTransaction over its Telemetry stream).
    orphan = java_produce(
        java_peer,
        server,
        topic,
        "jo",
        count=n,
        tx="orphan",
        check="commit",
        check_count=n,
        check_wait=60,
        **tx_options,
    )
    assert orphan.wait_for("checked", 90)["checks"] >= n
    orphan.finish()
    checks = by_body(orphan.of("check"))
    for i in range(n):
        e = checks[b"jo%d" % i]
        assert_java_view(e, topic, i, "jo", "T")
        assert e["props"]["__transactionId__"] == e["id"]
        assert int(e["props"]["TRANSACTION_CHECK_TIMES"]) >= 1
    commit = java_produce(java_peer, server, topic, "jc", count=n, tx="commit", **tx_options)
    rollback = java_produce(java_peer, server, topic, "jr", count=n, tx="rollback", **tx_options)
    with Producer(server.endpoints, topics=[topic], transaction_checker=resolve) as p:
        for i in range(n):
            with p.begin_transaction() as tx:
                tx.send(ferry_message(topic, i, "fc", "T"))
            tx2 = p.begin_transaction()
            tx2.send(ferry_message(topic, i, "fr", "T"))
            tx2.rollback()
            # An orphan: neither committed nor rolled back; the server asks a producer.
            p.begin_transaction().send(ferry_message(topic, i, "fo", "T"))
        commit.finish()
        rollback.finish()
        assert jc.wait_for("done", 90)["complete"]
        got = {m.body: m for m in fcol.wait(len(want), 60)}
    seen = by_body(jc.of("msg"))
    assert set(seen) == want  # nothing rolled back came
    assert len({e["id"] for e in jc.of("msg")}) == len(want)
    for prefix in ("jc", "jo", "fc", "fo"):
        for i in range(n):
            e = seen[b"%s%d" % (prefix.encode(), i)]
            assert_java_view(e, topic, i, prefix, "T")
            # Committed messages keep their transaction id; resolved orphans their check count.
            assert e["props"]["__transactionId__"] == e["id"]
            if prefix.endswith("o"):
                assert int(e["props"]["TRANSACTION_CHECK_TIMES"]) >= 1
    assert set(got) == want
    for prefix in ("jc", "jo"):
        for i in range(n):
            assert_ferry_view(got[b"%s%d" % (prefix.encode(), i)], topic, i, prefix, "T")


def test_simple_consumer_receive_and_ack(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    n = 10
    jp = java_produce(java_peer, server, topic, "j", count=n, tag="S")
    with Producer(server.endpoints, topics=[topic]) as p:
        for i in range(n):
            p.send(ferry_message(topic, i, "f", "S"))
    jp.finish()
    first = java_peer.run(
        "simple",
        endpoints=server.endpoints,
        topic=topic,
        group=group,
        count=2 * n,
        invisible=10,
        timeout=60,
    )
    seen = by_body(first.of("msg"))
    assert len(seen) == 2 * n
    for prefix in ("j", "f"):
        for i in range(n):
            e = seen[b"%s%d" % (prefix.encode(), i)]
            assert_java_view(e, topic, i, prefix, "S")
            assert e["acked"]
            assert e["attempt"] == 1
    # Acked: the group's acked offset covers every message, nothing is in flight.
    if isinstance(server, EmbeddedServer):
        for q in server.broker.stats()["topics"][topic]["queues"]:
            g = q["groups"].get(group)
            if q["max_offset"] > q["min_offset"]:
                assert g is not None
                assert (g["acked_offset"], g["inflight"]) == (q["max_offset"], 0)


def test_java_messages_with_a_traceparent_property_are_read_as_trace_context(
    server: Server, unique: Callable[[str], str], java_peer: JavaPeer, closing: list[Any]
) -> None:
    # What the OpenTelemetry instrumentation of the Java client writes: `traceparent` and
    # `tracestate` user properties (the client itself has no trace-context API).
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    topic, group = unique("t"), unique("gf")
    server.setup({topic: "NORMAL"}, [group])
    fc = Collector(server.endpoints, group, topic, closing)
    jp = java_peer.start(
        "produce",
        endpoints=server.endpoints,
        topic=topic,
        body_prefix="j",
        count=3,
        props=f"traceparent={tp},tracestate=rojo=00f067aa0ba902b7,origin=java",
    )
    jp.finish()
    got = fc.wait(3)
    assert {m.body for m in got} == {b"j0", b"j1", b"j2"}
    for m in got:
        assert (m.trace_context, m.trace_state) == (tp, "rojo=00f067aa0ba902b7")
        assert m.properties == {"origin": "java", "seq": m.body[1:].decode()}
