"""RocketMQ over the classic remoting protocol, on the embedded broker and on a real RocketMQ 5.3
(name server + broker): batched sends in which every message keeps its own metadata, and the
offset-based ``PullConsumer`` (assign / seek / poll / commit)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

import pytest

import ferrymq
from ferrymq import InvalidArgumentError, Message, MessageQueue, PullConsumer
from ferrymq.testing import EmbeddedBroker
from servers import Server
from waiting import in_forked_child


def _messages(topic: str, n: int, tag_of: Callable[[int], str] | None = None) -> list[Message]:
    return [
        Message(
            topic,
            b"body-%d" % i,
            keys=[f"k{i}", f"id-{i}"],
            tag=(tag_of(i) if tag_of else f"t{i % 3}"),
            properties={"n": str(i), "parity": "even" if i % 2 == 0 else "odd"},
        )
        for i in range(n)
    ]


def _drain(c: PullConsumer, want: int, timeout: float = 30.0) -> list[ferrymq.MessageView]:
    got: list[ferrymq.MessageView] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(c.poll(512, timeout=1.0))
    return got


def test_batch_send_keeps_each_messages_metadata_and_reads_back_by_offset(
    server: Server, unique: Callable[[str], str]
) -> None:
    topic = unique("rb")
    server.setup({topic: "NORMAL"})
    n = 3000
    with ferrymq.Producer(server.remoting_endpoint) as p:
        receipts = p.send_batch(_messages(topic, n))
    assert len(receipts) == n
    assert len({r.message_id for r in receipts}) == n
    # Offsets are consecutive per queue and unique.
    assert len({(r.broker_name, r.queue_id, r.offset) for r in receipts}) == n

    with PullConsumer(server.remoting_endpoint, unique("g")) as c:
        queues = c.queues(topic)
        assert len(queues) == 8
        assert all(isinstance(q, MessageQueue) and q.topic == topic for q in queues)
        c.assign(queues)
        c.seek_to_beginning()
        got = _drain(c, n)
    assert len(got) == n
    by_id = {m.message_id: m for m in got}
    for i, r in enumerate(receipts):
        m = by_id[r.message_id]
        assert m.body == b"body-%d" % i
        assert list(m.keys) == [f"k{i}", f"id-{i}"]
        assert m.tag == f"t{i % 3}"
        assert m.properties["n"] == str(i)
        assert m.properties["parity"] == ("even" if i % 2 == 0 else "odd")
        assert (m.broker_name, m.queue_id, m.offset) == (r.broker_name, r.queue_id, r.offset)
        assert m.store_timestamp is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_makes_message_ids_of_its_own(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic = unique("rf")
    broker.create_topic(topic, "NORMAL", 4)

    def ids() -> list[str]:
        with ferrymq.Producer(broker.remoting_endpoint) as p:
            return [r.message_id for r in p.send_batch(_messages(topic, 3))]

    parent = ids()

    pid, joined = in_forked_child(lambda: f"{os.getpid()}:{','.join(ids())}").split(":")
    child = joined.split(",")
    # UNIQ_KEY: host (8 hex digits), process id (4), the process's random number (8), time, count.
    assert {i[8:12] for i in parent} == {f"{os.getpid() & 0xFFFF:04X}"}
    assert {i[8:12] for i in child} == {f"{int(pid) & 0xFFFF:04X}"}, child
    assert {i[8:20] for i in child}.isdisjoint(i[8:20] for i in parent)
    assert len(set(parent + child)) == 6


def test_pull_consumer_seek_commit_committed_and_times(
    server: Server, unique: Callable[[str], str]
) -> None:
    topic, group = unique("pc"), unique("g")
    server.setup({topic: "NORMAL"})
    with ferrymq.Producer(server.remoting_endpoint) as p:
        first = p.send_batch(_messages(topic, 40))
        cut = time.time()
        while time.time() <= cut + 0.01:  # the next batch is stored strictly after `cut`
            pass
        second = p.send_batch(_messages(topic, 40))
    with PullConsumer(server.remoting_endpoint, group, auto_offset_reset="earliest") as c:
        queues = c.queues(topic)
        c.assign(queues)
        assert c.assignment() == sorted(queues)
        assert c.committed(queues) == dict.fromkeys(queues)
        ends = c.end_offsets(queues)
        assert sum(ends.values()) == 80
        assert all(v == 0 for v in c.beginning_offsets(queues).values())
        # Without a commit, "earliest" starts at the beginning.
        assert all(c.position(q) == 0 for q in queues)
        got = _drain(c, 80)
        assert len(got) == 80
        assert all(c.position(q) == ends[q] for q in queues)
        # Commit the positions; the group sees them.
        c.commit()
        assert c.committed(queues) == ends
        # offsets_for_times: the second batch starts after `cut`.
        found = c.offsets_for_times(dict.fromkeys(queues, cut))
        second_ids = {r.message_id for r in second}
        for q, off in found.items():
            in_q = [r for r in second if (r.broker_name, r.queue_id) == (q.broker, q.queue_id)]
            if in_q:
                assert off == min(r.offset for r in in_q)
        assert c.offsets_for_times(dict.fromkeys(queues, time.time() + 3600)) == dict.fromkeys(
            queues
        )
        # Seek one queue back and read it again, exactly.
        q0 = MessageQueue.of(next(m for m in got if m.message_id in second_ids))
        start = found[q0]
        assert start is not None
        c.seek(q0, start)
        again = _drain(c, ends[q0] - start)
        assert [m.offset for m in again] == list(range(start, ends[q0]))
        assert all(MessageQueue.of(m) == q0 for m in again)
        # Commit explicit offsets.
        c.commit({q0: start})
        assert c.committed([q0]) == {q0: start}
    # A new consumer of the group starts at the committed offsets.
    with PullConsumer(server.remoting_endpoint, group) as c2:
        c2.assign(queues)
        assert c2.position(q0) == start
    assert {r.message_id for r in first}.isdisjoint(second_ids)


def test_poll_waits_for_new_messages_and_returns_empty_on_timeout(
    server: Server, unique: Callable[[str], str]
) -> None:
    topic = unique("lp")
    server.setup({topic: "NORMAL"})
    with PullConsumer(server.remoting_endpoint, unique("g")) as c:
        c.assign(c.queues(topic))
        c.seek_to_end()
        t0 = time.monotonic()
        assert c.poll(10, timeout=0.3) == []
        assert time.monotonic() - t0 >= 0.3
        polled: list[ferrymq.MessageView] = []
        started = threading.Event()

        def consume() -> None:
            started.set()
            deadline = time.monotonic() + 30
            while not polled and time.monotonic() < deadline:
                polled.extend(c.poll(10, timeout=5.0))

        t = threading.Thread(target=consume)
        t.start()
        started.wait()
        with ferrymq.Producer(server.remoting_endpoint) as p:
            r = p.send(Message(topic, b"late", tag="x"))
        t.join(35)
        assert [m.message_id for m in polled] == [r.message_id]


def test_tag_filter_is_exact(server: Server, unique: Callable[[str], str]) -> None:
    topic = unique("tf")
    server.setup({topic: "NORMAL"})
    with ferrymq.Producer(server.remoting_endpoint) as p:
        p.send_batch(_messages(topic, 60, tag_of=lambda i: ["a", "b", "ab"][i % 3]))
    with PullConsumer(server.remoting_endpoint, unique("g"), tag_filter="a || ab") as c:
        c.assign(c.queues(topic))
        c.seek_to_beginning()
        got = _drain(c, 40)
        assert len(got) == 40
        assert {m.tag for m in got} == {"a", "ab"}
        assert c.poll(10, timeout=0) == []


def test_async_pull_consumer(server: Server, unique: Callable[[str], str]) -> None:
    topic = unique("as")
    server.setup({topic: "NORMAL"})

    async def main() -> list[int]:
        p = ferrymq.Producer(server.remoting_endpoint)
        await p.start_async()
        rs = await p.send_batch_async(_messages(topic, 20))
        await p.close_async()
        async with PullConsumer(server.remoting_endpoint, unique("g")) as c:
            queues = await c.queues_async(topic)
            c.assign(queues)
            await c.seek_to_beginning_async()
            got: list[ferrymq.MessageView] = []
            while len(got) < 20:
                got.extend(await c.poll_async(64, timeout=2.0))
            await c.commit_async()
            committed = await c.committed_async(queues)
            assert committed == await c.end_offsets_async(queues)
        assert {m.message_id for m in got} == {r.message_id for r in rs}
        return [m.offset for m in got]

    assert len(asyncio.run(main())) == 20


def test_bad_input_names_the_parameter(server: Server, unique: Callable[[str], str]) -> None:
    with pytest.raises(InvalidArgumentError, match="endpoints"):
        PullConsumer("127.0.0.1:8081", "g")
    with pytest.raises(InvalidArgumentError, match="group"):
        PullConsumer(server.remoting_endpoint, "")
    with pytest.raises(InvalidArgumentError, match="auto_offset_reset"):
        PullConsumer(server.remoting_endpoint, "g", auto_offset_reset="smallest")
    topic = unique("bad")
    server.setup({topic: "NORMAL"})
    with PullConsumer(server.remoting_endpoint, unique("g")) as c:
        q = c.queues(topic)[0]
        with pytest.raises(InvalidArgumentError, match="queue"):
            c.seek(q, 0)  # not assigned
        c.assign([q])
        with pytest.raises(InvalidArgumentError, match="offset"):
            c.seek(q, -1)
        with pytest.raises(InvalidArgumentError, match="max_messages"):
            c.poll(0)
        with pytest.raises(InvalidArgumentError, match="offsets"):
            c.commit({q: -5})
        with pytest.raises(InvalidArgumentError, match="timestamps"):
            c.offsets_for_times({q: float("nan")})
    with pytest.raises(ferrymq.ClientClosedError):
        c.poll(1, timeout=0)
    with (
        ferrymq.Producer(server.remoting_endpoint) as p,
        pytest.raises(InvalidArgumentError, match="produce"),
    ):
        p.produce(Message(topic, b"x"))


def test_batch_written_over_remoting_is_read_intact_by_the_official_client(
    server: Server, unique: Callable[[str], str]
) -> None:
    rocketmq = pytest.importorskip("rocketmq")
    topic, group = unique("oc"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    n = 60
    with ferrymq.Producer(server.remoting_endpoint) as p:
        receipts = p.send_batch(_messages(topic, n))
    sent = {r.message_id: i for i, r in enumerate(receipts)}
    config = rocketmq.ClientConfiguration(
        server.endpoints, rocketmq.Credentials(), request_timeout=5
    )
    consumer = rocketmq.SimpleConsumer(
        config, group, {topic: rocketmq.FilterExpression()}, await_duration=2
    )
    consumer.startup()
    got = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            try:
                batch = consumer.receive(32, 15)
            except Exception:  # the official client's settings may still be in flight
                time.sleep(0.2)
                continue
            for m in batch:
                got[m.message_id] = m
                consumer.ack(m)
    finally:
        consumer.shutdown()
    assert set(got) == set(sent)
    for mid, m in got.items():
        i = sent[mid]
        assert m.body == b"body-%d" % i
        assert sorted(m.keys) == sorted([f"k{i}", f"id-{i}"])
        assert m.tag == f"t{i % 3}"
        assert m.properties["n"] == str(i)
