"""W3C trace context on the wire: ``Message(trace_context=..., trace_state=...)`` is checked when
built, travels producer → server → consumer on every protocol (the embedded broker's RocketMQ
and JMQ4 sides and a nats-server through ``backend``; RocketMQ 5 gRPC and remoting on the
embedded broker and the real server through ``server``), and a message without one reads back
``None`` with nothing added to its properties."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from backends import Backend
from ferrymq import InvalidArgumentError, Message, PullConsumer
from servers import Collector, Server
from waiting import wait_for

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TS = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
#: The names a trace context travels under; none is left among a received message's properties.
CARRIERS = {"traceparent", "tracestate", "TRACE_CONTEXT"}


def user_props(m: ferrymq.MessageView) -> dict[str, str]:
    """The properties a producer set: without what a server adds (JetStream's ``Nats-Msg-Id``
    header, a real broker's ``BORN_TIMESTAMP`` / ``__BORNHOST`` on remoting pulls)."""
    return {
        k: v
        for k, v in m.properties.items()
        if not k.startswith("Nats-") and k not in ("BORN_TIMESTAMP", "__BORNHOST")
    }


# -- the model ---------------------------------------------------------------------------------


def test_trace_context_is_kept_and_optional() -> None:
    m = Message("t", b"x", trace_context=TP, trace_state=TS)
    assert (m.trace_context, m.trace_state) == (TP, TS)
    assert m.properties == {}
    assert "trace_context" in repr(m)
    assert m == Message("t", b"x", trace_context=TP, trace_state=TS)
    assert m != Message("t", b"x", trace_context=TP)
    plain = Message("t", b"x")
    assert (plain.trace_context, plain.trace_state) == (None, None)
    assert Message("t", b"x", trace_context=None).trace_context is None
    # A later version may add fields after a '-' (W3C's rule for versions above 00).
    later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"
    assert Message("t", b"x", trace_context=later).trace_context == later


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        TP.upper(),
        TP[:-1],
        TP + "0",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        TP.replace("-", "_"),
    ],
)
def test_a_bad_traceparent_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="trace_context"):
        Message("t", b"x", trace_context=value)


def test_bad_types_tracestate_and_carrier_properties_are_refused_by_name() -> None:
    bad: Any = 42
    with pytest.raises(InvalidArgumentError, match="trace_context"):
        Message("t", b"x", trace_context=bad)
    with pytest.raises(InvalidArgumentError, match="trace_state"):
        Message("t", b"x", trace_context=TP, trace_state=bad)
    with pytest.raises(InvalidArgumentError, match="trace_state"):
        Message("t", b"x", trace_state=TS)  # without a traceparent
    for state in (" ", "a=1\n", "k" * 513):
        with pytest.raises(InvalidArgumentError, match="trace_state"):
            Message("t", b"x", trace_context=TP, trace_state=state)
    for name in ("traceparent", "tracestate", "TraceParent", "TRACE_CONTEXT"):
        with pytest.raises(InvalidArgumentError, match="trace_context"):
            Message("t", b"x", properties={name: TP})


# -- every protocol ----------------------------------------------------------------------------


def test_round_trip_on_every_protocol(backend: Backend) -> None:
    with backend.producer() as p:
        p.send(Message(backend.topic, b"traced", trace_context=TP, trace_state=TS))
        p.send(Message(backend.topic, b"parent-only", trace_context=TP))
        p.send(Message(backend.topic, b"plain", properties={"k": "v"}))
    got: dict[bytes, ferrymq.MessageView] = {}
    with backend.simple_consumer() as c:
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            batch = c.receive(16)
            if batch:
                c.ack(batch)
            got.update((m.body, m) for m in batch)
    assert set(got) == {b"traced", b"parent-only", b"plain"}
    traced, parent_only, plain = got[b"traced"], got[b"parent-only"], got[b"plain"]
    assert (traced.trace_context, traced.trace_state) == (TP, TS)
    assert (parent_only.trace_context, parent_only.trace_state) == (TP, None)
    assert (plain.trace_context, plain.trace_state) == (None, None)
    # The carriers are not user properties.
    assert user_props(traced) == {}
    assert user_props(parent_only) == {}
    assert user_props(plain) == {"k": "v"}
    assert all(isinstance(m, ferrymq.ReceivedMessage) for m in got.values())


def test_push_consumer_sees_the_trace_context(backend: Backend) -> None:
    seen: list[ferrymq.MessageView] = []
    with backend.producer() as p:
        p.send(Message(backend.topic, b"pushed", trace_context=TP, trace_state=TS))
    with backend.push_consumer(seen.append):
        wait_for("the message pushed", lambda: bool(seen), 30)
    assert [(m.body, m.trace_context, m.trace_state) for m in seen[:1]] == [(b"pushed", TP, TS)]


# -- RocketMQ 5 and remoting, embedded broker and real server ---------------------------------


def _pull_all(server: Server, group: str, topic: str, want: int) -> list[ferrymq.MessageView]:
    got: list[ferrymq.MessageView] = []
    with PullConsumer(server.remoting_endpoint, group) as c:
        c.assign(c.queues(topic))
        c.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got.extend(c.poll(64, timeout=1.0))
    return got


def test_grpc_and_remoting_in_all_four_directions(
    server: Server, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    collector = Collector(server.endpoints, group, topic, closing)
    with ferrymq.Producer(server.endpoints, topics=[topic]) as p:
        p.send(Message(topic, b"grpc", trace_context=TP, trace_state=TS, properties={"k": "v"}))
        p.send(Message(topic, b"grpc-plain"))
    with ferrymq.Producer(server.remoting_endpoint) as p:
        p.send(Message(topic, b"remoting", trace_context=TP, trace_state=TS))
        p.send(Message(topic, b"remoting-plain"))
    # gRPC consumer: the system field (gRPC) or the traceparent property (remoting).
    pushed = {m.body: m for m in collector.wait(4)}
    pulled = {m.body: m for m in _pull_all(server, unique("pg"), topic, 4)}
    for seen in (pushed, pulled):
        assert set(seen) == {b"grpc", b"grpc-plain", b"remoting", b"remoting-plain"}
        for body in (b"grpc", b"remoting"):
            m = seen[body]
            assert (m.trace_context, m.trace_state) == (TP, TS), (body, m.properties)
        assert user_props(seen[b"grpc"]) == {"k": "v"}
        assert user_props(seen[b"remoting"]) == {}
        for body in (b"grpc-plain", b"remoting-plain"):
            m = seen[body]
            assert (m.trace_context, m.trace_state) == (None, None)
            assert user_props(m) == {}
        assert not any(CARRIERS & set(m.properties) for m in seen.values())
