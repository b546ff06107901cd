"""``SimpleConsumer`` and ``PushConsumer`` over every protocol (``backend``: the embedded
broker's RocketMQ and JMQ4 sides, a real nats-server): the behaviour the one consuming API
promises whatever the endpoint. What only one protocol does is tested in its own module
(test_consumer.py, test_jmq_consumers.py, test_consumer_nats.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter

import pytest

import ferrymq
from backends import Backend
from waiting import async_wait_for, first_batch, wait_for


class Recorder:
    """A listener that records each delivery's attempt, and fails the first attempt of the
    bodies in ``fail`` three ways: an exception, ``FAILURE``, a result that is no result."""

    def __init__(self, fail: tuple[bytes, ...] = ()) -> None:
        self.lock = threading.Lock()
        self.attempts: Counter[bytes] = Counter()
        self.kinds: set[type] = set()
        self.fail = fail
        self.failed_ids: dict[bytes, str] = {}

    def __call__(self, m: ferrymq.MessageView) -> object:
        way = None
        with self.lock:
            self.attempts[m.body] += 1
            self.kinds.add(type(m))
            if m.delivery_attempt == 1 and m.body in self.fail:
                self.failed_ids[m.body] = m.message_id
                way = self.fail.index(m.body) % 3
        # Raised from the listener's own frame (not through a with block, which would attach
        # the traceback on its way out): the log must still show where it was raised.
        if way == 0:
            raise RuntimeError("listener exploded")
        if way is not None:
            return ferrymq.ConsumeResult.FAILURE if way == 1 else "yes please"
        return None  # None counts as SUCCESS

    def done(self) -> set[bytes]:
        with self.lock:
            return set(self.attempts)


# -- simple consumer -------------------------------------------------------------------------


def test_simple_consumer_receives_and_acks_each_message_once(backend: Backend) -> None:
    sent = backend.send(20)
    got: list[ferrymq.ReceivedMessage] = []
    with backend.simple_consumer() as c:
        assert c.protocol == backend.protocol
        assert list(c.subscriptions) == [backend.topic]
        for _ in range(100):
            if len(got) >= len(sent):
                break
            batch = c.receive(16)
            assert len(batch) <= 16
            if batch:
                c.ack(batch)  # the messages of one receive together
            got.extend(batch)
        # Everything was acked: nothing comes back.
        assert c.receive(16) == []
    assert sorted(m.body for m in got) == sorted(sent)
    assert len({m.message_id for m in got}) == len(sent)
    assert {(m.topic, m.delivery_attempt) for m in got} == {(backend.topic, 1)}
    assert all(isinstance(m, ferrymq.ReceivedMessage) for m in got)


def test_receipts_and_views_share_one_interface(backend: Backend) -> None:
    with backend.producer() as p:
        receipt = p.send(ferrymq.Message(backend.topic, b"typed"))
    assert isinstance(receipt, ferrymq.Receipt)
    assert isinstance(receipt, backend.receipt)  # the protocol's own fields behind isinstance
    assert receipt.topic == backend.topic
    with backend.simple_consumer() as c:
        got = first_batch(lambda: c.receive(8))
        assert [m.body for m in got] == [b"typed"]
        assert isinstance(got[0], ferrymq.ReceivedMessage)
        assert isinstance(got[0], ferrymq.MessageView)
        # a message of another protocol is refused by name, not cast over
        for bad in (object(), [got[0], "not a message"]):
            with pytest.raises(ferrymq.InvalidArgumentError, match="message: must be a "):
                c.ack(bad)  # type: ignore[arg-type]
        with pytest.raises(ferrymq.InvalidArgumentError, match="message"):
            c.change_invisible_duration(got, 1.0)  # type: ignore[arg-type]
        c.ack(got)


def test_change_invisible_duration_redelivers(backend: Backend) -> None:
    [body] = backend.send(1)
    with backend.simple_consumer() as c:
        (first,) = first_batch(lambda: c.receive(16))
        # JMQ4 has no per-message delay: the broker's retry queue redelivers after its own.
        c.change_invisible_duration(first, 0.2)
        (again,) = first_batch(lambda: c.receive(16))
        assert (again.body, again.delivery_attempt) == (body, 2)
        c.ack(again)
        assert c.receive(16) == []


async def test_async_receive_ack_and_change_invisible_duration(backend: Backend) -> None:
    sent = backend.send(5)
    acked: list[ferrymq.ReceivedMessage] = []
    nacked: list[ferrymq.ReceivedMessage] = []
    async with backend.simple_consumer() as c:
        for _ in range(100):
            if len(acked) >= len(sent):
                break
            batch = await c.receive_async(16)
            if batch and not nacked:
                await c.change_invisible_duration_async(batch[0], 0.2)
                nacked.append(batch[0])
                batch = batch[1:]
            if batch:
                await c.ack_async(batch)
            acked.extend(batch)
        assert await c.receive_async(16) == []
    # Every message acked once; the one made visible again came back as the second delivery.
    assert sorted(m.body for m in acked) == sorted(sent)
    assert [m.body for m in acked if m.delivery_attempt == 2] == [nacked[0].body]


# -- push consumer ---------------------------------------------------------------------------


def test_push_consumer_consumes_every_message_once(backend: Backend) -> None:
    sent = backend.send(100)
    rec = Recorder()
    with backend.push_consumer(rec, consumption_threads=4) as pc:
        assert pc.protocol == backend.protocol
        assert pc.fifo is False
        assert f'group="{backend.group}"' in repr(pc)
        wait_for(
            "every message acked and the cache empty",
            lambda: pc.stats()["acked"] >= 100 and pc.stats()["cached_messages"] == 0,
        )
        stats = pc.stats()
    assert stats["consumed_failed"] == 0
    assert pc.stats()["process_queues"] == 0
    assert sorted(rec.attempts) == sorted(sent)
    assert set(rec.attempts.values()) == {1}
    assert rec.kinds == {ferrymq.MessageView}
    # Everything was acked: nothing comes back to the group.
    with backend.simple_consumer() as c:
        assert c.receive(32) == []


def test_listener_failures_are_logged_and_redelivered(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    sent = backend.send(20)
    fail = tuple(sent[:3])
    rec = Recorder(fail)
    caplog.set_level(logging.ERROR, logger="ferrymq.consumer")
    with backend.push_consumer(rec) as pc:
        # NATS: the retry policy's first delay is 1 s; the second attempt comes after it.
        wait_for(
            "every message consumed and the cache empty",
            lambda: sum(rec.attempts.values()) == 23 and pc.stats()["cached_messages"] == 0,
        )
        wait_for("every message acked", lambda: pc.stats()["acked"] == 20)
        stats = pc.stats()
    assert rec.attempts == {b: 2 if b in fail else 1 for b in sent}
    assert stats["consumed_failed"] == 3
    assert stats["nacked"] == 3
    raised = [r for r in caplog.records if r.exc_info and "exploded" in str(r.exc_info[1])]
    assert raised, caplog.text
    assert rec.failed_ids[fail[0]] in raised[0].getMessage()
    assert 'raise RuntimeError("listener exploded")' in caplog.text
    assert any("yes please" in r.getMessage() for r in caplog.records)


async def test_async_listener_runs_on_the_running_loop(backend: Backend) -> None:
    sent = backend.send(40)
    loop_thread = threading.get_ident()
    seen: list[tuple[bytes, int]] = []
    running = 0
    most = 0

    async def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        seen.append((m.body, threading.get_ident()))
        if m.delivery_attempt == 1 and m.body.endswith(b"7"):
            raise ValueError("async failure")
        return None

    async with backend.push_consumer(listener, consumption_threads=8) as c:
        await async_wait_for("all acked", lambda: c.stats()["acked"] == 40)
        stats = c.stats()
    assert {body for body, _ in seen} == set(sent)
    assert {t for _, t in seen} == {loop_thread}
    assert 1 < most <= 8
    assert stats["consumed_failed"] == 4


def test_async_listener_from_blocking_code_gets_a_private_loop(backend: Backend) -> None:
    sent = backend.send(10)
    names: set[str] = set()
    got: set[bytes] = set()

    async def listener(m: ferrymq.MessageView) -> None:
        names.add(threading.current_thread().name)
        got.add(m.body)

    with backend.push_consumer(listener) as c:
        wait_for("all acked", lambda: c.stats()["acked"] == 10)
    assert got == set(sent)
    assert names == {"ferrymq-listener-loop"}


def test_close_with_in_flight_work_loses_nothing(backend: Backend) -> None:
    sent = set(backend.send(60))
    consumed: set[bytes] = set()
    lock = threading.Lock()
    started = threading.Event()

    def listener(m: ferrymq.MessageView) -> None:
        started.set()
        time.sleep(0.1)
        with lock:
            consumed.add(m.body)

    pc = backend.push_consumer(
        listener, consumption_threads=2, receive_batch_size=4, max_concurrent_receives=1
    )
    pc.start()
    assert started.wait(30)
    pc.close()
    stats = pc.stats()
    assert stats["cached_messages"] == 0
    assert 0 < len(consumed) < len(sent)
    assert stats["acked"] == len(consumed)
    pc.close()  # idempotent
    # What the push consumer finished was acked; the rest is still there, once.
    rest: list[bytes] = []
    with backend.simple_consumer() as c:
        for _ in range(100):
            batch = c.receive(32)
            if batch:
                c.ack(batch)
            rest.extend(m.body for m in batch)
            if len(rest) + len(consumed) >= len(sent) and not batch:
                break
    assert not consumed & set(rest)
    assert consumed | set(rest) == sent
    assert len(rest) == len(set(rest))
