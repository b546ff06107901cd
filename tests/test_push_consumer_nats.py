"""``ferrymq.PushConsumer("nats://…")``: the native push engine over JetStream durable pull
consumers (group = durable name, topic = subject), against a real nats-server."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import ferrymq
from _nats_server import NatsServer
from ferrymq.exceptions import InvalidArgumentError
from waiting import wait_for


class Recorder:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.seen: list[ferrymq.MessageView] = []
        self.fail = fail or set()

    def __call__(self, m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        with self.lock:
            self.attempts[m.message_id] += 1
            self.seen.append(m)
        if m.message_id in self.fail:
            return ferrymq.ConsumeResult.FAILURE
        return ferrymq.ConsumeResult.SUCCESS


def test_every_message_consumed_and_acked_once(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    ids = [f"id-{i}" for i in range(100)]
    for i, mid in enumerate(ids):
        nats_server.publish(f"s{tok}.a", b"m%d" % i, message_id=mid)
    nats_server.publish(f"s{tok}.other", b"not subscribed", message_id="other")
    rec = Recorder()
    with ferrymq.PushConsumer(
        nats_server.url, f"g{tok}", subscriptions=f"s{tok}.a", listener=rec
    ) as pc:
        assert pc.protocol == "nats"
        assert pc.fifo is False
        wait_for(
            "every message acked",
            lambda: pc.stats()["acked"] == 100 and pc.stats()["cached_messages"] == 0,
        )
        assert "nats" in repr(pc)
    assert set(rec.attempts) == set(ids)
    assert set(rec.attempts.values()) == {1}
    assert all(isinstance(m, ferrymq.MessageView) for m in rec.seen)
    assert {m.topic for m in rec.seen} == {f"s{tok}.a"}
    state = js.consumer_state(f"g{tok}", f"s{tok}.a")
    assert (state["num_ack_pending"], state["num_pending"]) == (0, 0)


def test_failures_are_redelivered_then_terminated(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    _, tok = nats_stream
    nats_server.publish(f"s{tok}.a", b"ok", message_id="ok")
    nats_server.publish(f"s{tok}.a", b"bad", message_id="bad")
    rec = Recorder(fail={"bad"})
    with ferrymq.PushConsumer(
        nats_server.url, f"g{tok}", subscriptions={f"s{tok}.a": "*"}, listener=rec
    ) as pc:
        # The retry policy's first delay is 1 s: the second attempt comes after it.
        wait_for("bad retried", lambda: rec.attempts["bad"] >= 2, timeout=30)
        wait_for("ok acked", lambda: pc.stats()["acked"] >= 1)
        assert pc.stats()["nacked"] >= 1
    assert rec.attempts["ok"] == 1


def test_subscribe_while_running_and_bad_arguments(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    # A group reads one subject per stream: the new subscription is another stream's.
    js.create_stream(f"Q{tok}", [f"q{tok}.>"])
    rec = Recorder()
    try:
        with ferrymq.PushConsumer(
            nats_server.url, f"g{tok}", subscriptions=f"s{tok}.a", listener=rec
        ) as pc:
            pc.subscribe(f"q{tok}.b")
            assert set(pc.subscriptions) == {f"s{tok}.a", f"q{tok}.b"}
            nats_server.publish(f"q{tok}.b", b"on b", message_id="on-b")
            wait_for("b consumed", lambda: "on-b" in rec.attempts)
            # Refused, nothing changes: a filter, a second subject of a stream already read.
            with pytest.raises(InvalidArgumentError, match="filter"):
                pc.subscribe(f"q{tok}.c", "tagA")
            with pytest.raises(InvalidArgumentError, match="one subject per stream"):
                pc.subscribe(f"s{tok}.other")
            assert set(pc.subscriptions) == {f"s{tok}.a", f"q{tok}.b"}
            pc.unsubscribe(f"s{tok}.a")
            assert set(pc.subscriptions) == {f"q{tok}.b"}
    finally:
        js.delete_stream(f"Q{tok}")
    for bad, match in [
        ({"nats_options": {"nope": 1}}, "nats_options"),
        ({"fifo_accelerator": True}, "fifo_accelerator"),
        ({"namespace": "ns"}, "namespace"),
        ({"jmq_options": {}}, "jmq_options"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            ferrymq.PushConsumer(
                nats_server.url,
                f"g{tok}",
                subscriptions=f"s{tok}.a",
                listener=rec,
                **bad,  # type: ignore[arg-type]
            )
    with pytest.raises(InvalidArgumentError, match="nats_options"):
        ferrymq.PushConsumer(
            "127.0.0.1:8081", "g", subscriptions="t", listener=rec, nats_options={}
        )
