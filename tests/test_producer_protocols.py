"""``Producer`` over every protocol (``backend``: the embedded broker's RocketMQ and JMQ4 sides, a
real nats-server): the lifecycle, the asyncio forms, and the core's one batched produce path,
bounded by ``max_pending``, reporting in produce order through ``poll``/``flush`` on the
caller's thread, failures reported, ``close`` draining. What only one protocol does is tested
in its own module (test_producer.py, test_jmq.py, test_producer_nats.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

import ferrymq
from _nats_server import HoldingProxy, free_port
from backends import Backend
from ferrymq import FerryError, Message

Report = tuple[int, FerryError | None, object]


def recorder(reports: list[Report], i: int) -> Callable[[FerryError | None, object], None]:
    caller = threading.get_ident()

    def on_delivery(err: FerryError | None, receipt: object) -> None:
        assert threading.get_ident() == caller, "callback ran off the caller's thread"
        reports.append((i, err, receipt))

    return on_delivery


async def test_start_and_close_in_both_forms(backend: Backend) -> None:
    p = backend.producer()
    assert p.start() is p
    assert p.started
    assert p.endpoints == backend.endpoint
    p.close()
    p.close()
    assert p.closed
    with pytest.raises(ferrymq.ClientClosedError):
        p.send(Message(backend.topic, b"late"))
    with pytest.raises(ferrymq.ClientClosedError):
        p.produce(Message(backend.topic, b"late"))
    with pytest.raises(ferrymq.ClientClosedError):
        p.start()
    q = backend.producer()
    assert await q.start_async() is q
    await q.close_async()
    assert q.closed


@pytest.mark.parametrize(
    ("scheme", "unreachable"),
    [
        ("", (ferrymq.FerryConnectionError, ferrymq.FerryTimeoutError)),
        ("nats://", ferrymq.FerryConnectionError),
    ],
    ids=["rocketmq", "nats"],
)
def test_an_unstarted_producer_refuses_to_send_and_start_connects(
    scheme: str, unreachable: type[Exception] | tuple[type[Exception], ...]
) -> None:
    # (A JMQ4 producer connects on its first call instead: test_jmq.py.)
    p = ferrymq.Producer(f"{scheme}127.0.0.1:{free_port()}", request_timeout=1.0)
    assert not p.started
    with pytest.raises(ferrymq.ClientClosedError, match="start"):
        p.send(Message("s", b"x"))
    with pytest.raises(unreachable):
        p.start()


async def test_async_send_and_batch(backend: Backend) -> None:
    async with backend.producer() as p:
        one = await p.send_async(Message(backend.topic, b"x"))
        many = await p.send_batch_async([Message(backend.topic, b"%d" % i) for i in range(20)])
        more = await asyncio.gather(
            *(p.send_async(Message(backend.topic, b"g%d" % i)) for i in range(10))
        )
    assert p.closed
    receipts = [one, *many, *more]
    assert all(isinstance(r, backend.receipt) and r.topic == backend.topic for r in receipts)
    assert len({r.message_id for r in receipts}) == 31
    assert backend.stored() == 31


def test_produce_is_bounded_and_reports_in_order(backend: Backend) -> None:
    reports: list[Report] = []
    with backend.producer(max_pending=50) as p:
        p.produce(Message(backend.topic, b"first"))
        assert p.pending == 1, "a report waits for poll/flush"
        for i in range(1000):
            p.produce(Message(backend.topic, b"%d" % i), recorder(reports, i))
            assert p.pending <= 50
        assert p.flush(30.0) == 0
        assert p.pending == 0
    assert [i for i, _, _ in reports] == list(range(1000))
    receipts = [r for _, err, r in reports if err is None and isinstance(r, backend.receipt)]
    assert len(receipts) == 1000
    assert {r.topic for r in receipts} == {backend.topic}
    assert len({r.message_id for r in receipts}) == 1000
    assert backend.stored() == 1001


def test_produce_failures_are_reported(backend: Backend) -> None:
    reports: list[Report] = []
    with backend.producer(request_timeout=2.0) as p:
        p.produce(Message(backend.topic, b"stored"), recorder(reports, 0))
        p.produce(Message(backend.missing, b"lost"), recorder(reports, 1))
        assert p.flush(30.0) == 0
    by_id = {i: (err, r) for i, err, r in reports}
    assert by_id[0][0] is None
    assert isinstance(by_id[0][1], backend.receipt)
    assert isinstance(by_id[1][0], FerryError)
    assert by_id[1][1] is None


@pytest.mark.parametrize("close", ["close", "close_async"])
async def test_close_delivers_what_was_produced(backend: Backend, close: str) -> None:
    reports: list[Report] = []
    p = backend.producer()
    await p.start_async()
    for i in range(200):
        p.produce(Message(backend.topic, b"%d" % i), recorder(reports, i))
    if close == "close":
        p.close()
    else:
        await p.close_async()
    assert [i for i, _, _ in reports] == list(range(200))
    assert all(err is None for _, err, _ in reports)
    assert backend.stored() == 200
    with pytest.raises(ferrymq.ClientClosedError):
        p.produce(Message(backend.topic, b"late"))


@pytest.mark.nats
def test_nats_produce_does_not_wait_for_acks(
    nats_proxy: HoldingProxy, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    subject = f"s{nats_stream[1]}.a"
    reports: list[Report] = []
    with ferrymq.Producer(nats_proxy.url, request_timeout=10.0) as p:
        nats_proxy.hold()
        for i in range(100):
            p.produce(Message(subject, b"%d" % i), recorder(reports, i))
        # every publish went out; no ack came back: nothing to report yet
        assert p.poll(0) == 0
        assert p.pending == 100
        nats_proxy.release()
        assert p.flush(30.0) == 0
    assert [i for i, _, _ in reports] == list(range(100))
    assert all(err is None for _, err, _ in reports)
