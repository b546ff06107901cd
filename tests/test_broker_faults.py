"""Fault injection of the embedded broker, each fault observed through the raw protocol."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from ferrymq import InvalidArgumentError
from ferrymq.testing import STATUS_CODES as C
from ferrymq.testing import EmbeddedBroker

pytest.importorskip("rocketmq")

from rmq_wire import OK, Wire, message

MakeBroker = Callable[..., EmbeddedBroker]


def _broker(make_broker: MakeBroker, **kw: object) -> EmbeddedBroker:
    b = make_broker(**kw)
    b.create_topic("t", "NORMAL", 2)
    b.create_group("g")
    return b


def test_status_for_n_calls_of_one_rpc(make_broker: MakeBroker) -> None:
    b = _broker(make_broker, endpoints=2)
    b.inject_status(0, "TOO_MANY_REQUESTS", rpc="SendMessage", count=2)
    with Wire(b.addresses[0]) as r0, Wire(b.addresses[1]) as r1:
        assert r0.query_route("t").status.code == OK, "other RPCs are not affected"
        first = r0.send(message("t"))
        assert first.status.code == C["TOO_MANY_REQUESTS"]
        assert first.status.message.startswith("injected fault")
        assert r1.send(message("t")).status.code == OK, "other endpoints are not affected"
        assert r0.send(message("t")).status.code == C["TOO_MANY_REQUESTS"]
        assert r0.send(message("t")).status.code == OK
    stats = b.stats()
    assert stats["endpoints"][0]["injected"] == 2
    assert stats["topics"]["t"]["messages"] == 2


def test_status_for_a_fraction_of_calls(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    b.inject_status(0, 50001, fraction=0.5, message="flaky")
    codes = []
    with Wire(b.addresses[0]) as r:
        for _ in range(200):
            codes.append(r.query_route("t").status.code)
    assert set(codes) == {OK, C["INTERNAL_SERVER_ERROR"]}
    b.clear_faults()
    with Wire(b.addresses[0]) as r:
        assert all(r.query_route("t").status.code == OK for _ in range(20))


def test_status_on_streaming_rpcs(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    b.inject_status(0, "PROXY_TIMEOUT", rpc="ReceiveMessage", count=1)
    b.inject_status(0, "TOO_MANY_REQUESTS", rpc="Telemetry", count=1)
    with Wire(b.addresses[0]) as r:
        first = r.consumer("g")
        assert first.status.code == C["TOO_MANY_REQUESTS"]
    with Wire(b.addresses[0]) as r:
        assert r.consumer("g").status.code == OK
        status, _ = r.receive_once("g", "t")
        assert status.code == C["PROXY_TIMEOUT"]
        assert r.receive_once("g", "t")[0].code == C["MESSAGE_NOT_FOUND"]


def test_latency(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    b.set_latency(0, 5.0, rpc="QueryRoute")
    with Wire(b.addresses[0]) as r:
        with pytest.raises(grpc.RpcError) as e:
            r.query_route("t", timeout=0.3)
        # the client's deadline, or the server's enforcement of grpc-timeout (CANCELLED)
        assert e.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
        assert r.send(message("t")).status.code == OK, "only QueryRoute is slowed"
        b.set_latency(0, 0, rpc="QueryRoute")
        assert r.query_route("t").status.code == OK


def test_unavailable_refuse_then_back(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    address = b.addresses[0]
    with Wire(address) as r:
        assert r.query_route("t").status.code == OK
        b.set_unavailable(0, "refuse")
        with pytest.raises(grpc.RpcError) as e:
            r.query_route("t", timeout=2)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert b.stats()["endpoints"][0]["unavailable"] == "refuse"
    b.set_unavailable(0, None)
    assert b.addresses[0] == address, "same port after recovery"
    with Wire(address) as r:
        assert r.query_route("t").status.code == OK


def test_unavailable_hang_then_back(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    with Wire(b.addresses[0]) as r:
        assert r.query_route("t").status.code == OK
        b.set_unavailable(0, "hang")
        with pytest.raises(grpc.RpcError) as e:
            r.query_route("t", timeout=0.5)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        b.set_unavailable(0, None)
        assert r.query_route("t").status.code == OK
    with Wire(b.addresses[0]) as r2:
        b.set_unavailable(0, "hang")
        with pytest.raises(grpc.RpcError) as e:
            r2.query_route("t", timeout=0.5)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        b.clear_faults(0)


def test_drop_telemetry_keeps_settings(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    with Wire(b.addresses[0]) as r:
        assert r.consumer("g").status.code == OK
        b.drop_telemetry(0)
        with pytest.raises(grpc.RpcError) as err:
            r.stream.next(timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert r.heartbeat("g").status.code == OK, "settings survive a dropped stream"
        assert [c["connected"] for c in b.clients(0)] == [False]


def test_restart_forgets_clients_and_keeps_messages(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    with Wire(b.addresses[0], "c1") as r:
        r.consumer("g")
        r.send(message("t", b"survives"))
        assert r.heartbeat("g").status.code == OK
        b.restart(0)
        with pytest.raises(grpc.RpcError):
            r.stream.next(timeout=5)
        assert b.clients(0) == []
    with Wire(b.addresses[0], "c1") as r:
        assert r.heartbeat("g").status.code == C["UNRECOGNIZED_CLIENT_TYPE"]
        assert r.receive_once("g", "t")[0].code == C["INTERNAL_SERVER_ERROR"]  # as the proxy
        r.consumer("g")
        assert [m.body for m in r.receive_once("g", "t")[1]] == [b"survives"]


def _accounted(make_broker: MakeBroker, body: bytes) -> int:
    """The bytes a topic's bound counts for one message like ``message("t", body)``."""
    probe = _broker(make_broker)
    with Wire(probe.addresses[0]) as r:
        assert r.send(message("t", body)).status.code == OK
    return int(probe.stats()["topics"]["t"]["bytes"])


def test_memory_bound_per_topic(make_broker: MakeBroker) -> None:
    # The bound counts what a stored message holds: its body and metadata and a fixed
    # overhead, at most body + 256 bytes.
    per_message = _accounted(make_broker, b"x" * 100)
    assert 100 + 100 < per_message <= 100 + 256
    b = _broker(make_broker, max_body_size=100, max_topic_bytes=10 * per_message)
    with Wire(b.addresses[0]) as r:
        r.consumer("g")
        for _ in range(10):
            assert r.send(message("t", b"x" * 100)).status.code == OK
        full = r.send(message("t", b"x" * 100))
        assert full.status.code == C["TOO_MANY_REQUESTS"]
        assert "full" in full.status.message
        assert b.stats()["topics"]["t"]["bytes"] <= 10 * per_message
        # consuming frees room: acked messages are evicted first
        _, msgs = r.receive_once("g", "t", batch=4)
        r.ack("g", "t", *msgs)
        for _ in range(len(msgs)):
            assert r.send(message("t", b"x" * 100)).status.code == OK
        assert r.send(message("t", b"x" * 100)).status.code == C["TOO_MANY_REQUESTS"]
    small = _accounted(make_broker, bytes([0]) * 10)
    drop = make_broker(max_body_size=100, max_topic_bytes=3 * small, when_full="drop_oldest")
    drop.create_topic("t", "NORMAL", 1)
    with Wire(drop.addresses[0]) as r:
        for i in range(6):
            assert r.send(message("t", bytes([i]) * 10)).status.code == OK
    stored = drop.messages("t")
    assert [m["offset"] for m in stored] == [3, 4, 5]


def test_fault_arguments_are_checked(make_broker: MakeBroker) -> None:
    b = _broker(make_broker)
    with pytest.raises(InvalidArgumentError, match="endpoint"):
        b.inject_status(3, 42900)
    with pytest.raises(InvalidArgumentError, match="rpc"):
        b.inject_status(0, 42900, rpc="Nope")
    with pytest.raises(InvalidArgumentError, match="fraction"):
        b.inject_status(0, 42900, fraction=1.5)
    with pytest.raises(InvalidArgumentError, match="code"):
        b.inject_status(0, "NOT_A_CODE")
    with pytest.raises(InvalidArgumentError, match="mode"):
        b.set_unavailable(0, "sideways")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="seconds"):
        b.set_latency(0, -1)
    assert b.calls(0, "QueryRoute") == 0


def test_calls_are_counted_per_rpc_and_endpoint(make_broker: MakeBroker) -> None:
    b = _broker(make_broker, endpoints=2)
    with Wire(b.addresses[1]) as r:
        for _ in range(3):
            r.query_route("t")
        r.send(message("t"))
    assert b.calls(1, "QueryRoute") == 3
    assert b.calls(1, "SendMessage") == 1
    assert b.calls(0, "QueryRoute") == 0
    time.sleep(0)
