"""``ferrymq demo``: real traffic on an embedded broker, with nothing installed.

Starts an in-process RocketMQ 5 broker with two endpoints, publishes messages with a
:class:`ferrymq.Producer` (batched sends, many RPCs in flight), consumes them with a
:class:`ferrymq.PushConsumer` whose listener is a plain Python function, and prints the
throughput of both sides. Every message is counted: the demo fails if one is missing.
"""

from __future__ import annotations

import sys
import threading
import time

import ferrymq
from ferrymq.testing import EmbeddedBroker

TOPIC = "ferrymq-demo"
GROUP = "ferrymq-demo-group"


def _bar(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    elapsed = max(time.perf_counter() - started, 1e-9)
    rate = done / elapsed
    sys.stdout.write(
        f"\r{label:<8} [{'#' * filled}{'.' * (width - filled)}] "
        f"{done:>9,}/{total:,}  {rate:>11,.0f} msg/s"
    )
    sys.stdout.flush()


def run(messages: int = 200_000, body_size: int = 100, batch: int = 500) -> int:
    """Run the demo; returns a process exit code."""
    if messages <= 0 or body_size < 1 or batch <= 0:
        raise ferrymq.InvalidArgumentError("messages, body_size and batch must be positive")
    body = b"x" * body_size
    received = 0
    lock = threading.Lock()
    all_in = threading.Event()

    def listener(view: ferrymq.MessageView) -> None:
        nonlocal received
        with lock:
            received += 1
            if received >= messages:
                all_in.set()

    print(f"ferrymq {ferrymq.__version__}: {messages:,} messages of {body_size} B")
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
            while sent < messages:
                n = min(batch, messages - sent)
                producer.send_batch([ferrymq.Message(TOPIC, body) for _ in range(n)])
                sent += n
                _bar("sent", sent, messages, started)
            send_secs = time.perf_counter() - started
            print()
            deadline = time.monotonic() + 120
            while not all_in.wait(0.1):
                with lock:
                    got = received
                _bar("received", got, messages, started)
                if time.monotonic() > deadline:
                    print(f"\nonly {got:,} of {messages:,} messages arrived within 120 s")
                    return 1
            total_secs = time.perf_counter() - started
            _bar("received", messages, messages, started)
            print()
    print(
        f"sent {messages:,} in {send_secs:.2f} s ({messages / send_secs:,.0f} msg/s); "
        f"all received after {total_secs:.2f} s ({messages / total_secs:,.0f} msg/s end to end)"
    )
    return 0
