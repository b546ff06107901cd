"""``ferrymq produce``: send messages from arguments, files or stdin lines to any endpoint.

The protocol is the endpoint's (``host:port`` RocketMQ 5, ``remoting://``, ``jmq://``,
``nats://``), through :class:`ferrymq.Producer`: ``produce()`` + ``poll()`` (many messages in
flight, bounded by the producer's ``max_pending``), or, over ``remoting://`` which has no
``produce()``, ``send_batch`` of up to 256 messages (one ``send`` at a time under ``--rate``).
Receipts (``--json``) go to stdout, everything else to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import ferrymq
from ferrymq._endpoints import protocol_of

from ._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Interrupts,
    add_connection_options,
    connection_options,
    endpoint_topic_parser,
    positive_int,
    progress,
    property_pair,
    seconds,
)

DESCRIPTION = """\
Send messages to TOPIC (NATS: a subject) of ENDPOINT and print what was sent.

ENDPOINT names the protocol: host:port[;host:port] (RocketMQ 5 proxy, gRPC), remoting://host:port
(RocketMQ name servers), jmq://host:port (JMQ4: --app and --token) or nats://host:port (JetStream:
a stream must hold the subject).

The messages are the MESSAGE arguments, then the --file files (each file one message, or with
--lines each of its lines); with neither, each line of stdin is a message. Empty lines are
skipped. --count N sends N messages, repeating the given ones in turn (or only the first N).

The summary line ("sent N messages in S s") goes to stderr; --json prints one JSON object per
stored message on stdout: n (its place in the input, from 0), topic, message_id and what the
protocol adds (RocketMQ: queue_id, broker_name, offset; JMQ4: partition, index; NATS: stream,
sequence, duplicate).
"""

EPILOG = """\
examples:
  ferrymq produce 127.0.0.1:8081 orders hello world
  ferrymq produce 127.0.0.1:8081 orders --tag paid --key order-42 --property source=cli '{"id": 42}'
  seq 1000 | ferrymq produce 127.0.0.1:8081 orders --rate 100
  ferrymq produce 127.0.0.1:8081 orders-fifo --message-group order-42 --file a.json --file b.json
  ferrymq produce 127.0.0.1:8081 orders-delay --delay 60 "in a minute"
  ferrymq produce jmq://127.0.0.1:50088 orders --app my_app --token secret --file orders.txt --lines
  ferrymq produce nats://127.0.0.1:4222 orders.new --count 10000 ping --json | jq .sequence

exit codes: 0 every message stored, 1 broker or network failure (refused connection, missing
topic, ...), 2 bad usage, 130 interrupted (the summary says how many were stored).
"""

#: Messages per ``send_batch`` over remoting:// (no ``produce()`` there).
_BATCH = 256
#: How often the stdin reader reports "nothing yet", so receipts are printed meanwhile.
_IDLE_POLL = 0.1
#: How long an interrupted run waits for the receipts of messages already handed over.
_DRAIN_ON_INTERRUPT = 5.0


class _Idle:
    """What an input yields when nothing arrived for a moment (stdin)."""


_IDLE = _Idle()
_Body = bytes | _Idle


class _IntermixedParser(argparse.ArgumentParser):
    """Lets options come between TOPIC and the MESSAGE arguments (``produce EP T --tag x m1``),
    which argparse's plain parsing refuses once the positionals were matched."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:  # the intermixed parse calls back here (Python < 3.12)
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def add_parser(sub: Any) -> None:
    p = endpoint_topic_parser(
        sub,
        "produce",
        help="send messages (arguments, files or stdin lines) to a topic of any endpoint",
        description=DESCRIPTION,
        epilog=EPILOG,
        endpoint="where to send (the scheme names the protocol)",
        topic="the topic (NATS: the subject)",
    )
    p.add_argument("messages", metavar="MESSAGE", nargs="*", help="message bodies (UTF-8)")
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="a file whose bytes are one message (repeatable)",
    )
    p.add_argument("--lines", action="store_true", help="each line of a --file is a message")
    p.add_argument(
        "--key", action="append", default=[], help="a message key (repeatable; JMQ4: one)"
    )
    p.add_argument("--tag", help="the message tag (RocketMQ, JMQ4)")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        type=property_pair,
        metavar="KEY=VALUE",
        help="a user property (NATS: a header; repeatable)",
    )
    p.add_argument(
        "--message-group", metavar="GROUP", help="the FIFO message group (RocketMQ FIFO topics)"
    )
    p.add_argument(
        "--delay",
        type=seconds,
        metavar="SECONDS",
        help="deliver this long after sending (RocketMQ DELAY topics)",
    )
    p.add_argument(
        "--trace-context",
        metavar="TRACEPARENT",
        help="a W3C traceparent to propagate with every message (any protocol)",
    )
    p.add_argument(
        "--trace-state", metavar="TRACESTATE", help="the W3C tracestate that goes with it"
    )
    p.add_argument(
        "--rate", type=float, metavar="N", help="send at most N messages per second (a limit)"
    )
    p.add_argument(
        "--count", type=positive_int, metavar="N", help="send N messages, repeating the given ones"
    )
    p.add_argument("--json", action="store_true", help="print one JSON line per receipt on stdout")
    add_connection_options(p)
    p.set_defaults(func=run)
    p.__class__ = _IntermixedParser


# -- input ------------------------------------------------------------------------------------


class _Skipped:
    """Counts the empty lines the inputs skipped (a broker refuses empty bodies)."""

    def __init__(self) -> None:
        self.lines = 0

    def lines_of(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        for line in lines:
            body = line.rstrip(b"\r\n") if line.endswith(b"\n") else line
            if body:
                yield body
            else:
                self.lines += 1


def _stdin_lines() -> Iterator[bytes | _Idle]:
    """The lines of stdin, read on a thread of its own so that receipts are printed while a
    person types (``_IDLE`` whenever no line came for a moment). The hand-over is bounded."""
    lines: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=1024)

    def read() -> None:
        try:
            for line in sys.stdin.buffer:
                lines.put(line)
            lines.put(None)
        except BaseException as e:  # handed to the main thread
            lines.put(e)

    threading.Thread(target=read, name="ferrymq-stdin", daemon=True).start()
    while True:
        try:
            item = lines.get(timeout=_IDLE_POLL)
        except queue.Empty:
            yield _IDLE
            continue
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _bodies(args: argparse.Namespace, skipped: _Skipped) -> Iterator[_Body]:
    """Every message body of the input, in order (``_IDLE`` in between while stdin is slow)."""
    for text in args.messages:
        yield os.fsencode(text)  # the argument's own bytes, UTF-8 or not
    for path in args.file:
        if args.lines:
            with open(path, "rb") as f:
                yield from skipped.lines_of(f)
        else:
            yield Path(path).read_bytes()
    if not args.messages and not args.file:
        if sys.stdin.isatty():
            print("reading messages from stdin, one per line (Ctrl-D ends)", file=sys.stderr)
        for item in _stdin_lines():
            if isinstance(item, _Idle):
                yield item
            else:
                yield from skipped.lines_of((item,))


def _repeated(bodies: Iterator[_Body], count: int | None) -> Iterator[_Body]:
    """``bodies``, or with ``count`` exactly that many: the first ``count``, or all of them in
    turn until ``count`` were given (only those kept for repeating, at most ``count``)."""
    if count is None:
        yield from bodies
        return
    kept: list[bytes] = []
    for body in bodies:
        if isinstance(body, _Idle):
            yield body
            continue
        if len(kept) == count:
            return
        kept.append(body)
        yield body
    for n in range(len(kept), count if kept else 0):
        yield kept[n % len(kept)]


def _check_files(paths: list[str]) -> None:
    """Fail before connecting when a --file cannot be read."""
    for path in paths:
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ferrymq.InvalidArgumentError(
                f"--file: cannot read {path}: {e.strerror}"
            ) from None


# -- messages and receipts --------------------------------------------------------------------


def _check_fields(args: argparse.Namespace, protocol: str) -> None:
    """Refuse what the protocol would not carry, rather than drop it silently."""
    if protocol == "nats":
        given = [
            name
            for name, value in (
                ("--key", args.key),
                ("--tag", args.tag),
                ("--message-group", args.message_group),
                ("--delay", args.delay),
            )
            if value is not None and value != []
        ]
        if given:
            raise ferrymq.InvalidArgumentError(
                f"{', '.join(given)}: a nats:// message has a subject, headers and a body only "
                f"(send what you need as --property KEY=VALUE headers)"
            )
    if protocol == "jmq" and len(args.key) > 1:
        raise ferrymq.InvalidArgumentError(
            "--key: a JMQ4 message carries one key (its business id), not several"
        )
    _check_trace(args)
    if args.rate is not None and not args.rate > 0:
        raise ferrymq.InvalidArgumentError(f"--rate: {args.rate} must be above zero")
    if args.lines and not args.file:
        raise ferrymq.InvalidArgumentError("--lines: applies to --file (stdin is read by lines)")


def _check_trace(args: argparse.Namespace) -> None:
    """Refuse a bad --trace-context / --trace-state before anything is sent, naming the
    option."""
    if args.trace_context is None:
        if args.trace_state is not None:
            raise ferrymq.InvalidArgumentError("--trace-state: goes with a --trace-context")
        return
    try:
        ferrymq.Message("t", b"", trace_context=args.trace_context, trace_state=args.trace_state)
    except ferrymq.InvalidArgumentError as e:
        text = str(e)
        for name in ("trace_context", "trace_state"):
            if text.startswith(f"{name}: "):
                option = "--" + name.replace("_", "-")
                raise ferrymq.InvalidArgumentError(option + text[len(name) :]) from None
        raise


def _message_factory(args: argparse.Namespace) -> Callable[[bytes], ferrymq.Message]:
    properties = dict(args.property) or None
    keys = args.key or None
    delay = timedelta(seconds=args.delay) if args.delay is not None else None

    def make(body: bytes) -> ferrymq.Message:
        # The delay counts from each message's own creation, just before it is sent.
        return ferrymq.Message(
            args.topic,
            body,
            keys=keys,
            tag=args.tag,
            properties=properties,
            message_group=args.message_group,
            delivery_time=delay,
            trace_context=args.trace_context,
            trace_state=args.trace_state,
        )

    return make


def receipt_json(n: int, receipt: ferrymq.Receipt) -> dict[str, Any]:
    """What ``--json`` prints for the ``n``-th message's receipt."""
    out: dict[str, Any] = {"n": n, "topic": receipt.topic, "message_id": receipt.message_id}
    if isinstance(receipt, ferrymq.SendReceipt):
        out.update(
            queue_id=receipt.queue_id, broker_name=receipt.broker_name, offset=receipt.offset
        )
        if receipt.recall_handle is not None:
            out["recall_handle"] = receipt.recall_handle
    elif isinstance(receipt, ferrymq.JmqSendReceipt):
        out.update(partition=receipt.partition, index=receipt.index)
    elif isinstance(receipt, ferrymq.NatsSendReceipt):
        out.update(stream=receipt.stream, sequence=receipt.sequence, duplicate=receipt.duplicate)
    return out


class _Tally:
    """What became of the messages handed over: receipts printed, failures kept."""

    def __init__(self, as_json: bool, bar: Any, interrupts: Interrupts) -> None:
        self.as_json = as_json
        self.bar = bar
        self.interrupts = interrupts
        self.submitted = 0
        self.first_sent_at: float | None = None
        self.sent = 0
        self.failed = 0
        self.error: ferrymq.FerryError | None = None
        self.last_receipt_at: float | None = None

    def delivered(self, n: int, error: ferrymq.FerryError | None, receipt: Any) -> None:
        with self.interrupts.hold():  # printed means counted
            if error is not None:
                self.failed += 1
                if self.error is None:
                    self.error = error
                return
            if self.as_json:
                print(json.dumps(receipt_json(n, receipt)))
            self.sent += 1
            self.last_receipt_at = time.perf_counter()
            self.bar.update(1)

    def delivered_batch(self, first: int, receipts: list[ferrymq.Receipt]) -> None:
        for i, receipt in enumerate(receipts):
            self.delivered(first + i, None, receipt)


class _Producing:
    """Hands messages to ``Producer.produce`` (RocketMQ 5, JMQ4, NATS)."""

    def __init__(self, producer: ferrymq.Producer, tally: _Tally) -> None:
        self._producer = producer
        self._tally = tally

    def submit(self, n: int, message: ferrymq.Message) -> None:
        self._producer.produce(message, on_delivery=partial(self._tally.delivered, n))
        if n % 256 == 0:
            self._producer.poll(0)

    def wait(self, timeout: float) -> None:
        """Serve receipts for up to ``timeout`` seconds (less when one arrives)."""
        self._producer.poll(timeout)

    def finish(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout)

    @property
    def unconfirmed(self) -> int:
        """Messages handed over whose fate is not known yet."""
        return self._producer.pending


class _Batching:
    """Sends with ``send_batch`` (``remoting://``, which has no ``produce``)."""

    def __init__(self, producer: ferrymq.Producer, tally: _Tally, size: int) -> None:
        self._producer = producer
        self._tally = tally
        self._size = size
        self._pending: list[ferrymq.Message] = []
        self._first = 0
        self._in_flight = 0

    def submit(self, n: int, message: ferrymq.Message) -> None:
        if not self._pending:
            self._first = n
        self._pending.append(message)
        if len(self._pending) >= self._size:
            self.finish()

    def wait(self, timeout: float) -> None:
        self.finish()
        time.sleep(timeout)

    def finish(self, timeout: float | None = None) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self._in_flight = len(batch)
        try:
            receipts = self._producer.send_batch(batch)
        except ferrymq.FerryError as e:
            # Not atomic: the error says how many of the batch were stored.
            self._in_flight = 0
            self._tally.failed += len(batch)
            if self._tally.error is None:
                self._tally.error = e
            return
        self._in_flight = 0
        self._tally.delivered_batch(self._first, receipts)

    @property
    def unconfirmed(self) -> int:
        """Messages handed over whose fate is not known yet."""
        return self._in_flight + len(self._pending)


# -- the command ------------------------------------------------------------------------------


def _summary(tally: _Tally, unconfirmed: int, skipped: _Skipped, interrupted: bool) -> str:
    """The last line: how many were stored, from the first hand-over to the last receipt."""
    started = tally.first_sent_at
    end = tally.last_receipt_at or time.perf_counter()
    took = max(0.0, end - started) if started is not None else 0.0
    noun = "message" if tally.sent == 1 else "messages"
    text = f"sent {tally.sent:,} {noun} in {took:.2f} s"
    if tally.sent > 1 and took > 0:
        text += f" ({tally.sent / took:,.0f} msg/s)"
    if tally.failed:
        text += f", {tally.failed:,} failed"
    if unconfirmed:
        text += f", {unconfirmed:,} not confirmed"
    if skipped.lines:
        text += f"; {skipped.lines:,} empty line{'' if skipped.lines == 1 else 's'} skipped"
    return f"interrupted: {text}" if interrupted else text


def run(args: argparse.Namespace) -> int:
    protocol = protocol_of(args.endpoint, "ENDPOINT")
    _check_fields(args, protocol)
    _check_files(args.file)
    make = _message_factory(args)
    options = connection_options(args)
    if protocol == "rocketmq":
        # The route is fetched at start: a missing topic fails before anything is read.
        options["topics"] = [args.topic]
    skipped = _Skipped()
    with (
        Interrupts() as interrupts,
        ferrymq.Producer(args.endpoint, **options) as producer,
        progress(_total(args), "sent", delay=1.0, quiet=args.json and sys.stdout.isatty()) as bar,
    ):
        tally = _Tally(args.json, bar, interrupts)
        sender: _Producing | _Batching = (
            _Batching(producer, tally, 1 if args.rate else _BATCH)
            if protocol == "remoting"
            else _Producing(producer, tally)
        )
        interrupted = False
        try:
            _send_all(args, make, _bodies(args, skipped), tally, sender, interrupts)
        except KeyboardInterrupt:
            interrupted = True
            with contextlib.suppress(KeyboardInterrupt):
                sender.finish(_DRAIN_ON_INTERRUPT)
        sys.stdout.flush()
        bar.close()  # before the summary, on the line it held
        summary = _summary(tally, sender.unconfirmed, skipped, interrupted)
        if tally.error is not None:
            if tally.sent:
                print(summary, file=sys.stderr)
            raise tally.error
        print(summary, file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _total(args: argparse.Namespace) -> int | None:
    """How many messages will be sent, when known ahead."""
    if args.count is not None:
        return int(args.count)
    if args.lines or not (args.messages or args.file):
        return None
    return len(args.messages) + len(args.file)


def _send_all(
    args: argparse.Namespace,
    make: Callable[[bytes], ferrymq.Message],
    bodies: Iterator[_Body],
    tally: _Tally,
    sender: _Producing | _Batching,
    interrupts: Interrupts,
) -> None:
    """Hand every message over (at most ``--rate`` per second, stopping at the first failure)
    and wait for their receipts."""
    interval = 1.0 / args.rate if args.rate else 0.0
    for body in _repeated(bodies, args.count):
        interrupts.check()
        if isinstance(body, _Idle):
            sender.wait(0)
            continue
        n = tally.submitted
        if tally.first_sent_at is None:
            tally.first_sent_at = time.perf_counter()
        elif interval:
            # The n-th message leaves no earlier than n intervals after the first.
            while (ahead := tally.first_sent_at + n * interval - time.perf_counter()) > 0:
                sender.wait(ahead)
                interrupts.check()
        if tally.error is not None:
            break
        sender.submit(n, make(body))
        tally.submitted += 1
    sender.finish()
    interrupts.check()
