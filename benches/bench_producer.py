"""Producer throughput: ferrymq vs the official ``rocketmq-python-client`` (PyPI), side by side on
the same server in one run: the embedded broker (default) or, with ``--server real``, a real
Apache RocketMQ 5 proxy (``scripts/rocketmq-server``; started and stopped by the script if it
is not running).

Scenarios, each with 100 B and 1 KiB bodies:

* ``sync``    — one blocking ``send`` after another (round-trip bound);
* ``async``   — the official client's ``send_async`` futures (a window of in-flight sends)
  against ferrymq's ``produce`` + ``flush`` (bounded, batched in the background),
  ``send_batch`` (1000 messages per call, one request each) and ``send_batch(packed=True)``
  (1000 messages per call in one request: messages that differ only in their bodies).

Prints, for both clients, messages/s (wall clock) and the CPU time of the whole process per
message (client + embedded broker, which run in this process for both; with ``--server real``
the client only: the proxy runs in its own JVM), with the ratios. On a
shared machine the wall-clock rate depends on what else runs; the CPU cost per message does
much less, and ``2 cores / cost`` is the rate the run would reach on two dedicated cores.

Build the extension in release mode first (``maturin develop --release``), then run
``python benches/bench_producer.py [--seconds 3] [--server embedded|real]``.
"""

from __future__ import annotations

import argparse
import logging
import resource
import time
from collections.abc import Callable
from concurrent.futures import Future

import ferrymq
from _bench_server import add_arguments, open_server

Rate = tuple[float, float]  # (messages/s, process CPU microseconds per message)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(seconds: float, step: Callable[[], int], finish: Callable[[], object] = int) -> Rate:
    """Run ``step`` (returns messages done) until ``seconds`` pass, then ``finish``."""
    done = 0
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += step()
    finish()
    elapsed = time.perf_counter() - start
    return done / elapsed, (cpu_seconds() - cpu0) / done * 1e6


def ferry_sync(p: ferrymq.Producer, topic: str, body: bytes, seconds: float) -> Rate:
    msg = ferrymq.Message(topic, body)

    def step() -> int:
        for _ in range(50):
            p.send(msg)
        return 50

    return timed(seconds, step)


def ferry_produce(p: ferrymq.Producer, topic: str, body: bytes, seconds: float) -> Rate:
    msg = ferrymq.Message(topic, body)
    errors: list[object] = []

    def on_delivery(err: object, receipt: object) -> None:
        if err is not None:
            errors.append(err)

    def step() -> int:
        for _ in range(20_000):
            p.produce(msg, on_delivery)
        return 20_000

    rate = timed(seconds, step, p.flush)
    if errors:
        raise RuntimeError(f"{len(errors)} deliveries failed, first: {errors[0]}")
    return rate


def ferry_batch(
    p: ferrymq.Producer, topic: str, body: bytes, seconds: float, packed: bool = False
) -> Rate:
    batch = [ferrymq.Message(topic, body)] * 1000

    def step() -> int:
        p.send_batch(batch, packed=packed)
        return 1000

    return timed(seconds, step)


def official_client(endpoints: str, topic: str) -> object:
    from rocketmq import ClientConfiguration, Credentials, Producer

    p = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=10), (topic,))
    p.startup()
    return p


def official_message(topic: str, body: bytes) -> object:
    from rocketmq import Message

    m = Message()
    m.topic = topic
    m.body = body
    return m


def official_sync(p: object, topic: str, body: bytes, seconds: float) -> Rate:
    msg = official_message(topic, body)

    def step() -> int:
        for _ in range(20):
            p.send(msg)  # type: ignore[attr-defined]
        return 20

    return timed(seconds, step)


def official_async(p: object, topic: str, body: bytes, seconds: float) -> Rate:
    msg = official_message(topic, body)
    window = 256

    def step() -> int:
        futures: list[Future[object]] = [
            p.send_async(msg)  # type: ignore[attr-defined]
            for _ in range(window)
        ]
        for f in futures:
            f.result()
        return window

    return timed(seconds, step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--no-official", action="store_true", help="skip the official client")
    add_arguments(ap)
    args = ap.parse_args()
    logging.getLogger("rocketmq").setLevel(logging.ERROR)

    with open_server(args, endpoints=1, when_full="drop_oldest") as server:
        topic = server.name("bench")
        server.create_topic(topic, "NORMAL", queues=8)
        official = None if args.no_official else official_client(server.endpoints, topic)
        rows: list[tuple[str, int, Rate, Rate | None]] = []
        with ferrymq.Producer(server.endpoints, topics=[topic]) as p:
            for size in (100, 1024):
                body = b"x" * size
                ours = ferry_sync(p, topic, body, args.seconds)
                theirs = official_sync(official, topic, body, args.seconds) if official else None
                rows.append(("sync send", size, ours, theirs))
                theirs_async = (
                    official_async(official, topic, body, args.seconds) if official else None
                )
                ours = ferry_produce(p, topic, body, args.seconds)
                rows.append(("produce+flush vs send_async", size, ours, theirs_async))
                ours = ferry_batch(p, topic, body, args.seconds)
                rows.append(("send_batch(1000) vs send_async", size, ours, theirs_async))
                ours = ferry_batch(p, topic, body, args.seconds, packed=True)
                rows.append(("send_batch(packed) vs send_async", size, ours, theirs_async))
        if official is not None:
            official.shutdown()  # type: ignore[attr-defined]

    print(f"server: {args.server}")
    print(
        f"{'scenario':32} {'body':>6} | {'ferrymq':>10} {'official':>10} {'ratio':>7} msg/s"
        f" | {'ferrymq':>8} {'official':>9} {'ratio':>7} CPU us/msg | 2-core msg/s"
    )
    for name, size, (rate, cpu), theirs in rows:
        if theirs:
            t_rate, t_cpu = theirs
            rt = f"{t_rate:10,.0f} {rate / t_rate:6.1f}x"
            ct = f"{t_cpu:9.1f} {t_cpu / cpu:6.1f}x"
        else:
            rt, ct = f"{'-':>10} {'-':>7}", f"{'-':>9} {'-':>7}"
        print(
            f"{name:32} {size:>5}B | {rate:10,.0f} {rt}       | {cpu:8.2f} {ct}"
            f"            | {2e6 / cpu:12,.0f}"
        )
    with open("/proc/loadavg") as f:
        print(f"(load average during the run: {f.read().split()[0]})")


if __name__ == "__main__":
    main()
