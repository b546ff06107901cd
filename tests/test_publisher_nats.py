"""The managed async publisher over NATS JetStream, against a real nats-server: its window,
timeouts, retries, expectations and drain in detail (what every protocol does alike is in
test_publisher.py).

Lost or late acks are produced by a loopback proxy that holds back the server's replies (the
publishes themselves reach the server): nothing is mocked.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ferrymq
from _nats_server import HoldingProxy, NatsServer, read_stream
from test_publisher import Recorder, check_window
from waiting import async_wait_for

pytestmark = pytest.mark.nats


@pytest.fixture
def producer(nats_server: NatsServer) -> Iterator[ferrymq.Producer]:
    with ferrymq.Producer(nats_server.url) as p:
        yield p


@pytest.fixture
def producer_via_proxy(nats_proxy: HoldingProxy) -> Iterator[ferrymq.Producer]:
    with ferrymq.Producer(nats_proxy.url, request_timeout=30.0) as p:
        yield p


@pytest.fixture
def stream(js: ferrymq.JetStream, tok: str) -> Iterator[tuple[str, str]]:
    """(stream name, subject)"""
    name = f"P{tok}"
    js.create_stream(name, [f"p{tok}.>"])
    yield name, f"p{tok}.events"
    js.delete_stream(name)


async def test_flight_ids_and_headers_are_stored_with_the_message(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    name, subject = stream
    async with ferrymq.AsyncPublisher(producer, id_prefix="order") as pub:
        flights = [
            await pub.publish_async(subject, f"body-{i}".encode(), headers={"X-N": str(i)})
            for i in range(20)
        ]
    acks = [await f for f in flights]
    assert [a.sequence for a in acks] == list(range(1, 21))
    # The server stored each once, with the flight id as Nats-Msg-Id.
    assert [a.message_id for a in acks] == [f.id for f in flights]
    msgs = read_stream(js, name, 20)
    assert [m.message_id for m in msgs] == [f.id for f in flights]
    assert [m.body for m in msgs] == [f.body for f in flights]
    assert msgs[3].properties["X-N"] == "3"


@pytest.mark.parametrize(("max_in_flight", "refill"), [(8, 0), (8, 5)])
async def test_hold_at_max_in_flight_and_refill_at_threshold(
    js: ferrymq.JetStream,
    producer_via_proxy: ferrymq.Producer,
    nats_proxy: HoldingProxy,
    stream: tuple[str, str],
    max_in_flight: int,
    refill: int,
) -> None:
    name, subject = stream
    rec = Recorder()
    pub = ferrymq.AsyncPublisher(
        producer_via_proxy, max_in_flight=max_in_flight, refill_allowed_at=refill, listener=rec
    )
    pub.start()
    nats_proxy.hold()  # acks are held back: the window fills and stays full
    flights = [await pub.publish_async(subject, b"x") for _ in range(2 * max_in_flight)]
    await async_wait_for("the window is full", lambda: pub.in_flight == max_in_flight)
    assert pub.held
    # The bounded intake is full too: the caller now feels back-pressure.
    assert pub.queued == max_in_flight
    blocked = asyncio.ensure_future(pub.publish_async(subject, b"x"))
    done, _ = await asyncio.wait({blocked}, timeout=0.3)
    assert not done, "publish_async must wait while the window is held and the intake is full"
    assert sum(f.publish_time is not None for f in flights) == max_in_flight
    nats_proxy.release()
    flights.append(await blocked)
    await pub.drain()
    assert all(f.state == "acked" for f in flights)
    holds = check_window(rec.events, max_in_flight, refill)
    assert holds >= 2
    read_stream(js, name, len(flights))


async def test_timeouts_complete_futures_and_reach_the_listener(
    producer_via_proxy: ferrymq.Producer, nats_proxy: HoldingProxy, stream: tuple[str, str]
) -> None:
    _, subject = stream
    rec = Recorder()
    async with ferrymq.AsyncPublisher(producer_via_proxy, wait_timeout=0.3, listener=rec) as pub:
        nats_proxy.hold()
        flights = [await pub.publish_async(subject, b"x") for _ in range(5)]
        for f in flights:
            with pytest.raises(ferrymq.FerryTimeoutError, match="wait_timeout"):
                await f
            assert f.state == "timeout"
            assert isinstance(f.exception, ferrymq.FerryTimeoutError)
            with pytest.raises(ferrymq.FerryTimeoutError):
                f.ack_future.result()
        nats_proxy.release()
    assert sorted(f.id for f in rec.kinds("timeout")) == sorted(f.id for f in flights)
    assert rec.kinds("acked") == []
    assert pub.in_flight == 0


async def test_drain_waits_for_every_flight(
    js: ferrymq.JetStream,
    producer_via_proxy: ferrymq.Producer,
    nats_proxy: HoldingProxy,
    stream: tuple[str, str],
) -> None:
    name, subject = stream
    rec = Recorder()
    pub = ferrymq.AsyncPublisher(producer_via_proxy, max_in_flight=10, listener=rec)
    pub.start()
    nats_proxy.hold()
    flights = [await pub.publish_async(subject, str(i).encode()) for i in range(20)]
    drain = asyncio.ensure_future(pub.drain())
    done, _ = await asyncio.wait({drain}, timeout=0.3)
    assert not done, "drain must wait for the held acks"
    with pytest.raises(ferrymq.ClientClosedError, match="draining"):
        await pub.publish_async(subject, b"late")
    assert not any(f.done for f in flights)
    nats_proxy.release()
    await drain
    assert all(f.state == "acked" for f in flights)
    # drain returns only after the listener has seen every event.
    assert len(rec.kinds("acked")) == 20
    assert pub.state == "finished"
    read_stream(js, name, 20)


async def test_retried_publish_is_stored_once(
    js: ferrymq.JetStream,
    producer_via_proxy: ferrymq.Producer,
    nats_proxy: HoldingProxy,
    stream: tuple[str, str],
) -> None:
    name, subject = stream
    retry = ferrymq.RetryConfig(attempts=20, backoff=(0.02,), attempt_timeout=0.15)
    async with ferrymq.AsyncPublisher(producer_via_proxy, retry=retry, wait_timeout=20.0) as pub:
        nats_proxy.hold()  # the first attempt is stored, but its ack is lost
        flight = await pub.publish_async(subject, b"only once")
        await async_wait_for("a retry was sent", lambda: flight.attempts >= 3)
        nats_proxy.release()
        ack = await flight
    # Every attempt carried the same Nats-Msg-Id: the server stored the message once and
    # recognised the retries as duplicates.
    assert ack.duplicate
    assert ack.message_id == flight.id
    assert flight.attempts >= 3
    (msg,) = read_stream(js, name, 1)
    assert msg.message_id == flight.id
    assert msg.body == b"only once"
    assert js.stream_info(name).messages == 1


async def test_no_responders_are_retried_then_failed(
    producer: ferrymq.Producer, js: ferrymq.JetStream, tok: str
) -> None:
    rec = Recorder()
    retry = ferrymq.RetryConfig(attempts=3, backoff=(0.01,))
    async with ferrymq.AsyncPublisher(producer, retry=retry, listener=rec) as pub:
        # No stream listens on this subject: 503 no responders, retried, then failed.
        flight = await pub.publish_async(f"nostream{tok}.x", b"x")
        with pytest.raises(ferrymq.BrokerError) as e:
            await flight
    assert (e.value.code, e.value.code_name, e.value.protocol, e.value.retriable) == (
        503,
        "NO_RESPONDERS",
        "nats",
        True,
    )
    assert flight.attempts == 3
    assert flight.state == "failed"
    (failed,) = rec.kinds("completed_exceptionally")
    assert failed == flight
    assert isinstance(failed.exception, ferrymq.BrokerError)


async def test_expectation_failures_are_never_retried(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    name, subject = stream
    rec = Recorder()
    retry = ferrymq.RetryConfig(attempts=5, backoff=(0.01,))
    async with ferrymq.AsyncPublisher(producer, retry=retry, listener=rec) as pub:
        ok = await pub.publish_async(subject, b"1", expected_stream=name)
        wrong_stream = await pub.publish_async(subject, b"2", expected_stream="ELSEWHERE")
        wrong_seq = await pub.publish_async(subject, b"3", expected_last_sequence=99)
        assert (await ok).sequence == 1
        both = await pub.publish_async(
            subject, b"4", expected_last_sequence=1, expected_stream=name
        )
        assert (await both).sequence == 2
        for f, code in [(wrong_stream, 10060), (wrong_seq, 10071)]:
            with pytest.raises(ferrymq.BrokerError) as e:
                await f.ack_future
            assert e.value.code == code
            assert not e.value.retriable
            assert f.attempts == 1
            assert f.expectation_failed
        assert e.value.code_name == "STREAM_WRONG_LAST_SEQUENCE"
    assert wrong_stream.options == {"expected_stream": "ELSEWHERE"}
    assert {f.id for f in rec.kinds("completed_exceptionally")} == {wrong_stream.id, wrong_seq.id}
    assert js.stream_info(name).messages == 2


async def test_futures_without_a_listener_get_acks_and_errors(
    producer_via_proxy: ferrymq.Producer, nats_proxy: HoldingProxy, stream: tuple[str, str]
) -> None:
    """Without a listener the futures are completed by one native call per event batch."""
    name, subject = stream
    async with ferrymq.AsyncPublisher(producer_via_proxy, wait_timeout=0.5) as pub:
        ok = [(await pub.publish_async(subject, b"ok")).ack_future for _ in range(20)]
        wrong = (await pub.publish_async(subject, b"w", expected_stream="ELSEWHERE")).ack_future
        cancelled = (await pub.publish_async(subject, b"c")).ack_future
        cancelled.cancel()
        acks = await asyncio.gather(*ok)
        assert [a.stream for a in acks] == [name] * 20
        with pytest.raises(ferrymq.BrokerError) as e:
            await wrong
        assert e.value.code == 10060
        nats_proxy.hold()
        late = await pub.publish_async(subject, b"late")
        with pytest.raises(ferrymq.FerryTimeoutError, match="wait_timeout"):
            await late
        nats_proxy.release()
    assert cancelled.cancelled()
    assert pub.in_flight == 0


async def test_stop_completes_every_future(
    producer_via_proxy: ferrymq.Producer, nats_proxy: HoldingProxy, stream: tuple[str, str]
) -> None:
    _, subject = stream
    rec = Recorder()
    pub = ferrymq.AsyncPublisher(producer_via_proxy, max_in_flight=4, listener=rec)
    pub.start()
    nats_proxy.hold()
    flights = [await pub.publish_async(subject, b"x") for _ in range(8)]
    await async_wait_for("the window is full", lambda: pub.in_flight == 4)
    futures = [f.ack_future for f in flights]
    pub.stop()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, ferrymq.ClientClosedError) for r in results), results
    await async_wait_for(
        "the listener heard of every flight",
        lambda: len(rec.kinds("completed_exceptionally")) == 8,
    )
    assert pub.state == "finished"
    with pytest.raises(ferrymq.ClientClosedError):
        await pub.publish_async(subject, b"x")
    nats_proxy.release()


async def test_user_message_id_wins(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    _, subject = stream
    async with ferrymq.AsyncPublisher(producer) as pub:
        a = await pub.publish_async(subject, b"x", message_id="business-key-1")
        b = await pub.publish_async(subject, b"x", message_id="business-key-1")
        first, second = await a, await b
    assert a.id == b.id == "business-key-1"
    assert not first.duplicate
    assert second.duplicate
    assert first.sequence == second.sequence


async def test_publish_a_message_object(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    name, subject = stream
    msg = ferrymq.Message(subject, b"payload", properties={"k": "v"})
    async with ferrymq.AsyncPublisher(producer) as pub:
        flight = await pub.publish_async(msg)
        await flight
    assert flight.message == msg
    (got,) = read_stream(js, name, 1)
    assert got.properties["k"] == "v"


def test_submit_without_asyncio(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    name, subject = stream
    rec = Recorder()
    with ferrymq.AsyncPublisher(producer, max_in_flight=8, listener=rec) as pub:
        futures = [pub.submit(subject, str(i).encode()) for i in range(100)]
    acks = [f.result(timeout=10) for f in futures]
    assert [a.sequence for a in acks] == list(range(1, 101))
    assert len(rec.kinds("acked")) == 100
    # Without an event loop, listener methods run on ferrymq's helper thread.
    assert rec.threads == {"ferrymq-publisher-events"}
    assert pub.close() is True
    read_stream(js, name, 100)


def test_flight_result_blocks_until_done(
    producer: ferrymq.Producer, js: ferrymq.JetStream, stream: tuple[str, str]
) -> None:
    _, subject = stream
    pub = ferrymq.AsyncPublisher(producer)
    pub.start()
    fut = pub.submit(subject, b"x")
    assert fut.result(timeout=10).sequence == 1
    assert pub.close(timeout=10)


def test_invalid_arguments_name_the_field(
    producer: ferrymq.Producer, js: ferrymq.JetStream
) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": 5, "refill_allowed_at": 5}, "refill_allowed_at"),
        ({"wait_timeout": 0}, "wait_timeout"),
        ({"poll_time": -1}, "poll_time"),
        ({"id_prefix": "has space"}, "id_prefix"),
        ({"retry": ferrymq.RetryConfig(attempts=0)}, "retry.attempts"),
        ({"retry": 3}, "retry"),
        ({"listener": object()}, "listener"),
    ]
    for kwargs, field in cases:
        with pytest.raises(ferrymq.InvalidArgumentError, match=f"^{field}"):
            ferrymq.AsyncPublisher(producer, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^producer"):
        ferrymq.AsyncPublisher(object())
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^producer"):
        ferrymq.AsyncPublisher(js)  # the admin client does not publish: Producer("nats://") does
    pub = ferrymq.AsyncPublisher(producer)
    for subject in ("bad subject", "a.*"):  # a wildcard is no subject to publish to
        with pytest.raises(ferrymq.InvalidArgumentError, match=r"^subject"):
            pub.submit(subject, b"x")
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^headers"):
        pub.submit("a.b", b"x", headers={"a:b": "c"})
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^body"):
        pub.submit("a.b", "str")  # type: ignore[arg-type]
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^body"):
        pub.submit("a.b")
    pub.stop()


async def test_listener_exceptions_are_logged_not_fatal(
    producer: ferrymq.Producer,
    js: ferrymq.JetStream,
    stream: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, subject = stream

    class Broken:
        def acked(self, flight: ferrymq.Flight) -> None:
            raise RuntimeError("listener bug")

    async with ferrymq.AsyncPublisher(producer, listener=Broken()) as pub:
        flights = [await pub.publish_async(subject, b"x") for _ in range(3)]
    assert all(f.state == "acked" for f in flights)
    assert (
        sum("listener bug" in r.getMessage() or "acked" in r.getMessage() for r in caplog.records)
        >= 3
    )


EXIT_SCRIPT = r"""
import asyncio, sys, time
import ferrymq

url, subject, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
log = open(out, "w", buffering=1)


class Slow(ferrymq.PublisherListener):
    def acked(self, flight):
        time.sleep(0.0005)  # keeps the event thread busy while the interpreter exits
        log.write(f"acked {flight.id}\n")

    def completed_exceptionally(self, flight):
        log.write(f"failed {flight.id}\n")


async def main():
    producer = await ferrymq.Producer(url).start_async()
    pub = ferrymq.AsyncPublisher(producer, id_prefix="exit", max_in_flight=64, listener=Slow())
    pub.start()
    futures = [(await pub.publish_async(subject, b"x")).ack_future for _ in range(n)]
    # Never drained, futures never awaited: asyncio.run returns and the interpreter exits.
    return futures


asyncio.run(main())
"""


def test_interpreter_exit_drains_an_undrained_publisher(
    tmp_path: Path, nats_server: NatsServer, js: ferrymq.JetStream, tok: str
) -> None:
    """A program that returns without draining loses nothing: at exit the publisher drains,
    the listener hears of every message, and the interpreter shuts down cleanly (the event
    thread is not left running Python code while CPython finalizes)."""
    name, subject = f"X{tok}", f"x{tok}.events"
    js.create_stream(name, [f"x{tok}.>"])
    try:
        n = 2000
        out = tmp_path / "events.txt"
        script = tmp_path / "exit.py"
        script.write_text(EXIT_SCRIPT)
        proc = subprocess.run(
            [sys.executable, str(script), nats_server.url, subject, str(out), str(n)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = out.read_text().splitlines()
        assert sorted(lines) == sorted(f"acked exit-{i}" for i in range(1, n + 1))
        assert js.stream_info(name).messages == n
    finally:
        js.delete_stream(name)
