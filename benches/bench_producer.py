"""Producer throughput: ferrymq vs the official ``rocketmq-python-client`` (PyPI), side by side on
the same embedded broker in one run.

Scenarios, each with 100 B and 1 KiB bodies:

* ``sync``    — one blocking ``send`` after another (round-trip bound);
* ``async``   — the official client's ``send_async`` futures (a window of in-flight sends)
  against ferrymq's ``produce`` + ``flush`` (bounded, batched in the background) and
  ``send_batch`` (1000 messages per call).

Prints messages/s of both and the ratio. Build the extension in release mode first
(``maturin develop --release``). Run: ``python benches/bench_producer.py [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

import ferrymq
from ferrymq.testing import EmbeddedBroker


def timed(seconds: float, step: Callable[[], int]) -> float:
    """Run ``step`` (returns messages done) until ``seconds`` pass; messages/s."""
    done = 0
    start = time.perf_counter()
    while True:
        done += step()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def ferry_sync(p: ferrymq.Producer, topic: str, body: bytes, seconds: float) -> float:
    msg = ferrymq.Message(topic, body)

    def step() -> int:
        for _ in range(50):
            p.send(msg)
        return 50

    return timed(seconds, step)


def ferry_produce(p: ferrymq.Producer, topic: str, body: bytes, seconds: float) -> float:
    msg = ferrymq.Message(topic, body)
    errors: list[object] = []

    def on_delivery(err: object, receipt: object) -> None:
        if err is not None:
            errors.append(err)

    def step() -> int:
        for _ in range(20_000):
            p.produce(msg, on_delivery)
        return 20_000

    start = time.perf_counter()
    done = 0
    while time.perf_counter() - start < seconds:
        done += step()
    p.flush()
    rate = done / (time.perf_counter() - start)
    if errors:
        raise RuntimeError(f"{len(errors)} deliveries failed, first: {errors[0]}")
    return rate


def ferry_batch(p: ferrymq.Producer, topic: str, body: bytes, seconds: float) -> float:
    batch = [ferrymq.Message(topic, body)] * 1000

    def step() -> int:
        p.send_batch(batch)
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


def official_sync(p: object, topic: str, body: bytes, seconds: float) -> float:
    msg = official_message(topic, body)

    def step() -> int:
        for _ in range(20):
            p.send(msg)  # type: ignore[attr-defined]
        return 20

    return timed(seconds, step)


def official_async(p: object, topic: str, body: bytes, seconds: float) -> float:
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
    args = ap.parse_args()
    logging.getLogger("rocketmq").setLevel(logging.ERROR)

    with EmbeddedBroker(endpoints=1, when_full="drop_oldest") as broker:
        topic = "bench"
        broker.create_topic(topic, "NORMAL", queues=8)
        official = None if args.no_official else official_client(broker.endpoints, topic)
        rows: list[tuple[str, int, float, float | None]] = []
        with ferrymq.Producer(broker.endpoints, topics=[topic]) as p:
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
        if official is not None:
            official.shutdown()  # type: ignore[attr-defined]

    print(f"{'scenario':34} {'body':>6} {'ferrymq msg/s':>15} {'official msg/s':>15} {'ratio':>8}")
    for name, size, ours, theirs in rows:
        t = f"{theirs:15,.0f}" if theirs else f"{'-':>15}"
        r = f"{ours / theirs:7.1f}x" if theirs else f"{'-':>8}"
        print(f"{name:34} {size:>5}B {ours:15,.0f} {t} {r}")


if __name__ == "__main__":
    main()
