"""Push-consumer throughput: ferrymq vs the official ``rocketmq-python-client``, same server.

Both clients consume pre-loaded messages from the same server, with a trivial Python callback,
in one run; the script prints messages per second for each and the ratio. The server is the
in-process embedded broker (default) or, with ``--server real``, a real Apache RocketMQ 5 proxy
(``scripts/rocketmq-server``; started and stopped by the script if it is not running).

On the embedded broker a run is timed from the consumer's start until the broker reports every
message of the topic acknowledged by the group (so acks are included, not only callbacks). The
real server has no cheap ack counter: there a run is timed until the last callback, then the
consumer is closed (ferrymq's close sends the pending acks; its time is printed separately).

Scenarios:
* ``normal``: a NORMAL topic, a normal group;
* ``fifo``: a FIFO topic, a FIFO group, messages spread over many message groups; ferrymq is
  measured without and with the FIFO accelerator (the official client has none).

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/bench_consumer.py [--messages 200000] [--official-messages 5000]
        [--body 100] [--queues 8] [--message-groups 512] [--scenarios normal,fifo]
        [--server embedded|real]

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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ferrymq
from _bench_server import BenchServer, add_arguments, open_server
from ferrymq import _native


def preload(endpoints: str, topic: str, n: int, body: bytes, groups: int) -> None:
    p = _native.RocketMQProducer(endpoints, topics=[topic])
    p.start()
    try:
        if groups:
            # One batch per message group keeps each group's order and its queue (a FIFO batch is
            # sent message after message); the groups load in parallel.
            per_group = [[] for _ in range(groups)]  # type: list[list[ferrymq.Message]]
            for i in range(n):
                g = i % groups
                per_group[g].append(ferrymq.Message(topic, body, message_group=f"mg-{g}"))
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(p.send_batch, per_group))
        else:
            msgs = [ferrymq.Message(topic, body) for _ in range(min(n, 256))]
            sent = 0
            while sent < n:
                k = min(256, n - sent)
                p.send_batch(msgs[:k])
                sent += k
    finally:
        p.close()


def wait_acked(
    server: BenchServer,
    topic: str,
    group: str,
    timeout: float,
    consumed: Callable[[], bool],
) -> float:
    """Wait until ``consumed()`` (a cheap check), then until the broker has every ack (when it
    can tell: the embedded broker)."""
    deadline = time.perf_counter() + timeout
    while not consumed():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{group} did not consume {topic} within {timeout:.0f}s")
        time.sleep(0.005)
    while server.all_acked(topic, group) is False:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{group} did not ack {topic} within {timeout:.0f}s")
        time.sleep(0.002)
    return time.perf_counter()


def run_ferrymq(server: BenchServer, topic: str, group: str, n: int, *, accelerator: bool) -> float:
    calls = 0

    def listener(m: ferrymq.MessageView) -> None:
        nonlocal calls
        calls += 1

    c = ferrymq.PushConsumer(
        server.endpoints,
        group,
        subscriptions={topic: "*"},
        listener=listener,
        fifo_accelerator=accelerator,
    )
    t0 = time.perf_counter()
    c.start()
    try:
        t1 = wait_acked(server, topic, group, 600, lambda: calls >= n)
    finally:
        t2 = time.perf_counter()
        c.close()
        if server.broker is None:
            print(f"  (close, sending the last acks: {time.perf_counter() - t2:.2f} s)", flush=True)
    assert calls >= n, (calls, n)
    return n / (t1 - t0)


def shim_official_client() -> None:
    """The official push consumer computes a delivery-latency metric from the
    ``delivery_timestamp`` element of the receive stream and raises when a server omits it,
    dropping the whole received batch. The embedded broker now ends every receive stream with
    that element, as the proxy does (tests/test_conformance.py), so this shim only guards
    against servers that omit it: it skips that metric when the timestamp is missing;
    consumption is unchanged."""
    from rocketmq.v5.client.metrics.client_metrics import ClientMetrics

    original = ClientMetrics.receive_after

    def receive_after(self: Any, consumer_group: Any, messages: Any) -> None:
        if messages and messages[0].transport_delivery_timestamp is None:
            return
        original(self, consumer_group, messages)

    ClientMetrics.receive_after = receive_after  # type: ignore[method-assign]


def run_official(server: BenchServer, topic: str, group: str, n: int) -> float:
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

    config = ClientConfiguration(server.endpoints, Credentials(), request_timeout=5)
    c = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    t0 = time.perf_counter()
    c.startup()
    try:
        t1 = wait_acked(server, topic, group, 900, lambda: calls >= n)
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
    add_arguments(ap)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    body = b"x" * args.body
    scenarios = args.scenarios.split(",")
    results: list[tuple[str, float, float | None]] = []
    with open_server(
        args, long_polling_min=1.0, max_topic_bytes=1 << 30, auto_renew_invisible=300.0
    ) as server:
        for scenario in scenarios:
            fifo = scenario == "fifo"
            groups = args.message_groups if fifo else 0
            kind = "FIFO" if fifo else "NORMAL"
            variants = [("ferrymq", False)] + ([("ferrymq+accelerator", True)] if fifo else [])
            official_rate: float | None = None
            if not args.no_official:
                topic = server.name(f"official-{scenario}")
                group = server.name(f"official-{scenario}-g")
                server.create_topic(topic, kind, args.queues)
                server.create_group(group, fifo=fifo)
                preload(server.endpoints, topic, args.official_messages, body, groups)
                official_rate = run_official(server, topic, group, args.official_messages)
                print(
                    f"[{scenario}] official rocketmq-python-client: "
                    f"{official_rate:,.0f} msg/s ({args.official_messages:,} messages)",
                    flush=True,
                )
            for name, accel in variants:
                topic = server.name(f"{name}-{scenario}".replace("+", "-"))
                group = server.name(f"{name}-{scenario}-g".replace("+", "-"))
                server.create_topic(topic, kind, args.queues)
                server.create_group(group, fifo=fifo)
                preload(server.endpoints, topic, args.messages, body, groups)
                rate = run_ferrymq(server, topic, group, args.messages, accelerator=accel)
                ratio = (
                    f", {rate / official_rate:,.1f}x the official client" if official_rate else ""
                )
                print(
                    f"[{scenario}] {name}: {rate:,.0f} msg/s ({args.messages:,} messages){ratio}",
                    flush=True,
                )
                results.append((f"{scenario}/{name}", rate, official_rate))
    acks = "acks included" if args.server == "embedded" else "until the last callback"
    print(f"\nsummary (server: {args.server}; msg/s, trivial Python callback, {acks}):")
    for label, rate, official in results:
        extra = f"  official {official:,.0f}  ratio {rate / official:,.1f}x" if official else ""
        print(f"  {label:<32} {rate:>12,.0f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
