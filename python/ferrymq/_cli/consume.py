"""``ferrymq consume``: print the messages of a topic for a consumer group, from any endpoint.

RocketMQ 5 (``host:port``), JMQ4 (``jmq://``) and NATS JetStream (``nats://``) are read with
:class:`ferrymq.SimpleConsumer` (receive, print, then ack each batch unless ``--no-ack``);
``remoting://`` name servers with :class:`ferrymq.PullConsumer` (poll, print, then commit the
group's offsets unless ``--no-ack``). Messages go to stdout, the summary to stderr.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import sys
import time
from typing import Any

import ferrymq
from ferrymq._endpoints import protocol_of

from ._common import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Interrupts,
    add_connection_options,
    connection_options,
    endpoint_topic_parser,
    positive_int,
    progress,
    seconds,
)

DESCRIPTION = """\
Print the messages of TOPIC (NATS: a subject) that consumer group --group has not consumed yet,
acknowledging each once printed, until --count messages arrived, --timeout passed without a
message, or Ctrl-C.

ENDPOINT names the protocol: host:port[;host:port] (RocketMQ 5 proxy, gRPC), remoting://host:port
(RocketMQ name servers: the group's committed offsets, a new group starts at the earliest
message), jmq://host:port (JMQ4: the group is the app, give --token) or nats://host:port
(JetStream: the group is a durable pull consumer, created on first use).

Each message is printed as a header line (topic, message id, queue, offset, delivery attempt),
its keys, tag, message group, properties and W3C trace context when it has them, then its body
(as text when it is UTF-8, else as a Python bytes literal). --json prints one JSON object per
message instead, with "body" as text and "body_encoding": "utf-8", or base64 and
"body_encoding": "base64".

With --no-ack nothing is acknowledged: the messages come back after their invisible duration
(--invisible; remoting://: to the next run, as the group's offsets stay where they were).
"""

EPILOG = """\
examples:
  ferrymq consume 127.0.0.1:8081 orders --group billing
  ferrymq consume 127.0.0.1:8081 orders --group billing --filter "paid || refunded" --count 10
  ferrymq consume 127.0.0.1:8081 orders --group audit --sql "amount > 100" --timeout 5
  ferrymq consume 127.0.0.1:8081 orders --group peek --no-ack --invisible 10 --timeout 3
  ferrymq consume jmq://127.0.0.1:50088 orders --group my_app --token secret --json | jq .body
  ferrymq consume nats://127.0.0.1:4222 'orders.>' --group billing --count 100 --json
  ferrymq consume remoting://127.0.0.1:9876 orders --group analytics --timeout 5

exit codes: 0 done (--count reached, or --timeout passed without --count), 1 broker or network
failure (refused connection, missing topic, ...), 2 bad usage, 3 fewer than --count messages
before --timeout, 130 interrupted (Ctrl-C; the summary says how many were received).
"""

#: Messages asked for per receive (a RocketMQ proxy serves at most 32).
_BATCH = 32
#: The longest wait of one receive (the clients' default long-polling time).
_MAX_WAIT = 20.0
#: A receive may come back empty this much before its wait is over.
_SLACK = 0.1
#: A RocketMQ receive's call deadline is its wait plus 3 s, and a proxy refuses a deadline
#: below its minimum long-polling time (5 s): waits shorter than this cannot be asked for.
_ROCKETMQ_MIN_WAIT = 2.0


def add_parser(sub: Any) -> None:
    p = endpoint_topic_parser(
        sub,
        "consume",
        help="print the messages of a topic for a consumer group, from any endpoint",
        description=DESCRIPTION,
        epilog=EPILOG,
        endpoint="where to read (the scheme names the protocol)",
        topic="the topic (NATS: a subject, wildcards allowed)",
    )
    p.add_argument(
        "--group",
        required=True,
        help="the consumer group (JMQ4: the app; NATS: the durable consumer's name)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--filter", metavar="EXPR", help='RocketMQ tag expression, e.g. "TagA || TagB"'
    )
    which.add_argument(
        "--sql", metavar="EXPR", help='RocketMQ SQL92 filter on properties, e.g. "amount > 100"'
    )
    p.add_argument(
        "--no-ack",
        action="store_true",
        help="acknowledge nothing: the messages come back later (for the group)",
    )
    p.add_argument("--count", type=positive_int, metavar="N", help="stop after N messages")
    p.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="stop once no message arrived for SECONDS (default: wait until --count or Ctrl-C;"
        " a RocketMQ proxy may hold a receive up to its minimum long polling, 5 s)",
    )
    p.add_argument(
        "--invisible",
        type=seconds,
        metavar="SECONDS",
        help="how long a received message stays hidden from the group unless acked (default "
        "30; a RocketMQ proxy takes 10 or more; JMQ4: the ack timeout; NATS: the durable's "
        "ack_wait, set when it is created)",
    )
    p.add_argument("--stream", help="nats://: the stream (default: the one holding the subject)")
    p.add_argument("--json", action="store_true", help="print one JSON line per message")
    add_connection_options(p)
    p.set_defaults(func=run)


# -- output -----------------------------------------------------------------------------------


def message_json(m: ferrymq.MessageView) -> dict[str, Any]:
    """What ``--json`` prints for one message."""
    try:
        body, encoding = m.body.decode(), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(m.body).decode("ascii"), "base64"
    return {
        "topic": m.topic,
        "message_id": m.message_id,
        "keys": list(m.keys),
        "tag": m.tag,
        "message_group": m.message_group,
        "properties": m.properties,
        "trace_context": m.trace_context,
        "trace_state": m.trace_state,
        "queue_id": m.queue_id,
        "offset": m.offset,
        "delivery_attempt": m.delivery_attempt,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "body": body,
        "body_encoding": encoding,
    }


def message_text(m: ferrymq.MessageView) -> str:
    """The readable form of one message: a header line, its metadata, its body."""
    lines = [
        f"--- {m.topic} {m.message_id} (queue {m.queue_id}, offset {m.offset}, "
        f"attempt {m.delivery_attempt})"
    ]
    meta = []
    if m.keys:
        meta.append(f"keys: {', '.join(m.keys)}")
    if m.tag is not None:
        meta.append(f"tag: {m.tag}")
    if m.message_group is not None:
        meta.append(f"group: {m.message_group}")
    if meta:
        lines.append("  ".join(meta))
    if m.properties:
        lines.append(
            "properties: " + ", ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))
        )
    if m.trace_context is not None:
        state = f" (tracestate {m.trace_state})" if m.trace_state is not None else ""
        lines.append(f"trace: {m.trace_context}{state}")
    try:
        lines.append(m.body.decode())
    except UnicodeDecodeError:
        lines.append(f"({len(m.body)} bytes, not UTF-8) {m.body!r}")
    return "\n".join(lines)


# -- reading ----------------------------------------------------------------------------------


def _subscription(args: argparse.Namespace) -> str | ferrymq.FilterExpression | None:
    if args.sql is not None:
        return ferrymq.FilterExpression.sql(args.sql)
    tags: str | None = args.filter
    return tags


class _Receiving:
    """A :class:`ferrymq.SimpleConsumer` (RocketMQ 5, JMQ4, NATS): receive, then ack."""

    def __init__(self, args: argparse.Namespace, protocol: str, wait: float) -> None:
        options = connection_options(args)
        self._invisible: float | None = args.invisible
        if protocol == "nats":
            nats: dict[str, Any] = {}
            if args.stream is not None:
                nats["stream"] = args.stream
            if args.invisible is not None:
                # JetStream's invisible duration is the durable consumer's ack_wait.
                nats["ack_wait"] = args.invisible
                self._invisible = None
            options["nats_options"] = nats
        elif args.stream is not None:
            raise ferrymq.InvalidArgumentError("--stream: only for nats:// endpoints")
        self._protocol = protocol
        self._consumer = ferrymq.SimpleConsumer(
            args.endpoint,
            args.group,
            subscriptions={args.topic: _subscription(args)},
            await_duration=max(wait, _ROCKETMQ_MIN_WAIT) if protocol == "rocketmq" else wait,
            **options,
        )

    def start(self) -> None:
        try:
            self._consumer.start()
        except ferrymq.InvalidArgumentError as e:
            # The arguments were checked by the constructor; at start a nats:// consumer asks
            # the server for the stream of the subject: none is a missing topic, as elsewhere.
            if self._protocol == "nats" and "no stream holds subject" in str(e):
                raise ferrymq.BrokerError(str(e), protocol="nats") from None
            raise

    def receive(self, n: int) -> list[ferrymq.MessageView]:
        return self._consumer.receive(n, self._invisible)

    def ack(self, messages: list[ferrymq.MessageView]) -> None:
        self._consumer.ack(messages)

    def close(self) -> None:
        self._consumer.close()


class _Polling:
    """A :class:`ferrymq.PullConsumer` (``remoting://``): poll, then commit the offsets."""

    def __init__(self, args: argparse.Namespace, wait: float) -> None:
        options = connection_options(args)
        for name, value in (("--app", args.app), ("--token", args.token)):
            if value is not None:
                raise ferrymq.InvalidArgumentError(f"{name}: not used by remoting:// endpoints")
        options.pop("token", None)  # $FERRYMQ_TOKEN, meant for another endpoint
        for name, value in (
            ("--sql", args.sql),
            ("--stream", args.stream),
            ("--invisible", args.invisible),
        ):
            if value is not None:
                raise ferrymq.InvalidArgumentError(
                    f"{name}: not for remoting:// endpoints (read by offset: --filter takes a "
                    f"tag expression, and an unacknowledged message is read again by the next run)"
                )
        self._topic = args.topic
        self._wait = wait
        self._consumer = ferrymq.PullConsumer(
            args.endpoint,
            args.group,
            tag_filter=args.filter,
            auto_offset_reset="earliest",
            **options,
        )

    def start(self) -> None:
        self._consumer.assign(self._consumer.queues(self._topic))

    def receive(self, n: int) -> list[ferrymq.MessageView]:
        return self._consumer.poll(n, self._wait)

    def ack(self, messages: list[ferrymq.MessageView]) -> None:
        # Every assigned queue's position: just past the messages printed.
        self._consumer.commit()

    def close(self) -> None:
        self._consumer.close()


# -- the command ------------------------------------------------------------------------------


def _summary(received: int, args: argparse.Namespace, took: float, why: str) -> str:
    of = f" of {args.count:,}" if args.count is not None and received < args.count else ""
    noun = "message" if received == 1 and not of else "messages"
    text = f"received {received:,}{of} {noun} in {took:.2f} s"
    if received > 1 and took > 0:
        text += f" ({received / took:,.0f} msg/s)"
    if args.no_ack and received:
        text += " (not acknowledged)"
    return f"{text}: {why}" if why else text


def run(args: argparse.Namespace) -> int:
    protocol = protocol_of(args.endpoint, "ENDPOINT")
    # Receives that wait --timeout in total, in whole steps of at most _MAX_WAIT.
    wait = args.timeout / math.ceil(args.timeout / _MAX_WAIT) if args.timeout else _MAX_WAIT
    source = _Polling(args, wait) if protocol == "remoting" else _Receiving(args, protocol, wait)
    with Interrupts() as interrupts:
        return _consume(args, source, interrupts)


def _consume(
    args: argparse.Namespace, source: _Receiving | _Polling, interrupts: Interrupts
) -> int:
    render = (lambda m: json.dumps(message_json(m))) if args.json else message_text
    received = 0
    acking = 0  # messages whose ack is in flight
    why = ""
    code = EXIT_OK
    started = time.perf_counter()
    try:
        source.start()
        started = last = time.perf_counter()
        # The messages printed on a terminal show the progress themselves.
        with progress(args.count, "received", delay=1.0, quiet=sys.stdout.isatty()) as bar:
            while args.count is None or received < args.count:
                want = _BATCH if args.count is None else min(_BATCH, args.count - received)
                messages = source.receive(want)
                now = time.perf_counter()
                if not messages:
                    if args.timeout is not None and now - last >= args.timeout - _SLACK:
                        if args.count is not None:
                            why = f"nothing more arrived within {args.timeout:g} s"
                            code = EXIT_INCOMPLETE
                        break
                    continue
                last = now
                with interrupts.hold():  # printed means counted
                    for m in messages:
                        print(render(m))
                        received += 1
                    sys.stdout.flush()
                    bar.update(len(messages))
                if not args.no_ack:
                    acking = len(messages)
                    source.ack(messages)
                    acking = 0
                interrupts.check()
    except KeyboardInterrupt:
        why, code = "interrupted", EXIT_INTERRUPTED
        if acking:
            why += f" while acknowledging the last {acking:,} (they may come back)"
    except ferrymq.FerryError:
        if received:
            took = time.perf_counter() - started
            print(_summary(received, args, took, "stopped by the error below"), file=sys.stderr)
        raise
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            source.close()
    print(_summary(received, args, time.perf_counter() - started, why), file=sys.stderr)
    return code
