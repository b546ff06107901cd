"""``ferrymq demo``: real traffic on an embedded broker, with nothing installed.

Starts an in-process RocketMQ 5 broker with two endpoints, publishes messages with a
:class:`ferrymq.Producer` (batched sends, many RPCs in flight), consumes them with a
:class:`ferrymq.PushConsumer` whose listener is a plain Python function, and prints the
throughput of both sides. Every message is counted: the demo fails if one is missing.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import ferrymq
from ferrymq.testing import EmbeddedBroker

from ._common import EXIT_INCOMPLETE, positive_int, progress

TOPIC = "ferrymq-demo"
GROUP = "ferrymq-demo-group"


def add_parser(sub: Any) -> None:
    d = sub.add_parser("demo", help="send and receive messages on an embedded broker")
    d.add_argument(
        "--messages", type=positive_int, default=200_000, help="how many (default 200000)"
    )
    d.add_argument(
        "--body-size", type=positive_int, default=100, help="bytes per message (default 100)"
    )
    d.add_argument(
        "--batch", type=positive_int, default=500, help="messages per send (default 500)"
    )
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    messages: int = args.messages
    body = b"x" * args.body_size
    received = 0
    lock = threading.Lock()
    all_in = threading.Event()

    def listener(view: ferrymq.MessageView) -> None:
        nonlocal received
        with lock:
            received += 1
            if received >= messages:
                all_in.set()

    print(f"ferrymq {ferrymq.__version__}: {messages:,} messages of {args.body_size} B")
    with EmbeddedBroker(endpoints=2) as broker:
        broker.create_topic(TOPIC, "NORMAL", queues=8)
        broker.create_group(GROUP)
        print(f"embedded broker listening on {broker.endpoints}")
        with (
            ferrymq.Producer(broker.endpoints, topics=[TOPIC]) as producer,
            ferrymq.PushConsumer(
                broker.endpoints, GROUP, subscriptions={TOPIC: "*"}, listener=listener
            ),
        ):
            started = time.perf_counter()
            sent = 0
            with progress(messages, "sent") as bar:
                while sent < messages:
                    n = min(args.batch, messages - sent)
                    producer.send_batch([ferrymq.Message(TOPIC, body) for _ in range(n)])
                    sent += n
                    bar.update(n)
            send_secs = time.perf_counter() - started
            deadline = time.monotonic() + 120
            with progress(messages, "received") as bar:
                while not all_in.wait(0.1):
                    with lock:
                        got = received
                    bar.update(got - bar.n)
                    if time.monotonic() > deadline:
                        print(f"only {got:,} of {messages:,} messages arrived within 120 s")
                        return EXIT_INCOMPLETE
                bar.update(messages - bar.n)
            total_secs = time.perf_counter() - started
    print(
        f"sent {messages:,} in {send_secs:.2f} s ({messages / send_secs:,.0f} msg/s); "
        f"all received after {total_secs:.2f} s ({messages / total_secs:,.0f} msg/s end to end)"
    )
    return 0
