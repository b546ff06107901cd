"""JMQ4 consumer throughput: ``ferrymq.PushConsumer("jmq://…")`` (the native push engine)
against a peer in the same run, a ``SimpleConsumer("jmq://…")`` loop (receive up to 32, ack
them together, repeat) on one thread.

Both consume ``--messages`` pre-loaded messages (sent in batches of ``--batch``; 1 = one stored
entry per message) from a fresh topic of ``--partitions`` partitions on the JMQ4 side of an
in-process :class:`ferrymq.testing.EmbeddedBroker` (its server runs on Rust threads, without
the GIL, but shares the machine), with a trivial listener. For each it prints messages per
second (from the start until every message was consumed and acked) and CPU µs per message of
the process (server included), and the ratio push / simple. Rounds alternate the two, and the
figures are the median of ``--rounds``.

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/bench_jmq_push.py [--messages 50000] [--batch 1] [--partitions 8]
        [--rounds 3] [--threads 4]
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable

import ferrymq
from _bench_measure import Span, parser
from ferrymq.testing import EmbeddedBroker

APP = "test_app"
TOKEN = "test_token"
_ids = itertools.count()


def preload(broker: EmbeddedBroker, n: int, batch: int, partitions: int) -> str:
    topic = f"bench-jmq-{next(_ids)}"
    broker.create_topic(topic, queues=partitions)
    body = b"x" * 100
    with ferrymq.Producer(broker.jmq_endpoint, app=APP, token=TOKEN) as p:
        messages = [ferrymq.Message(topic, body) for _ in range(n)]
        if batch <= 1:
            for m in messages:
                p.send(m)
        else:
            for i in range(0, n, batch):
                p.send_batch(messages[i : i + batch])
    return topic


def run_push(broker: EmbeddedBroker, topic: str, n: int, threads: int) -> tuple[float, float]:
    done = threading.Event()
    count = itertools.count(1)

    def listener(m: ferrymq.MessageView) -> None:
        if next(count) >= n:
            done.set()

    clock = Span()
    pc = ferrymq.PushConsumer(
        broker.jmq_endpoint,
        APP,
        subscriptions=topic,
        listener=listener,
        consumption_threads=threads,
        token=TOKEN,
    ).start()
    done.wait(600)
    while pc.stats()["acked"] < n:
        time.sleep(0.001)
    elapsed, used = clock.stop()
    pc.close()
    return n / elapsed, used / n * 1e6


def run_simple(broker: EmbeddedBroker, topic: str, n: int, threads: int) -> tuple[float, float]:
    got = 0
    clock = Span()
    with ferrymq.SimpleConsumer(
        broker.jmq_endpoint, APP, subscriptions=topic, token=TOKEN, await_duration=1.0
    ) as c:
        while got < n:
            batch = c.receive(32)
            if batch:
                c.ack(batch)
                got += len(batch)
    elapsed, used = clock.stop()
    return n / elapsed, used / n * 1e6


def main() -> int:
    ap = parser(__doc__, messages=50_000, batch=1, partitions=8, rounds=3)
    ap.add_argument("--threads", type=int, default=4, help="push consumer's consumption_threads")
    args = ap.parse_args()
    runs: dict[str, Callable[[EmbeddedBroker, str, int, int], tuple[float, float]]] = {
        "push (native engine)": run_push,
        "simple loop (peer)": run_simple,
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    with EmbeddedBroker(jmq=True) as broker:
        for _ in range(args.rounds):
            for label, run in runs.items():
                topic = preload(broker, args.messages, args.batch, args.partitions)
                results[label].append(run(broker, topic, args.messages, args.threads))
    med = {
        k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
        for k, v in results.items()
    }
    print(f"{args.messages} messages, batch {args.batch}, {args.partitions} partitions")
    print(f"{'client':<24}{'msg/s':>12}{'CPU µs/msg':>14}")
    for k, (rate, us) in med.items():
        print(f"{k:<24}{rate:>12,.0f}{us:>14.1f}")
    push, simple = med["push (native engine)"][0], med["simple loop (peer)"][0]
    print(f"ratio push / simple: {push / simple:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
