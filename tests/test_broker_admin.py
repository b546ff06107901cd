"""Admin, inspection and the ``ferrymq broker`` command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ferrymq import InvalidArgumentError
from ferrymq.testing import EmbeddedBroker

MakeBroker = Callable[..., EmbeddedBroker]


def test_context_manager_and_endpoints_format() -> None:
    with EmbeddedBroker(endpoints=3) as b:
        parts = b.endpoints.split(";")
        assert parts == b.addresses
        assert all(p.startswith("127.0.0.1:") for p in parts)
        assert len({p.split(":")[1] for p in parts}) == 3
        assert not b.closed
        assert "EmbeddedBroker" in repr(b)
    assert b.closed
    b.close()  # idempotent


def test_admin_validation(make_broker: MakeBroker) -> None:
    b = make_broker()
    with pytest.raises(InvalidArgumentError, match="message_type"):
        b.create_topic("x", "WEIRD")
    with pytest.raises(InvalidArgumentError, match="name"):
        b.create_topic("bad name")
    with pytest.raises(InvalidArgumentError, match="queues"):
        b.create_topic("x", queues=0)
    with pytest.raises(InvalidArgumentError, match="max_delivery_attempts"):
        b.create_group("g", max_delivery_attempts=0)
    b.create_topic("ok")
    with pytest.raises(InvalidArgumentError, match="permission"):
        b.set_queue_permission("ok", 0, 0, "SIDEWAYS")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="endpoints"):
        EmbeddedBroker(endpoints=0)
    with pytest.raises(InvalidArgumentError, match="when_full"):
        EmbeddedBroker(when_full="maybe")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="access_key"):
        EmbeddedBroker(access_key="only")
    b.create_topic("ok", "FIFO")  # re-creating changes the type
    assert b.stats()["topics"]["ok"]["message_type"] == "FIFO"
    with pytest.raises(InvalidArgumentError, match="queues"):
        b.create_topic("ok", queues=3)
    assert b.delete_topic("ok")
    assert not b.delete_topic("ok")


def test_stats_shape(make_broker: MakeBroker) -> None:
    b = make_broker(endpoints=2)
    b.create_topic("s", "MIXED", 3)
    stats = b.stats()
    topic = stats["topics"]["s"]
    assert topic["message_type"] == "MIXED"
    assert [(q["endpoint"], q["queue_id"]) for q in topic["queues"]] == [(0, 0), (0, 1), (1, 0)]
    assert {q["permission"] for q in topic["queues"]} == {"READ_WRITE"}
    assert [e["name"] for e in stats["endpoints"]] == ["broker-0", "broker-1"]
    assert set(stats["endpoints"][0]["calls"]) >= {"SendMessage", "ReceiveMessage", "Telemetry"}
    assert set(stats["transactions"]) == {
        "pending",
        "committed",
        "rolled_back",
        "checks",
        "discarded",
    }
    assert b.dead_letters("nobody") == []
    with pytest.raises(InvalidArgumentError, match="topic"):
        b.messages("missing")


def test_cli_broker_runs_in_foreground(tmp_path: Path) -> None:
    config = tmp_path / "broker.json"
    config.write_text(
        json.dumps(
            {
                "endpoints": 2,
                "topics": [{"name": "orders", "message_type": "FIFO", "queues": 4}],
                "groups": [{"name": "billing", "fifo": True}],
                "options": {"long_polling_min": 1},
            }
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferrymq",
            "broker",
            "--config",
            str(config),
            "--topic",
            "t2:DELAY:2",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("ferrymq broker listening on 127.0.0.1:")
        endpoints = first.rsplit(" ", 1)[1].strip()
        assert len(endpoints.split(";")) == 2
        lines = [proc.stdout.readline().strip() for _ in range(5)]
        assert lines[0].startswith("remoting (name server + brokers) remoting://127.0.0.1:")
        assert lines[1].startswith("JMQ4 jmq://127.0.0.1:")
        assert lines[2:] == ["topic orders (FIFO)", "topic t2 (DELAY)", "group billing (fifo)"]
        pytest.importorskip("rocketmq")
        from rmq_wire import OK, Wire

        with Wire(endpoints.split(";")[1]) as r:
            resp = r.query_route("orders")
            assert resp.status.code == OK
            assert len(resp.message_queues) == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "stopped" in out


def test_cli_broker_stops_cleanly_on_sigterm_right_after_its_first_line() -> None:
    """A supervisor that stops the broker as soon as it announces itself gets a clean stop."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "broker", "--topic", "t1", "--group", "g1"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("ferrymq broker listening on ")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert out.rstrip().endswith("ferrymq broker stopped")
