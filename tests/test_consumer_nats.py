"""``ferrymq.SimpleConsumer("nats://…")`` and ``ferrymq.PushConsumer("nats://…")``: JetStream
durable pull consumers behind the one consuming API, against a real nats-server (group =
durable name, topic = subject). What every protocol does alike is in test_consume_protocols.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid

import pytest

import ferrymq
from _nats_server import NatsServer
from ferrymq.exceptions import ClientClosedError, InvalidArgumentError
from waiting import receive_until, wait_for


def _consumer(url: str, tok: str, **kw: object) -> ferrymq.SimpleConsumer:
    return ferrymq.SimpleConsumer(url, f"g{tok}", subscriptions=f"s{tok}.a", **kw)  # type: ignore[arg-type]


def _state(js: ferrymq.JetStream, tok: str) -> dict[str, int]:
    return js.consumer_state(f"g{tok}", f"s{tok}.a")


def test_message_ids_are_nats_msg_ids_and_acks_move_the_floor(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    for i in range(20):
        nats_server.publish(f"s{tok}.a", b"m%d" % i, message_id=f"id-{i}")
    nats_server.publish(f"s{tok}.other", b"not subscribed")
    with _consumer(nats_server.url, tok, await_duration=0.5) as c:
        got = receive_until(c, 20, invisible=30)
    assert [m.message_id for m in got] == [f"id-{i}" for i in range(20)]
    state = _state(js, tok)
    assert (state["num_ack_pending"], state["num_pending"]) == (0, 0)
    # Everything up to the last stored message is settled (the other subject's is skipped).
    assert state["ack_floor_stream_sequence"] == 21


def test_receive_returns_with_the_first_message_not_after_the_wait(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    with _consumer(nats_server.url, tok, await_duration=20) as c:
        got: list[ferrymq.ReceivedMessage] = []
        receiver = threading.Thread(target=lambda: got.extend(c.receive()))
        receiver.start()
        # the receive's long pull is parked on the server
        wait_for("the long pull", lambda: _state(js, tok)["num_waiting"] > 0, timeout=10)
        nats_server.publish(f"s{tok}.a", b"late", message_id="late")
        # Before the fix the receive returned only when its 20 s wait ended.
        receiver.join(10)
        assert not receiver.is_alive(), "receive waited for a full batch"
        assert [m.message_id for m in got] == ["late"]
        c.ack(got)


@pytest.mark.skipif(sys.platform == "win32", reason="signals")
def test_ctrl_c_during_a_parked_receive_raises_keyboard_interrupt(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    # The cancelled receive drops its JetStream subscription on the caller's thread, which is
    # not a runtime worker: that drop must neither panic across the FFI nor lose the consumer.
    js, tok = nats_stream

    def interrupt_once_parked() -> None:
        wait_for("the long pull", lambda: _state(js, tok)["num_waiting"] > 0, timeout=10)
        os.kill(os.getpid(), signal.SIGINT)

    with _consumer(nats_server.url, tok, await_duration=20) as c:
        interrupter = threading.Thread(target=interrupt_once_parked)
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                c.receive()
        finally:
            interrupter.join()
        nats_server.publish(f"s{tok}.a", b"after", message_id="after")
        got = receive_until(c, 1, invisible=30)
        assert [m.body for m in got] == [b"after"]
        c.ack(got)


def test_several_subjects_are_all_read(nats_server: NatsServer) -> None:
    tok = uuid.uuid4().hex[:10]
    with ferrymq.JetStream(nats_server.url) as js:
        js.create_stream(f"X{tok}", [f"x{tok}.>"])
        js.create_stream(f"Y{tok}", [f"y{tok}.>"])
        try:
            nats_server.publish(f"y{tok}.a", b"y")
            c = ferrymq.SimpleConsumer(
                nats_server.url,
                f"g{tok}",
                subscriptions=[f"x{tok}.a", f"y{tok}.a"],
                await_duration=3,
            )
            with c:
                (m,) = c.receive()
                assert (m.topic, m.body) == (f"y{tok}.a", b"y")
                c.ack(m)
        finally:
            js.delete_stream(f"X{tok}")
            js.delete_stream(f"Y{tok}")


def test_refusals_name_the_parameter(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    _js, tok = nats_stream
    url = nats_server.url
    with pytest.raises(InvalidArgumentError, match="subscriptions"):
        ferrymq.SimpleConsumer(url, "g", subscriptions={f"s{tok}.a": "TagA"})
    with pytest.raises(InvalidArgumentError, match="nats_options"):
        _consumer(url, tok, nats_options={"nope": 1})
    with pytest.raises(InvalidArgumentError, match="namespace"):
        _consumer(url, tok, namespace="ns")
    with pytest.raises(InvalidArgumentError, match="nats_options"):
        ferrymq.SimpleConsumer("127.0.0.1:1", "g", subscriptions="t", nats_options={})
    with pytest.raises(InvalidArgumentError, match=r"subscriptions.*nowhere"):
        ferrymq.SimpleConsumer(url, "g", subscriptions="nowhere.x").start()
    both = [f"s{tok}.a", f"s{tok}.b"]
    with pytest.raises(InvalidArgumentError, match=r"subscriptions.*one subject per stream"):
        ferrymq.SimpleConsumer(url, f"g{tok}", subscriptions=both).start()
    c = _consumer(url, tok, nats_options={"ack_wait": 5})
    with pytest.raises(ClientClosedError):
        c.receive()
    c.start()
    with pytest.raises(InvalidArgumentError, match=r"invisible_duration.*ack_wait"):
        c.receive(invisible_duration=60)
    with pytest.raises(InvalidArgumentError, match=r"subscriptions.*other"):
        c.subscribe("other")
    with pytest.raises(InvalidArgumentError, match="message"):
        c.ack("not a message")  # type: ignore[arg-type]
    c.close()
    with pytest.raises(ClientClosedError):
        c.receive()


def test_subscribe_while_running_and_bad_arguments(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    # A group reads one subject per stream: the new subscription is another stream's.
    js.create_stream(f"Q{tok}", [f"q{tok}.>"])
    seen: set[str] = set()
    try:
        with ferrymq.PushConsumer(
            nats_server.url,
            f"g{tok}",
            subscriptions=f"s{tok}.a",
            listener=lambda m: seen.add(m.message_id),
        ) as pc:
            pc.subscribe(f"q{tok}.b")
            assert set(pc.subscriptions) == {f"s{tok}.a", f"q{tok}.b"}
            nats_server.publish(f"q{tok}.b", b"on b", message_id="on-b")
            wait_for("b consumed", lambda: "on-b" in seen)
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
                listener=print,
                **bad,  # type: ignore[arg-type]
            )
    with pytest.raises(InvalidArgumentError, match="nats_options"):
        ferrymq.PushConsumer(
            "127.0.0.1:8081", "g", subscriptions="t", listener=print, nats_options={}
        )
