"""``ferrymq produce`` and ``ferrymq consume`` as real processes against real servers: the
session's embedded broker (RocketMQ 5 gRPC, its remoting name server, its JMQ4 side) and a
nats-server. Round trips, the inputs, --count/--rate, --no-ack, --timeout, the one-line errors
and Ctrl-C."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from _nats_server import NatsServer, free_port
from ferrymq.testing import EmbeddedBroker
from waiting import InThread

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def ferrymq(*args: str, stdin: str | bytes = b"", timeout: float = 90) -> Run:
    """Run ``python -m ferrymq ARGS`` to its end; what it printed and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq", *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=timeout,
        env=ENV,
    )
    return Run(
        done.returncode,
        done.stdout.decode(),
        done.stderr.decode(),
        time.monotonic() - started,
    )


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]

    def assert_one_line_error(self, command: str, code: int) -> str:
        """The run failed with ``code`` and said why in one line (no traceback); that line."""
        assert self.code == code, self
        assert "Traceback" not in self.stderr, self.stderr
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, self.stderr
        assert lines[0].startswith(f"ferrymq {command}: error: "), lines
        return lines[0]


@dataclass
class Target:
    """One protocol's endpoint with a fresh topic and group, and the options each command
    needs there."""

    protocol: str
    endpoint: str
    topic: str
    group: str
    missing: str
    produce_options: list[str] = field(default_factory=list)
    consume_options: list[str] = field(default_factory=list)

    def produce(self, *args: str, **kw: Any) -> Run:
        return ferrymq("produce", self.endpoint, self.topic, *self.produce_options, *args, **kw)

    def consume(self, *args: str, **kw: Any) -> Run:
        return ferrymq(
            "consume",
            self.endpoint,
            self.topic,
            "--group",
            self.group,
            *self.consume_options,
            *args,
            **kw,
        )

    def consume_argv(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "ferrymq",
            "consume",
            self.endpoint,
            self.topic,
            "--group",
            self.group,
            *self.consume_options,
            *args,
        ]


PROTOCOLS = ["rocketmq", "remoting", "jmq", pytest.param("nats", marks=pytest.mark.nats)]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def target(request: pytest.FixtureRequest, unique: Callable[[str], str]) -> Target:
    protocol: str = request.param
    if protocol == "nats":
        _js, tok = request.getfixturevalue("nats_stream")
        server: NatsServer = request.getfixturevalue("nats_server")
        return Target("nats", server.url, f"s{tok}.a", f"g{tok}", f"nostream{tok}.a")
    broker: EmbeddedBroker = request.getfixturevalue("broker")
    topic = unique("cli")
    broker.create_topic(topic, "NORMAL", 4)
    if protocol == "jmq":
        return Target(
            "jmq",
            broker.jmq_endpoint,
            topic,
            "test_app",
            unique("missing"),
            ["--app", "test_app", "--token", "test_token"],
            ["--token", "test_token"],
        )
    endpoint = broker.endpoints if protocol == "rocketmq" else broker.remoting_endpoint
    return Target(protocol, endpoint, topic, unique("g"), unique("missing"))


def fields_for(protocol: str) -> list[str]:
    """Keys, tag and properties as far as the protocol carries them (JMQ4: one key; NATS:
    headers only; the command refuses the rest, see test_nats_refuses_what_it_cannot_carry)."""
    props = ["--property", "source=cli", "--property", "eq=a=b"]
    if protocol == "nats":
        return props
    keys = ["--key", "k1"] if protocol == "jmq" else ["--key", "k1", "--key", "k2"]
    return [*keys, "--tag", "paid", *props]


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", PROTOCOLS, indirect=True)
def test_round_trip_keeps_keys_tag_and_properties(target: Target) -> None:
    trace = ["--trace-context", TRACEPARENT, "--trace-state", "v=1"]
    sent = target.produce("first", "zweite ü", *fields_for(target.protocol), *trace, "--json")
    assert sent.code == 0, sent
    assert "sent 2 messages in" in sent.stderr
    receipts = sent.json_lines()
    assert [r["n"] for r in sorted(receipts, key=lambda r: r["n"])] == [0, 1]
    assert {r["topic"] for r in receipts} == {target.topic}

    got = target.consume("--count", "2", "--timeout", "30", "--json")
    assert got.code == 0, got
    assert "received 2 messages in" in got.stderr
    messages = got.json_lines()
    assert sorted(m["body"] for m in messages) == ["first", "zweite ü"]
    assert {m["body_encoding"] for m in messages} == {"utf-8"}
    assert {m["message_id"] for m in messages} == {r["message_id"] for r in receipts}
    for m in messages:
        assert m["topic"] == target.topic
        assert m["properties"]["source"] == "cli"
        assert m["properties"]["eq"] == "a=b"
        assert not {"traceparent", "tracestate"} & set(m["properties"])
        assert (m["trace_context"], m["trace_state"]) == (TRACEPARENT, "v=1")
        if target.protocol == "nats":
            continue
        assert m["tag"] == "paid"
        assert m["keys"] == (["k1"] if target.protocol == "jmq" else ["k1", "k2"])

    # Acknowledged: the group has nothing left.
    again = target.consume("--count", "1", "--timeout", "1", "--json")
    assert again.code == 3, again
    assert again.stdout == ""


@pytest.mark.parametrize("target", ["rocketmq"], indirect=True)
def test_readable_output_shows_metadata_and_body(target: Target) -> None:
    trace = ["--trace-context", TRACEPARENT]
    assert target.produce("hello", *fields_for("rocketmq"), *trace).code == 0
    got = target.consume("--count", "1", "--timeout", "30")
    assert got.code == 0, got
    header, meta, props, traced, body = got.stdout.splitlines()
    assert header.startswith(f"--- {target.topic} ")
    assert "attempt 1" in header
    assert meta == "keys: k1, k2  tag: paid"
    assert props == "properties: eq=a=b, source=cli"
    assert traced == f"trace: {TRACEPARENT}"
    assert body == "hello"


@pytest.mark.parametrize("target", ["rocketmq"], indirect=True)
def test_stdin_lines_are_messages(target: Target) -> None:
    sent = target.produce(stdin="one\n\ntwo\r\nthree")
    assert sent.code == 0, sent
    assert "sent 3 messages in" in sent.stderr
    assert "1 empty line skipped" in sent.stderr
    got = target.consume("--count", "3", "--timeout", "30", "--json")
    assert got.code == 0, got
    assert sorted(m["body"] for m in got.json_lines()) == ["one", "three", "two"]


@pytest.mark.parametrize("target", ["rocketmq", "jmq"], indirect=True)
def test_files_whole_or_by_line_and_binary_bodies(target: Target, tmp_path: Path) -> None:
    binary = bytes(range(256))
    (tmp_path / "blob").write_bytes(binary)
    (tmp_path / "multi").write_bytes(b"line 1\nline 2\n")
    whole = target.produce("--file", str(tmp_path / "blob"), "--file", str(tmp_path / "multi"))
    assert whole.code == 0, whole
    assert "sent 2 messages" in whole.stderr
    by_line = target.produce("--file", str(tmp_path / "multi"), "--lines")
    assert by_line.code == 0, by_line
    assert "sent 2 messages" in by_line.stderr

    got = target.consume("--count", "4", "--timeout", "30", "--json")
    assert got.code == 0, got
    texts = sorted(m["body"] for m in got.json_lines() if m["body_encoding"] == "utf-8")
    assert texts == ["line 1", "line 1\nline 2\n", "line 2"]
    [blob] = [m for m in got.json_lines() if m["body_encoding"] == "base64"]
    assert base64.b64decode(blob["body"]) == binary


@pytest.mark.parametrize("target", ["rocketmq", "remoting"], indirect=True)
def test_count_repeats_the_messages_and_rate_limits(target: Target) -> None:
    sent = target.produce("a", "b", "--count", "5", "--rate", "10", "--json")
    assert sent.code == 0, sent
    receipts = sorted(sent.json_lines(), key=lambda r: r["n"])
    assert [r["n"] for r in receipts] == [0, 1, 2, 3, 4]
    # 10 messages per second at most: the fifth left no earlier than 0.4 s after the first.
    assert sent.seconds >= 0.4

    got = target.consume("--count", "5", "--timeout", "30", "--json")
    assert got.code == 0, got
    messages = got.json_lines()
    assert sorted(m["body"] for m in messages) == ["a", "a", "a", "b", "b"]
    born = [m["born_timestamp"] for m in messages]
    # The limiter spaces the sends' starts 100 ms apart; a message is stamped when it is built
    # for the wire, which for the first one also waits for the connection (a run measured
    # 92 ms from the first stamp to the second): one interval of slack.
    assert max(born) - min(born) >= 0.3


@pytest.mark.parametrize("target", ["rocketmq"], indirect=True)
def test_count_below_the_input_sends_the_first_n(target: Target) -> None:
    sent = target.produce("a", "b", "c", "--count", "2", "--json")
    assert sent.code == 0, sent
    assert "sent 2 messages" in sent.stderr
    assert sorted(r["n"] for r in sent.json_lines()) == [0, 1]


# -- acknowledgement and stopping -------------------------------------------------------------


@pytest.mark.parametrize("target", PROTOCOLS, indirect=True)
def test_no_ack_messages_come_back(target: Target) -> None:
    assert target.produce("x1", "x2").code == 0
    # remoting:// reads by offset: an unacknowledged message is what the next run reads.
    invisible = [] if target.protocol == "remoting" else ["--invisible", "1"]

    first = target.consume("--count", "2", "--timeout", "30", "--no-ack", "--json", *invisible)
    assert first.code == 0, first
    assert "(not acknowledged)" in first.stderr
    ids = {m["message_id"] for m in first.json_lines()}
    assert len(ids) == 2

    second = target.consume("--count", "2", "--timeout", "30", "--json", *invisible)
    assert second.code == 0, second
    again = second.json_lines()
    assert {m["message_id"] for m in again} == ids
    if target.protocol in ("rocketmq", "nats"):
        assert all(m["delivery_attempt"] >= 2 for m in again), again


@pytest.mark.parametrize(
    "target", ["rocketmq", pytest.param("nats", marks=pytest.mark.nats)], indirect=True
)
def test_count_takes_no_more_than_it_prints(target: Target) -> None:
    assert target.produce("m1", "m2", "m3").code == 0
    first = target.consume("--count", "2", "--timeout", "30", "--json")
    assert first.code == 0, first
    assert len(first.json_lines()) == 2
    # The third was not received (and left invisible for 30 s): the next run gets it at once.
    rest = target.consume("--count", "1", "--timeout", "5", "--json")
    assert rest.code == 0, rest
    [third] = rest.json_lines()
    assert third["delivery_attempt"] == 1
    seen = sorted([m["body"] for m in first.json_lines()] + [third["body"]])
    assert seen == ["m1", "m2", "m3"]


@pytest.mark.parametrize("target", ["rocketmq", "jmq"], indirect=True)
def test_fewer_than_count_before_the_timeout_exits_3(target: Target) -> None:
    assert target.produce("only").code == 0
    got = target.consume("--count", "3", "--timeout", "1", "--json")
    assert got.code == 3, got
    assert [m["body"] for m in got.json_lines()] == ["only"]
    assert "received 1 of 3 messages" in got.stderr
    assert "nothing more arrived within 1 s" in got.stderr


@pytest.mark.parametrize("target", ["rocketmq"], indirect=True)
def test_timeout_without_count_ends_a_drain_with_0(target: Target) -> None:
    assert target.produce("a", "b").code == 0
    got = target.consume("--timeout", "1", "--json")
    assert got.code == 0, got
    assert sorted(m["body"] for m in got.json_lines()) == ["a", "b"]
    assert "received 2 messages in" in got.stderr


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_bad_endpoint_is_bad_usage(command: str) -> None:
    args = ["--group", "g"] if command == "consume" else ["x"]
    done = ferrymq(command, "kafka://127.0.0.1:9092", "t", *args)
    line = done.assert_one_line_error(command, 2)
    assert "unsupported scheme 'kafka'" in line


@pytest.mark.parametrize("scheme", ["", "remoting://", "jmq://", "nats://"])
@pytest.mark.parametrize("command", ["produce", "consume"])
def test_refused_connection_fails_at_once(command: str, scheme: str) -> None:
    endpoint = f"{scheme}127.0.0.1:{free_port()}"  # nothing listens there
    args = ["--group", "test_app"] if command == "consume" else ["x"]
    if scheme == "jmq://":
        args += ["--token", "test_token"] + (["--app", "test_app"] if command == "produce" else [])
    done = ferrymq(command, endpoint, "t", *args, timeout=60)
    line = done.assert_one_line_error(command, 1)
    assert "connection refused" in line.lower()
    assert done.seconds < 20, f"took {done.seconds:.1f} s to fail"


@pytest.mark.parametrize("target", PROTOCOLS, indirect=True)
def test_missing_topic_fails_with_one_line(target: Target) -> None:
    target.topic = target.missing
    line = target.produce("x").assert_one_line_error("produce", 1)
    # JetStream answers a publish no stream takes with "no responders" (503).
    assert target.missing in line if target.protocol != "nats" else "NO_RESPONDERS" in line
    line = target.consume("--count", "1", "--timeout", "5").assert_one_line_error("consume", 1)
    assert target.missing in line


@pytest.mark.parametrize("target", [pytest.param("nats", marks=pytest.mark.nats)], indirect=True)
@pytest.mark.parametrize("option", [["--key", "k"], ["--tag", "t"], ["--message-group", "g"]])
def test_nats_refuses_what_it_cannot_carry(target: Target, option: list[str]) -> None:
    done = target.produce("x", *option)
    assert option[0] in done.assert_one_line_error("produce", 2)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--rate", "0", "x"], "--rate"),
        (["--lines", "x"], "--lines"),
        (["--file", "/nonexistent/ferrymq-input"], "--file"),
        (["--access-key", "ak", "x"], "--secret-key"),
        (["--trace-context", "nope", "x"], "--trace-context"),
        (["--trace-context", TRACEPARENT, "--trace-state", " ", "x"], "--trace-state"),
        (["--trace-state", "v=1", "x"], "--trace-state"),
    ],
)
def test_produce_bad_usage(broker: EmbeddedBroker, args: list[str], says: str) -> None:
    done = ferrymq("produce", broker.endpoints, "t", *args)
    line = done.assert_one_line_error("produce", 2)
    assert says in line


# -- Ctrl-C -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["rocketmq", pytest.param("nats", marks=pytest.mark.nats)], indirect=True
)
def test_sigint_stops_a_consume_with_its_summary(target: Target) -> None:
    assert target.produce("a", "b").code == 0
    proc = subprocess.Popen(
        target.consume_argv("--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stdout is not None
        out = proc.stdout
        lines = InThread(lambda: [out.readline(), out.readline()]).wait(60)
        assert sorted(json.loads(line)["body"] for line in lines) == ["a", "b"]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = stderr.strip().splitlines()[-1]
    # Counted once printed (the signal may come while their ack is in flight).
    assert summary.startswith("received 2 messages in"), stderr
    assert ": interrupted" in summary


@pytest.mark.parametrize("target", ["rocketmq"], indirect=True)
def test_sigint_stops_a_produce_from_stdin_with_its_summary(target: Target) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "produce", target.endpoint, target.topic, "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write("typed\n")
        proc.stdin.flush()
        out = proc.stdout
        # The receipt comes while stdin is still open: the line was sent at once.
        receipt = json.loads(InThread(out.readline).wait(60))
        assert receipt["n"] == 0
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: sent 1 message in")


# -- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_help_has_examples_and_exit_codes(command: str) -> None:
    done = ferrymq(command, "--help")
    assert done.code == 0
    assert "examples:" in done.stdout
    assert f"ferrymq {command} nats://" in done.stdout
    assert "exit codes:" in done.stdout
    assert "130 interrupted" in done.stdout
