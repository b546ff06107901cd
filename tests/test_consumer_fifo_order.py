"""FIFO push consumption in the client workflow's order, against the embedded broker.

The workflow defines FIFO order so: message B of a queue (of a message group, with the
accelerator) may start only once A was consumed and the broker accepted A's result (the ack,
retried until it lands, or the dead-letter forward). These tests make acks fail on the broker
and check that from inside the listener, and that nothing is lost or reordered when the broker
redelivers a message whose ack it refused. The same checks run with ``fifo_pipelining=True``,
whose documented weaker guarantee they must catch.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest

import ferrymq
from ferrymq import _native
from ferrymq.testing import EmbeddedBroker
from waiting import wait_for


def send_groups(endpoints: str, topic: str, groups: list[str], per_group: int) -> None:
    """``per_group`` messages for each message group, interleaved; the bodies are
    ``b"<group>:<index in group>"``."""
    with ferrymq.Producer(endpoints, topics=[topic]) as p:
        for i in range(per_group):
            for g in groups:
                p.send(ferrymq.Message(topic, f"{g}:{i}".encode(), message_group=g))


def one_group_per_queue(queues: int) -> list[str]:
    """A message group for each queue (the producer maps a group to a queue by its hash), so
    that a queue's order is its group's order."""
    by_queue: dict[int, str] = {}
    for i in range(1000):
        by_queue.setdefault(_native.fifo_queue_index(f"g{i}", queues), f"g{i}")
        if len(by_queue) == queues:
            break
    return [by_queue[q] for q in range(queues)]


def queue_state(b: EmbeddedBroker, topic: str, group: str) -> dict[int, tuple[int, int]]:
    """Per queue id: (offset below which the group settled everything, end offset)."""
    out = {}
    for q in b.stats()["topics"][topic]["queues"]:
        acked = q["groups"].get(group, {}).get("acked_offset", q["min_offset"])
        out[q["queue_id"]] = (acked, q["max_offset"])
    return out


def all_settled(b: EmbeddedBroker, topic: str, group: str) -> bool:
    return all(acked >= end for acked, end in queue_state(b, topic, group).values())


class Watch:
    """Listener: records every start (group, index, attempt) in order, and every start of a
    message while an earlier message of its queue was not settled on the broker yet."""

    def __init__(self, b: EmbeddedBroker, topic: str, group: str, *, strict: bool) -> None:
        self.b, self.topic, self.group, self.strict = b, topic, group, strict
        self.lock = threading.Lock()
        self.starts: list[tuple[str, int, int]] = []
        self.early: list[tuple[str, int, int]] = []
        self.fail: Callable[[ferrymq.MessageView], bool] = lambda m: False

    def __call__(self, m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        g, i = m.body.decode().split(":")
        start = (g, int(i), m.delivery_attempt)
        if self.strict:
            acked, _ = queue_state(self.b, self.topic, self.group)[m.queue_id]
            if acked < m.offset:
                with self.lock:
                    self.early.append(start)
        with self.lock:
            self.starts.append(start)
        return ferrymq.ConsumeResult.FAILURE if self.fail(m) else ferrymq.ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.starts)

    def out_of_order(self) -> dict[str, list[int]]:
        """Groups in which a message started after a later one of its group (starting the same
        message again is not a violation)."""
        by_group: dict[str, list[int]] = defaultdict(list)
        with self.lock:
            for g, i, _ in self.starts:
                by_group[g].append(i)
        return {g: s for g, s in by_group.items() if any(b < a for a, b in pairwise(s))}

    def consumed(self) -> set[tuple[str, int]]:
        with self.lock:
            return {(g, i) for g, i, _ in self.starts}


def fifo_topic(
    b: EmbeddedBroker, unique: Callable[[str], str], attempts: int, queues: int = 2
) -> tuple[str, str]:
    topic = unique("fifo")
    b.create_topic(topic, "FIFO", queues)
    group = unique("group")
    b.create_group(group, fifo=True, max_delivery_attempts=attempts, retry_backoff=[0.1, 0.2])
    return topic, group


def consumer(b: EmbeddedBroker, topic: str, group: str, listener: Any, **kw: Any) -> Any:
    return ferrymq.PushConsumer(b.endpoints, group, subscriptions=[topic], listener=listener, **kw)


@pytest.mark.parametrize("pipelining", [False, True], ids=["ordered", "pipelined"])
def test_a_message_starts_only_once_the_broker_accepted_the_previous_result(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str], pipelining: bool
) -> None:
    # Long polls are not woken when an ack unblocks a FIFO group: keep them short.
    b = make_broker(long_polling_max=1.0)
    topic, group = fifo_topic(b, unique, attempts=3, queues=4)
    # One message group per queue, so that the broker's figure of a queue (the offset below
    # which the consumer group settled everything) tells whether the message group's earlier
    # messages were all settled when one starts.
    groups = one_group_per_queue(4)
    send_groups(b.endpoints, topic, groups, per_group=10)
    # The first AckMessage calls fail (each is retried a second later); the second group's
    # fourth message fails once and the third group's sixth always (it goes to the dead-letter
    # queue after 3 attempts).
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage", count=4)
    watch = Watch(b, topic, group, strict=True)
    flaky, poison = f"{groups[1]}:3".encode(), f"{groups[2]}:5".encode()
    watch.fail = lambda m: m.body == poison or (m.body == flaky and m.delivery_attempt == 1)
    with consumer(b, topic, group, watch, fifo_pipelining=pipelining) as c:
        wait_for("every message settled", lambda: all_settled(b, topic, group))
        stats = c.stats()
    assert b.calls(0, "AckMessage") > 4
    assert stats["settle_retries"] >= 1
    assert stats["dead_lettered"] == 1
    assert [d["body"] for d in b.dead_letters(group)] == [poison]
    assert watch.consumed() == {(g, i) for g in groups for i in range(10)}
    assert watch.out_of_order() == {}
    if pipelining:
        # The documented weaker guarantee: the next messages run before the ack landed.
        assert watch.early
    else:
        assert watch.early == [], f"started before the previous result was accepted: {watch.early}"


@pytest.mark.parametrize(
    ("accelerator", "pipelining"),
    [(False, False), (True, False), (True, True)],
    ids=["ordered", "ordered-accelerator", "pipelined-accelerator"],
)
def test_a_redelivered_message_runs_before_the_rest_of_its_group(
    make_broker: Callable[..., EmbeddedBroker],
    unique: Callable[[str], str],
    accelerator: bool,
    pipelining: bool,
) -> None:
    # Acks fail while the broker restarts: it forgets the consumer, stops renewing its messages'
    # invisibility, and redelivers them a second later. The acks retried after that carry stale
    # handles, which the broker refuses with INVALID_RECEIPT_HANDLE, as a proxy does for a FIFO
    # group; the refusals and the redelivered copies tell the consumer that its copies are stale.
    b = make_broker(long_polling_max=1.0, auto_renew_invisible=1.0)
    topic, group = fifo_topic(b, unique, attempts=16)
    groups = [f"g{i}" for i in range(6)]
    send_groups(b.endpoints, topic, groups, per_group=5)
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage")
    watch = Watch(b, topic, group, strict=False)
    with consumer(
        b, topic, group, watch, fifo_accelerator=accelerator, fifo_pipelining=pipelining
    ) as c:
        # Ordered: each lane consumed its first message and waits for its ack; pipelined: the
        # lanes ran through everything they received.
        wait_for("lanes started", lambda: watch.count() >= (30 if pipelining else 1))
        b.restart(0)
        # Every message is received once before it is redelivered: more than 30 receptions
        # mean a redelivery.
        wait_for("a redelivery received", lambda: c.stats()["received"] > 30)
        b.clear_faults(0)
        wait_for("every message settled", lambda: all_settled(b, topic, group))
        stats = c.stats()
    assert watch.consumed() == {(g, i) for g in groups for i in range(5)}
    if pipelining:
        assert watch.out_of_order(), "a redelivered message should have followed later ones"
    else:
        assert watch.out_of_order() == {}
        assert stats["left_for_redelivery"] >= 1
