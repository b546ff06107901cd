"""Interceptors (``ferrymq.Interceptor``): a recording interceptor sees every message once at
each hook point, for every client and protocol (embedded broker, JMQ4 server, nats-server);
``after`` sees the broker's injected errors; a raising hook is logged and delivery goes on; an
``async def`` hook runs; a bad ``interceptors=`` is refused naming the parameter."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import ferrymq
from backends import Backend
from ferrymq import HookContext, HookPoint
from ferrymq.testing import EmbeddedBroker
from waiting import in_forked_child, wait_for

FreshTopic = Callable[..., tuple[EmbeddedBroker, str]]


class Recorder(ferrymq.Interceptor):
    """Every hook call as ``(when, point, bodies, error)``, plus the contexts."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, HookPoint, list[bytes], BaseException | None]] = []
        self.contexts: list[HookContext] = []
        self._lock = threading.Lock()

    def before(self, context: HookContext, messages: Sequence[Any]) -> None:
        with self._lock:
            self.calls.append(("before", context.point, [m.body for m in messages], None))
            self.contexts.append(context)

    def after(
        self, context: HookContext, messages: Sequence[Any], error: BaseException | None
    ) -> None:
        with self._lock:
            self.calls.append(("after", context.point, [m.body for m in messages], error))
            self.contexts.append(context)

    def bodies(self, when: str, point: HookPoint) -> list[bytes]:
        with self._lock:
            return [b for w, p, bs, _ in self.calls if w == when and p is point for b in bs]

    def points(self) -> set[HookPoint]:
        with self._lock:
            return {p for _, p, _, _ in self.calls}


def test_producer_hooks_see_every_send_once(backend: Backend) -> None:
    rec = Recorder()
    with backend.producer(interceptors=[rec]) as p:
        receipt = p.send(ferrymq.Message(backend.topic, b"s0"))
        p.send_batch([ferrymq.Message(backend.topic, b"b%d" % i) for i in range(3)])
        for i in range(2):
            p.produce(ferrymq.Message(backend.topic, b"p%d" % i))
        assert p.flush(30) == 0
    expected = [b"s0", b"b0", b"b1", b"b2", b"p0", b"p1"]
    assert rec.bodies("before", HookPoint.SEND) == expected
    assert sorted(rec.bodies("after", HookPoint.SEND)) == sorted(expected)
    assert all(e is None for _, _, _, e in rec.calls)
    # A batch is one call with the list; the outcome of a send is its receipts.
    batch = [c for c in rec.calls if c[0] == "before" and len(c[2]) == 3]
    assert len(batch) == 1
    first_after = rec.contexts[1]
    assert first_after.outcome == [receipt]
    assert first_after.duration is not None
    assert first_after.duration > 0
    assert first_after.topic == backend.topic
    assert first_after.protocol == backend.protocol
    assert first_after.client_id == p.client_id
    assert first_after.group is None
    assert backend.stored() == 6


def test_simple_consumer_hooks_receive_ack_nack(backend: Backend) -> None:
    backend.send(4)
    rec = Recorder()
    got: list[ferrymq.MessageView] = []
    with backend.simple_consumer(interceptors=[rec]) as c:
        wait_for("4 messages", lambda: bool(got.extend(c.receive(16, 30))) or len(got) >= 4)
        c.ack(got[:3])
        c.change_invisible_duration(got[3], 1.0)
    bodies = sorted(m.body for m in got)
    assert sorted(rec.bodies("after", HookPoint.RECEIVE)) == bodies
    assert rec.bodies("before", HookPoint.RECEIVE) == []
    assert rec.bodies("before", HookPoint.ACK) == [m.body for m in got[:3]]
    assert rec.bodies("after", HookPoint.ACK) == [m.body for m in got[:3]]
    assert rec.bodies("after", HookPoint.NACK) == [got[3].body]
    ack = next(x for x in rec.contexts if x.point is HookPoint.ACK)
    assert (ack.group, ack.attempt, ack.protocol) == (backend.group, 1, backend.protocol)


def test_push_consumer_hooks_see_each_message_once(backend: Backend) -> None:
    bodies = backend.send(5)
    rec = Recorder()
    seen: list[bytes] = []

    def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        seen.append(m.body)
        return ferrymq.ConsumeResult.SUCCESS

    with backend.push_consumer(listener, interceptors=[rec]):
        wait_for("5 consumed", lambda: len(rec.bodies("after", HookPoint.CONSUME)) == 5)
    assert sorted(rec.bodies("before", HookPoint.CONSUME)) == sorted(bodies)
    assert sorted(rec.bodies("after", HookPoint.CONSUME)) == sorted(bodies)
    outcomes = [x.outcome for x in rec.contexts if x.point is HookPoint.CONSUME and x.duration]
    assert outcomes == [ferrymq.ConsumeResult.SUCCESS] * 5
    assert sorted(seen) == sorted(bodies)


def test_async_listener_and_async_hooks(backend: Backend) -> None:
    bodies = backend.send(3)
    ran: list[tuple[str, bytes]] = []

    class AsyncHooks(ferrymq.Interceptor):
        async def before(self, context: HookContext, messages: Sequence[Any]) -> None:
            await asyncio.sleep(0)
            if context.point is HookPoint.CONSUME:
                ran.append(("before", messages[0].body))

        async def after(
            self, context: HookContext, messages: Sequence[Any], error: BaseException | None
        ) -> None:
            if context.point is HookPoint.CONSUME:
                ran.append(("after", messages[0].body))

    async def listener(m: ferrymq.MessageView) -> None:
        assert ("before", m.body) in ran

    with backend.push_consumer(listener, interceptors=[AsyncHooks()]):
        wait_for("3 after hooks", lambda: sum(w == "after" for w, _ in ran) == 3)
    assert sorted(b for w, b in ran if w == "before") == sorted(bodies)


def test_async_hook_in_blocking_send_runs_before_the_send(backend: Backend) -> None:
    order: list[str] = []

    class Slow(ferrymq.Interceptor):
        async def before(self, context: HookContext, messages: Sequence[Any]) -> None:
            await asyncio.sleep(0.01)
            order.append("before")

    with backend.producer(interceptors=[Slow()]) as p:
        p.send(ferrymq.Message(backend.topic, b"x"))
        order.append("sent")
    assert order == ["before", "sent"]


async def test_async_methods_await_hooks(backend: Backend) -> None:
    rec = Recorder()
    async with backend.producer(interceptors=[rec]) as p:
        await p.send_async(ferrymq.Message(backend.topic, b"a0"))
        await p.send_batch_async([ferrymq.Message(backend.topic, b"a1")])
    async with backend.simple_consumer(interceptors=[rec]) as c:
        got: list[ferrymq.MessageView] = []
        while len(got) < 2:
            got += await c.receive_async(16, 30)
        await c.ack_async(got)
    assert rec.bodies("after", HookPoint.SEND) == [b"a0", b"a1"]
    assert sorted(rec.bodies("after", HookPoint.RECEIVE)) == [b"a0", b"a1"]
    assert sorted(rec.bodies("after", HookPoint.ACK)) == [b"a0", b"a1"]


def test_raising_hook_is_logged_and_delivery_goes_on(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(ferrymq.Interceptor):
        def before(self, context: HookContext, messages: Sequence[Any]) -> None:
            raise ValueError("hook bug")

    rec = Recorder()
    with caplog.at_level(logging.ERROR, logger="ferrymq"):
        with backend.producer(interceptors=[Broken(), rec]) as p:
            p.send(ferrymq.Message(backend.topic, b"still sent"))
        consumed: list[bytes] = []
        with backend.push_consumer(
            lambda m: consumed.append(m.body), interceptors=[Broken()]
        ) as _c:
            wait_for("the message consumed", lambda: consumed == [b"still sent"])
    assert backend.stored() == 1
    assert rec.bodies("after", HookPoint.SEND) == [b"still sent"]
    failures = [r for r in caplog.records if "interceptor" in r.getMessage()]
    assert len(failures) >= 2
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in failures)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_async_hooks_run_in_a_forked_child(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic()
    ran: list[int] = []

    class Async(ferrymq.Interceptor):
        async def before(self, context: HookContext, messages: Sequence[Any]) -> None:
            ran.append(os.getpid())

    def send(body: bytes) -> None:
        with ferrymq.Producer(b.endpoints, topics=[topic], interceptors=[Async()]) as p:
            p.send(ferrymq.Message(topic, body))

    send(b"parent")  # the parent's hook loop is running now
    assert ran == [os.getpid()]

    def child() -> str:  # the parent's hook loop has no thread here
        send(b"child")
        return "ran here" if ran[-1] == os.getpid() else "ran elsewhere"

    assert in_forked_child(child) == "ran here"
    send(b"parent again")
    assert ran[-1] == os.getpid()


def test_after_sees_the_brokers_error(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic()
    rec = Recorder()
    with ferrymq.Producer(b.endpoints, topics=[topic], interceptors=[rec]) as p:
        b.inject_status(0, "ILLEGAL_MESSAGE_TAG", rpc="SendMessage", count=1)
        with pytest.raises(ferrymq.BrokerError) as raised:
            p.send(ferrymq.Message(topic, b"refused"))
        p.send(ferrymq.Message(topic, b"accepted"))
    errors = [(bodies, e) for w, _, bodies, e in rec.calls if w == "after"]
    assert errors == [([b"refused"], raised.value), ([b"accepted"], None)]


def test_produce_after_sees_the_delivery_error(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic()
    rec = Recorder()
    reports: list[object] = []
    with ferrymq.Producer(b.endpoints, topics=[topic], interceptors=[rec], max_attempts=1) as p:
        b.inject_status(0, "ILLEGAL_MESSAGE_TAG", rpc="SendMessage", count=1)
        p.produce(ferrymq.Message(topic, b"refused"), lambda err, r: reports.append(err))
        assert p.flush(30) == 0
    ((_, _, bodies, error),) = [c for c in rec.calls if c[0] == "after"]
    assert bodies == [b"refused"]
    assert isinstance(error, ferrymq.BrokerError)
    assert reports == [error]  # the user's callback still runs, after the hooks


def test_rocketmq_transaction_commit_and_rollback(
    fresh_topic: FreshTopic, unique: Callable[[str], str]
) -> None:
    b, _ = fresh_topic()
    tx_topic = unique("tx")
    b.create_topic(tx_topic, "TRANSACTION", 2)
    rec = Recorder()
    with ferrymq.Producer(b.endpoints, topics=[tx_topic], interceptors=[rec]) as p:
        with p.begin_transaction() as tx:
            tx.send(ferrymq.Message(tx_topic, b"c1"))
            tx.send(ferrymq.Message(tx_topic, b"c2"))
        tx = p.begin_transaction()
        with tx:
            tx.send(ferrymq.Message(tx_topic, b"r1"))
            tx.__exit__(RuntimeError)  # as an exception leaving the block would
    assert rec.bodies("before", HookPoint.SEND) == [b"c1", b"c2", b"r1"]
    assert rec.bodies("after", HookPoint.COMMIT) == [b"c1", b"c2"]
    assert rec.bodies("after", HookPoint.ROLLBACK) == [b"r1"]
    assert len(tx.receipts) == 1


def test_jmq_transaction_commit_and_rollback(jmq_broker: EmbeddedBroker, jmq_topic: str) -> None:
    rec = Recorder()
    with ferrymq.Producer(
        jmq_broker.jmq_endpoint, app="test_app", token="test_token", interceptors=[rec]
    ) as p:
        tx = p.begin_transaction()
        tx.send(ferrymq.Message(jmq_topic, b"c1"))
        tx.commit()
        tx = p.begin_transaction()
        tx.send(ferrymq.Message(jmq_topic, b"r1"))
        tx.rollback()
    assert rec.bodies("after", HookPoint.COMMIT) == [b"c1"]
    assert rec.bodies("after", HookPoint.ROLLBACK) == [b"r1"]
    assert [x.protocol for x in rec.contexts] == ["jmq"] * len(rec.contexts)


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("not a list", "interceptors:"),
        (ferrymq.Interceptor(), "interceptors:"),
        ([object()], "interceptors[0]"),
        ([ferrymq.Interceptor, None], "interceptors[0]"),
    ],
)
def test_bad_interceptors_are_refused(broker: EmbeddedBroker, value: object, names: str) -> None:
    for make in (
        lambda: ferrymq.Producer(broker.endpoints, interceptors=value),
        lambda: ferrymq.SimpleConsumer(
            broker.endpoints, "g", subscriptions="t", interceptors=value
        ),
        lambda: ferrymq.PushConsumer(
            broker.endpoints,
            "g",
            subscriptions="t",
            listener=print,
            interceptors=value,
        ),
    ):
        with pytest.raises(ferrymq.InvalidArgumentError, match="^" + re.escape(names)):
            make()


async def test_async_publisher_hooks_see_every_flight_once(backend: Backend) -> None:
    rec = Recorder()
    with backend.producer() as producer:
        async with ferrymq.AsyncPublisher(producer, max_in_flight=8, interceptors=[rec]) as pub:
            flights = [await pub.publish_async(backend.topic, b"f%d" % i) for i in range(20)]
            acks = [await f for f in flights]
    bodies = [b"f%d" % i for i in range(20)]
    assert sorted(rec.bodies("before", HookPoint.SEND)) == sorted(bodies)
    assert sorted(rec.bodies("after", HookPoint.SEND)) == sorted(bodies)
    assert all(e is None for _, _, _, e in rec.calls)
    outcomes = [x.outcome for x in rec.contexts if x.duration is not None]
    acked = [a.message_id for o in outcomes if isinstance(o, list) for a in o]
    assert sorted(acked) == sorted(a.message_id for a in acks)
    assert {x.protocol for x in rec.contexts} == {backend.protocol}


async def test_async_publisher_after_sees_the_failure(backend: Backend) -> None:
    rec = Recorder()
    retry = ferrymq.RetryConfig(attempts=3, backoff=(0.01,))
    with backend.producer() as producer:
        async with ferrymq.AsyncPublisher(producer, retry=retry, interceptors=[rec]) as pub:
            flight = await pub.publish_async(backend.missing, b"x")
            with pytest.raises(ferrymq.BrokerError) as e:
                await flight
    assert rec.bodies("before", HookPoint.SEND) == [b"x"]
    ((bodies, error),) = [(b, err) for w, _, b, err in rec.calls if w == "after"]
    assert bodies == [b"x"]
    assert isinstance(error, ferrymq.BrokerError)
    assert str(error) == str(e.value)


# -- the push consumer's own acks, nacks and dead-letter forwards ------------------------------


def _paired(rec: Recorder, point: HookPoint) -> list[bytes]:
    """The bodies of ``point``'s ``after`` calls, once every one has had its ``before``."""
    before = sorted(rec.bodies("before", point))
    after = sorted(rec.bodies("after", point))
    assert before == after, (point, before, after)
    return after


def test_push_consumer_engine_settles_reach_the_hooks(backend: Backend) -> None:
    bodies = backend.send(6)
    failing = set(bodies[1::2])
    rec = Recorder()
    attempts: dict[bytes, int] = {}

    def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        attempts[m.body] = attempts.get(m.body, 0) + 1
        if m.body in failing and attempts[m.body] == 1:
            return ferrymq.ConsumeResult.FAILURE
        return ferrymq.ConsumeResult.SUCCESS

    with backend.push_consumer(listener, interceptors=[rec]) as c:
        client_id = c.client_id
        wait_for(
            "every message acked and the failures nacked",
            lambda: (
                set(rec.bodies("after", HookPoint.ACK)) >= set(bodies) - failing
                and set(rec.bodies("after", HookPoint.NACK)) >= failing
            ),
        )
    # close() returned: every reported attempt's hooks have run, in pairs.
    acked = _paired(rec, HookPoint.ACK)
    nacked = _paired(rec, HookPoint.NACK)
    assert sorted(nacked) == sorted(failing)  # one nack each: their second attempt succeeds
    assert set(bodies) - failing <= set(acked) <= set(bodies)
    assert len(acked) == len(set(acked)), "a message acked twice"
    assert c.stats()["acked"] == len(acked)
    settle = [x for x in rec.contexts if x.point in (HookPoint.ACK, HookPoint.NACK)]
    assert all(x.group == backend.group and x.protocol == backend.protocol for x in settle)
    assert client_id is not None
    assert all(x.client_id == client_id for x in settle)
    afters = [x for x in settle if x.duration is not None]
    assert len(afters) == len(settle) // 2
    assert all(x.duration is not None and x.duration >= 0 for x in afters)
    errors = [e for w, p, _, e in rec.calls if p in (HookPoint.ACK, HookPoint.NACK)]
    assert errors == [None] * len(errors)
    assert c._impl.undelivered_settle_events == 0


def test_a_failed_ack_attempt_reaches_after_with_its_error(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic(queues=1)
    with ferrymq.Producer(b.endpoints, topics=[topic]) as p:
        p.send(ferrymq.Message(topic, b"retried ack"))
    b.create_group("g-ack-error")
    b.inject_status(0, "INTERNAL_SERVER_ERROR", rpc="AckMessage", count=1)
    rec = Recorder()
    with ferrymq.PushConsumer(
        b.endpoints,
        "g-ack-error",
        subscriptions=[topic],
        listener=lambda m: None,
        interceptors=[rec],
    ) as c:
        wait_for("acked after a retry", lambda: c.stats()["acked"] == 1)
    acks = [(w, bodies, e) for w, p, bodies, e in rec.calls if p is HookPoint.ACK]
    # Each attempt is a before and an after: the first after carries the broker's refusal.
    assert [w for w, _, _ in acks] == ["before", "after", "before", "after"]
    assert all(bodies == [b"retried ack"] for _, bodies, _ in acks)
    assert isinstance(acks[1][2], ferrymq.BrokerError)
    assert "INTERNAL_SERVER_ERROR" in str(acks[1][2])
    assert acks[3][2] is None


def test_a_fifo_dead_letter_forward_reaches_the_hooks(fresh_topic: FreshTopic) -> None:
    b, topic = fresh_topic("FIFO", queues=1, long_polling_max=1.0)
    b.create_group("g-dlq", fifo=True, max_delivery_attempts=2, retry_backoff=[0.1])
    with ferrymq.Producer(b.endpoints, topics=[topic]) as p:
        for body in (b"poison", b"fine"):
            p.send(ferrymq.Message(topic, body, message_group="one"))
    rec = Recorder()

    def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        if m.body == b"poison":
            return ferrymq.ConsumeResult.FAILURE
        return ferrymq.ConsumeResult.SUCCESS

    with ferrymq.PushConsumer(
        b.endpoints, "g-dlq", subscriptions=[topic], listener=listener, interceptors=[rec]
    ) as c:
        wait_for(
            "poison dead-lettered, the next acked",
            lambda: c.stats()["dead_lettered"] == 1 and c.stats()["acked"] == 1,
            timeout=60,
        )
    assert _paired(rec, HookPoint.DEAD_LETTER) == [b"poison"]
    assert _paired(rec, HookPoint.ACK) == [b"fine"]
    # The forward is reported before the ack of the group's next message.
    order = [(w, p, bs) for w, p, bs, _ in rec.calls if p in (HookPoint.DEAD_LETTER, HookPoint.ACK)]
    assert order.index(("after", HookPoint.DEAD_LETTER, [b"poison"])) < order.index(
        ("before", HookPoint.ACK, [b"fine"])
    )
    dlq = next(x for x in rec.contexts if x.point is HookPoint.DEAD_LETTER)
    assert dlq.attempt == 2
    assert [d["message_id"] for d in b.dead_letters("g-dlq")] != []
