"""Push-consumer throughput: ferrymq vs the official ``rocketmq-python-client``, same broker.

Both clients consume pre-loaded messages from the same in-process embedded broker, with a
trivial Python callback, in one run; the script prints messages per second for each and the
ratio. A run is timed from the consumer's start until the broker reports every message of the
topic acknowledged by the group (so acks are included, not only callbacks).

Scenarios:
* ``normal``: a NORMAL topic, a normal group;
* ``fifo``: a FIFO topic, a FIFO group, messages spread over many message groups; ferrymq is
  measured without and with the FIFO accelerator (the official client has none).

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/bench_consumer.py [--messages 200000] [--official-messages 5000]
        [--body 100] [--queues 8] [--message-groups 512] [--scenarios normal,fifo]

The official client is measured on fewer messages because it is much slower; rates are
per-second figures either way.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ferrymq
from ferrymq import _native
from ferrymq.testing import EmbeddedBroker


def preload(endpoints: str, topic: str, n: int, body: bytes, groups: int) -> None:
    p = _native.RocketMQProducer(endpoints, topics=[topic])
    p.start()
    try:
        if groups:
            # One batch per message group keeps each group's order and its queue.
            per_group = [[] for _ in range(groups)]  # type: list[list[ferrymq.Message]]
            for i in range(n):
                g = i % groups
                per_group[g].append(ferrymq.Message(topic, body, message_group=f"mg-{g}"))
            for msgs in per_group:
                for s in range(0, len(msgs), 256):
                    p.send_batch(msgs[s : s + 256])
        else:
            msgs = [ferrymq.Message(topic, body) for _ in range(min(n, 256))]
            sent = 0
            while sent < n:
                k = min(256, n - sent)
                p.send_batch(msgs[:k])
                sent += k
    finally:
        p.close()


def all_acked(broker: EmbeddedBroker, topic: str, group: str) -> bool:
    for q in broker.stats()["topics"][topic]["queues"]:
        g = q["groups"].get(group)
        if q["max_offset"] > q["min_offset"] and (
            g is None or g["acked_offset"] < q["max_offset"] or g["inflight"] > 0
        ):
            return False
    return True


def wait_acked(
    broker: EmbeddedBroker,
    topic: str,
    group: str,
    timeout: float,
    consumed: Callable[[], bool],
) -> float:
    """Wait until ``consumed()`` (a cheap check), then until the broker has every ack."""
    deadline = time.perf_counter() + timeout
    while not consumed():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{group} did not consume {topic} within {timeout:.0f}s")
        time.sleep(0.005)
    while not all_acked(broker, topic, group):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{group} did not ack {topic} within {timeout:.0f}s")
        time.sleep(0.002)
    return time.perf_counter()


def run_ferrymq(
    broker: EmbeddedBroker, topic: str, group: str, n: int, *, accelerator: bool
) -> float:
    calls = 0

    def listener(m: ferrymq.MessageView) -> None:
        nonlocal calls
        calls += 1

    c = ferrymq.PushConsumer(
        broker.endpoints,
        group,
        subscriptions={topic: "*"},
        listener=listener,
        fifo_accelerator=accelerator,
    )
    t0 = time.perf_counter()
    c.start()
    try:
        t1 = wait_acked(broker, topic, group, 600, lambda: calls >= n)
    finally:
        c.close()
    assert calls >= n, (calls, n)
    return n / (t1 - t0)


def shim_official_client() -> None:
    """The official push consumer computes a delivery-latency metric from the
    ``delivery_timestamp`` element of the receive stream and raises when a server omits it,
    dropping the whole received batch (the embedded broker does not send that element). The
    shim skips only that metric when the timestamp is missing; consumption is unchanged."""
    from rocketmq.v5.client.metrics.client_metrics import ClientMetrics

    original = ClientMetrics.receive_after

    def receive_after(self: Any, consumer_group: Any, messages: Any) -> None:
        if messages and messages[0].transport_delivery_timestamp is None:
            return
        original(self, consumer_group, messages)

    ClientMetrics.receive_after = receive_after  # type: ignore[method-assign]


def run_official(broker: EmbeddedBroker, topic: str, group: str, n: int) -> float:
    shim_official_client()
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    lock = threading.Lock()
    calls = 0

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            nonlocal calls
            with lock:
                calls += 1
            return ConsumeResult.SUCCESS

    config = ClientConfiguration(broker.endpoints, Credentials(), request_timeout=5)
    c = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    t0 = time.perf_counter()
    c.startup()
    try:
        t1 = wait_acked(broker, topic, group, 900, lambda: calls >= n)
    finally:
        c.shutdown()
    assert calls >= n, (calls, n)
    return n / (t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--official-messages", type=int, default=5_000)
    ap.add_argument("--body", type=int, default=100, help="body size in bytes")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--message-groups", type=int, default=512)
    ap.add_argument("--scenarios", default="normal,fifo")
    ap.add_argument("--no-official", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    body = b"x" * args.body
    scenarios = args.scenarios.split(",")
    results: list[tuple[str, float, float | None]] = []
    with EmbeddedBroker(
        long_polling_min=1.0, max_topic_bytes=1 << 30, auto_renew_invisible=300.0
    ) as broker:
        for scenario in scenarios:
            fifo = scenario == "fifo"
            groups = args.message_groups if fifo else 0
            kind = "FIFO" if fifo else "NORMAL"
            variants = [("ferrymq", False)] + ([("ferrymq+accelerator", True)] if fifo else [])
            official_rate: float | None = None
            if not args.no_official:
                topic, group = f"official-{scenario}", f"official-{scenario}-g"
                broker.create_topic(topic, kind, args.queues)
                broker.create_group(group, fifo=fifo)
                preload(broker.endpoints, topic, args.official_messages, body, groups)
                official_rate = run_official(broker, topic, group, args.official_messages)
                print(
                    f"[{scenario}] official rocketmq-python-client: "
                    f"{official_rate:,.0f} msg/s ({args.official_messages:,} messages)",
                    flush=True,
                )
            for name, accel in variants:
                topic, group = f"{name}-{scenario}", f"{name}-{scenario}-g"
                broker.create_topic(topic, kind, args.queues)
                broker.create_group(group, fifo=fifo)
                preload(broker.endpoints, topic, args.messages, body, groups)
                rate = run_ferrymq(broker, topic, group, args.messages, accelerator=accel)
                ratio = f", {rate / official_rate:,.1f}x the official client" if official_rate else ""
                print(
                    f"[{scenario}] {name}: {rate:,.0f} msg/s ({args.messages:,} messages){ratio}",
                    flush=True,
                )
                results.append((f"{scenario}/{name}", rate, official_rate))
    print("\nsummary (msg/s, trivial Python callback, acks included):")
    for label, rate, official in results:
        extra = f"  official {official:,.0f}  ratio {rate / official:,.1f}x" if official else ""
        print(f"  {label:<32} {rate:>12,.0f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
