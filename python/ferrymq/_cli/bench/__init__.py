"""``ferrymq bench``: producers and consumers of any protocol through the public classes, with
throughput for each side and HDR latency percentiles, as text, JSON and a picture.

The package: ``_workers.py`` the producer and consumer threads, ``_run.py`` the target, the
clients and the main loop, ``_report.py`` the figures and their text, ``_plot.py`` the PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

import ferrymq

from .._common import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    fail,
    non_negative_int,
    positive_int,
    seconds,
)
from ._run import Bench, Target, connect_target, new_run_id
from ._workers import HEADER_SIZE, MODES, Plan

BENCH_HELP = f"""\
Measure throughput and latency: producers send --count messages (or for --duration seconds)
while consumers of one group receive them, each side through ferrymq's public classes
(Producer; SimpleConsumer, receiving and acking in batches).

ENDPOINT is a RocketMQ 5 proxy (host:port), jmq://host:port or nats://host:port (the topic,
or for NATS a stream holding the subject, must exist). Without it, an embedded broker is
started in this process with the topic created; --protocol picks its RocketMQ or JMQ4 side.

Modes (--mode):
  sync    send() one message at a time; latency per message (the call)
  async   produce() with --window messages in flight; latency per message (produce to its
          delivery callback)
  batch   send_batch() of --batch messages, one request each; latency per batch (the call)
  packed  send_batch(packed=True): --batch messages per request; latency per batch

End-to-end latency: each body carries its send time (the first {HEADER_SIZE} bytes), and
a consumer subtracts it from the time its batch arrived. Percentiles come from an HDR
histogram (three significant digits). MB/s counts message bodies, 10^6 bytes per MB.

Examples:
  ferrymq bench                                 # embedded broker, 100,000 messages
  ferrymq bench --mode packed --batch 500 --size 1024 --plot bench.png
  ferrymq bench --protocol jmq --producers 2 --consumers 2 --json
  ferrymq bench 127.0.0.1:8081 --topic orders --duration 30
  ferrymq bench nats://127.0.0.1:4222 --topic bench.a --consumers 0   # publish only

Exit codes: 0 every message received, 1 broker or network failure (refused connection,
missing topic), 2 bad usage (a bad option or ENDPOINT, --plot without matplotlib),
3 incomplete (consumers got fewer messages than were sent, none arriving for --timeout
seconds), 130 interrupted (Ctrl-C; the figures so far are printed).
"""


def _size(text: str) -> int:
    value = positive_int(text)
    if value < HEADER_SIZE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is below {HEADER_SIZE} (the bytes of the run id and send time)"
        )
    return value


def add_parser(sub: Any) -> None:
    b = sub.add_parser(
        "bench",
        help="measure throughput and latency percentiles (embedded broker or ENDPOINT)",
        description=BENCH_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument(
        "endpoint",
        nargs="?",
        metavar="ENDPOINT",
        help="host:port, jmq://host:port or nats://host:port (default: an embedded broker)",
    )
    b.add_argument(
        "--protocol",
        choices=("rocketmq", "jmq"),
        help="the embedded broker's side to bench (default rocketmq)",
    )
    b.add_argument("--topic", default="ferrymq-bench", help="topic or subject (ferrymq-bench)")
    b.add_argument(
        "--group",
        default="ferrymq-bench",
        help="consumer group (JMQ4: the app; NATS: the durable name) (ferrymq-bench)",
    )
    b.add_argument("--token", help="JMQ4 app token, or NATS token")
    b.add_argument(
        "--size", type=_size, default=128, metavar="BYTES", help="body size (default 128)"
    )
    amount = b.add_mutually_exclusive_group()
    amount.add_argument(
        "--count",
        type=positive_int,
        metavar="N",
        help="messages to send over all producers (consume only: to receive) (default 100000)",
    )
    amount.add_argument(
        "--duration", type=seconds, metavar="SECONDS", help="send for this long instead"
    )
    b.add_argument(
        "--producers",
        type=non_negative_int,
        default=1,
        metavar="N",
        help="default 1; 0: consume only (messages of any bench run count)",
    )
    b.add_argument(
        "--consumers",
        type=non_negative_int,
        default=1,
        metavar="N",
        help="default 1; 0: publish only",
    )
    b.add_argument("--mode", choices=MODES, default="async", help="how to send (default async)")
    b.add_argument(
        "--window",
        type=positive_int,
        default=1000,
        metavar="N",
        help="messages in flight per producer in async mode (default 1000)",
    )
    b.add_argument(
        "--batch",
        type=positive_int,
        default=100,
        metavar="N",
        help="messages per send_batch, and per receive (default 100)",
    )
    b.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up (exit 3) when nothing arrived for this long after sending (default 10)",
    )
    b.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    b.add_argument("--plot", metavar="FILE", help="write a PNG (needs ferrymq[plot])")
    b.set_defaults(func=run)


def _check_usage(args: argparse.Namespace) -> None:
    if args.producers == 0 and args.consumers == 0:
        raise ferrymq.InvalidArgumentError("--producers, --consumers: both are 0, nothing to do")
    if args.count is None and args.duration is None:
        args.count = 100_000


def _settings(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    return {
        "endpoint": target.endpoint,
        "protocol": target.protocol,
        "embedded": target.embedded,
        "topic": args.topic,
        "group": args.group,
        "size": args.size,
        "mode": args.mode,
        "window": args.window,
        "batch": args.batch,
        "producers": args.producers,
        "consumers": args.consumers,
        "count": args.count,
        "duration": args.duration,
        "timeout": args.timeout,
    }


def _clients(
    args: argparse.Namespace, target: Target, stack: contextlib.ExitStack
) -> tuple[list[ferrymq.Producer], list[ferrymq.SimpleConsumer]]:
    """Every client, built (which checks the arguments) and closed by ``stack``."""
    consumers = []
    for _ in range(args.consumers):
        c = ferrymq.SimpleConsumer(
            target.endpoint, args.group, subscriptions=args.topic, **target.consumer_options
        )
        stack.callback(c.close)
        consumers.append(c)
    producers = []
    options = dict(target.producer_options)
    if args.mode == "async":
        options["max_pending"] = args.window
    for _ in range(args.producers):
        p = ferrymq.Producer(target.endpoint, **options)
        stack.callback(p.close)
        producers.append(p)
    return producers, consumers


def run(args: argparse.Namespace) -> int:
    _check_usage(args)
    if args.plot:
        from ._plot import require_matplotlib

        require_matplotlib(args.plot)
    with contextlib.ExitStack() as stack:
        target = connect_target(args, stack)
        producers, consumers = _clients(args, target, stack)
        try:
            # Consumers first, so that their group exists before the first message is sent.
            for client in (*consumers, *producers):
                client.start()
        except ferrymq.InvalidArgumentError as e:
            # The arguments were checked when the clients were built: refused at start, it is
            # the server that has no such topic or stream (JetStream says so this way).
            return fail("bench", e, EXIT_FAILED)
        plan = Plan(args.topic, args.size, args.mode, args.window, args.batch, new_run_id())
        bench = Bench(
            plan,
            producers,
            consumers,
            count=args.count,
            duration=args.duration,
            timeout=args.timeout,
            batch=args.batch,
            consume_any_run=args.producers == 0,
        )
        try:
            bench.run()
        except KeyboardInterrupt:
            bench.interrupt()
        _publish(args, target, bench)
        if bench.interrupted:
            print("ferrymq bench: interrupted", file=sys.stderr, flush=True)
        # Consumers may be waiting out a receive's long polling; the figures are out already.
        bench.join(producers_only=False)
    if bench.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if bench.complete else EXIT_INCOMPLETE


def _publish(args: argparse.Namespace, target: Target, bench: Bench) -> None:
    from . import _report as report

    outcome = bench.outcome()
    summary = report.summarize(_settings(args, target), outcome)
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(report.text(summary), flush=True)
    if args.plot:
        from ._plot import plot

        plot(args.plot, summary, outcome)
        if not args.json:
            print(f"plot written to {args.plot}", flush=True)
