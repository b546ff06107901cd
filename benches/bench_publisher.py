"""ferrymq's managed publisher (``ferrymq.AsyncPublisher``) side by side with its peers, one run:

* **NATS**: vs nats-py's ``publish_async`` on the same nats-server (started here: loopback,
  JetStream, temporary store, file storage by default);
* **RocketMQ**: ``AsyncPublisher`` over ``ferrymq.Producer`` vs the official
  ``rocketmq-python-client``'s ``Producer.send_async`` on the same embedded broker
  (``python -m ferrymq broker``, started here in its own process).

Both sides publish the same number of messages of the same size (128 B by default) with the same
window of messages awaiting their ack, as a sliding window (ferrymq ``max_in_flight`` = W and
``refill_allowed_at`` = W - 1; nats-py ``publish_async_max_pending`` = W; the official RocketMQ
client, which has no window, behind a semaphore of W released by each future's callback). Each
round is timed from the first publish until every ack is in:

* ``drain``: publish everything, then wait once (ferrymq ``drain()``, nats-py
  ``publish_async_completed()``, the official client: every future done);
* ``await-each``: also await every message's own ack future (``asyncio.gather`` of the ack
  futures; the official client: ``result()`` of every future).

The servers run in their own processes, so the CPU time of this process per message (``CPU
us/msg``) is the client's alone; on a loaded machine it varies much less than msg/s. Rounds
alternate who goes first; the script prints medians and the median of the per-round ratios.

ferrymq stamps every NATS message with a ``Nats-Msg-Id`` (de-duplication), which costs the server
extra work; nats-py sends none unless ``--nats-py-msg-id`` is given. On RocketMQ the flight id is
a message key.

    python benches/bench_publisher.py                    # both, 100k / 20k messages, 3 rounds
    python benches/bench_publisher.py --only nats -n 20000 -r 1      # quick

Needs ``nats-server`` (``apt-get install -y nats-server``), ``nats-py`` and
``rocketmq-python-client`` (``pip install nats-py rocketmq-python-client``). Build ferrymq with
``maturin develop --release`` first.

Medians on a 2-core machine (msg/s ferrymq vs peer, ratio; CPU us/msg, ratio), one run of
``-r 3``:

    NATS      drain      173.0k vs 50.6k  3.4x    3.5 vs  19.6  5.7x
    NATS      await-each  92.9k vs 39.2k  2.4x    9.3 vs  25.4  2.7x
    RocketMQ  drain       40.9k vs  2.5k 15.5x   25.2 vs   433 15.7x
    RocketMQ  await-each  29.8k vs  2.4k 11.4x   41.7 vs   440  9.9x

The NATS msg/s ratio follows the machine (per round, drain 2.9-3.5x across three runs the same
hour): in drain nats-server (about 7.5 us of CPU per message) and ferrymq (about 3.5 us) share
the two cores, while nats-py is bound by its one Python thread. In ``await-each`` an asyncio
future per message and ``gather``'s callbacks (about 3.2 us per future on their own) come on
top, for both clients.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import os
import statistics
import threading
from collections.abc import Iterator
from typing import Any

import ferrymq
from _bench_measure import Span
from _bench_server import broker_process, nats_server

MODES = ("drain", "await-each")
Sample = tuple[float, float]  # (seconds, CPU seconds of this process)


# -- NATS --------------------------------------------------------------------------------------


async def ferrymq_round(
    producer: Any, topic: str, n: int, payload: bytes, window: int, await_each: bool
) -> Sample:
    """Publish `n` messages with an AsyncPublisher over `producer`."""
    pub = ferrymq.AsyncPublisher(producer, max_in_flight=window, refill_allowed_at=window - 1)
    pub.start()
    clock = Span()
    if await_each:
        futures = [(await pub.publish_async(topic, payload)).ack_future for _ in range(n)]
        acks = await asyncio.gather(*futures)
        assert len(acks) == n
    else:
        for _ in range(n):
            await pub.publish_async(topic, payload)
    await pub.drain()
    return clock.stop()


async def ferrymq_nats(
    url: str, subject: str, n: int, payload: bytes, window: int, await_each: bool
) -> Sample:
    producer = await ferrymq.Producer(url).start_async()
    try:
        return await ferrymq_round(producer, subject, n, payload, window, await_each)
    finally:
        await producer.close_async()


async def nats_py(
    url: str, subject: str, n: int, payload: bytes, window: int, await_each: bool, msg_id: bool
) -> Sample:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=window)
    clock = Span()
    futures: list[Any] = []
    for i in range(n):
        headers = {"Nats-Msg-Id": f"np-{i}"} if msg_id else None
        fut = await js.publish_async(subject, payload, headers=headers)
        if await_each:
            futures.append(fut)
    if await_each:
        acks = await asyncio.gather(*futures)
        assert len(acks) == n
    await js.publish_async_completed()
    sample = clock.stop()
    await nc.close()
    return sample


def bench_nats(args: argparse.Namespace, results: dict[tuple[str, str, str], list[Sample]]) -> str:
    payload = b"x" * args.size
    n = args.messages
    with nats_server() as (url, version):
        admin = ferrymq.JetStream(url)
        for mode in MODES:
            each = mode == "await-each"
            for r in range(args.rounds):
                # Alternate who goes first so that neither always gets a warmer server.
                order = ["ferrymq", "nats-py"] if r % 2 == 0 else ["nats-py", "ferrymq"]
                for who in order:
                    name = f"BENCH{r}{who.replace('-', '').upper()}"
                    subject = f"bench.{r}.{who.replace('-', '')}"
                    admin.delete_stream(name)
                    admin.create_stream(name, [subject], storage=args.storage)
                    if who == "ferrymq":
                        coro = ferrymq_nats(url, subject, n, payload, args.window, each)
                    else:
                        coro = nats_py(
                            url, subject, n, payload, args.window, each, args.nats_py_msg_id
                        )
                    sample = asyncio.run(coro)
                    stored = admin.stream_info(name).messages
                    assert stored == n, f"{who}: {stored} stored, expected {n}"
                    admin.delete_stream(name)
                    results.setdefault(("nats", mode, who), []).append(sample)
        admin.close()
    return (
        f"NATS: {version}, {args.storage} storage, {n} messages of {args.size} B, "
        f"window {args.window}"
    )


# -- RocketMQ ----------------------------------------------------------------------------------


@contextlib.contextmanager
def rocketmq_broker(topic: str) -> Iterator[str]:
    """`python -m ferrymq broker` in its own process, with `topic` (8 queues)."""
    config = {
        "topics": [{"name": topic, "message_type": "NORMAL", "queues": 8}],
        "groups": [{"name": "bench-count"}],
        # Keep memory bounded over many rounds: evict old messages instead of refusing.
        "options": {"max_topic_bytes": 1 << 30, "when_full": "drop_oldest"},
    }
    with broker_process(config) as (_proc, endpoints):
        yield endpoints


async def ferrymq_rocketmq(
    endpoints: str, topic: str, n: int, payload: bytes, window: int, await_each: bool
) -> Sample:
    producer = ferrymq.Producer(endpoints, topics=[topic])
    await producer.start_async()
    try:
        return await ferrymq_round(producer, topic, n, payload, window, await_each)
    finally:
        await producer.close_async()


def official_rocketmq(
    endpoints: str, topic: str, n: int, payload: bytes, window: int, await_each: bool
) -> Sample:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    try:
        msg = Message()
        msg.topic = topic
        msg.body = payload
        room = threading.BoundedSemaphore(window)

        def release(_: object) -> None:
            room.release()

        clock = Span()
        futures: list[concurrent.futures.Future[Any]] = []
        for _ in range(n):
            room.acquire()
            fut = producer.send_async(msg)
            fut.add_done_callback(release)
            futures.append(fut)
        if await_each:
            receipts = [f.result() for f in futures]
            assert len(receipts) == n
        else:
            concurrent.futures.wait(futures)
            failed = sum(1 for f in futures if f.exception() is not None)
            assert failed == 0, f"{failed} sends failed"
        return clock.stop()
    finally:
        producer.shutdown()


class StoredCounter:
    """Messages the broker stored on `topic` so far: the sum of the queues' end offsets."""

    def __init__(self, endpoints: str, topic: str) -> None:
        from ferrymq._native import OffsetReader

        self.topic = topic
        self.reader = OffsetReader.rocketmq(endpoints, "bench-count", topics=[topic])
        self.reader.start()

    def __call__(self) -> int:
        queues = self.reader.partitions(self.topic)
        return sum(self.reader.latest(self.topic, q) for q in queues)


def bench_rocketmq(
    args: argparse.Namespace, results: dict[tuple[str, str, str], list[Sample]]
) -> str:
    logging.getLogger("rocketmq").setLevel(logging.ERROR)
    payload = b"x" * args.size
    n = args.rocketmq_messages
    window = args.rocketmq_window
    topic = "bench"
    with rocketmq_broker(topic) as endpoints:
        stored = StoredCounter(endpoints, topic)
        for mode in MODES:
            each = mode == "await-each"
            for r in range(args.rounds):
                order = ["ferrymq", "official"] if r % 2 == 0 else ["official", "ferrymq"]
                for who in order:
                    before = stored()
                    if who == "ferrymq":
                        sample = asyncio.run(
                            ferrymq_rocketmq(endpoints, topic, n, payload, window, each)
                        )
                    else:
                        sample = official_rocketmq(endpoints, topic, n, payload, window, each)
                    added = stored() - before
                    assert added == n, f"{who}: {added} stored, expected {n}"
                    results.setdefault(("rocketmq", mode, who), []).append(sample)
        stored.reader.close()
    return (
        f"RocketMQ: embedded broker (own process), {n} messages of {args.size} B, window {window}"
    )


# -- main --------------------------------------------------------------------------------------


def report(
    title: str,
    target: str,
    peer: str,
    n: int,
    results: dict[tuple[str, str, str], list[Sample]],
    verbose: bool,
) -> None:
    print(title)
    print(f"  {'':10} | {'msg/s':^27} | {'CPU us/msg':^26}")
    print(
        f"  {'mode':10} | {'ferrymq':>9} {peer:>9} {'ratio':>7} "
        f"| {'ferrymq':>8} {peer:>9} {'ratio':>7}"
    )
    for mode in MODES:
        ours = results[(target, mode, "ferrymq")]
        theirs = results[(target, mode, peer)]
        pairs = list(zip(ours, theirs, strict=True))
        if verbose:
            for i, ((s, c), (t_s, t_c)) in enumerate(pairs):
                print(
                    f"    round {i}   | {n / s:9,.0f} {n / t_s:9,.0f} {t_s / s:6.2f}x "
                    f"| {c / n * 1e6:8.1f} {t_c / n * 1e6:9.1f} {t_c / c:6.2f}x"
                )
        rate = statistics.median(n / s for s, _ in ours)
        t_rate = statistics.median(n / s for s, _ in theirs)
        cpu = statistics.median(c / n * 1e6 for _, c in ours)
        t_cpu = statistics.median(c / n * 1e6 for _, c in theirs)
        # Each round's two runs are adjacent in time: the median of the per-round ratios is
        # less sensitive to the machine's load changing during the run.
        ratio = statistics.median(t_s / s for (s, _), (t_s, _) in pairs)
        cpu_ratio = statistics.median(t_c / c for (_, c), (_, t_c) in pairs)
        print(
            f"  {mode:10} | {rate:9,.0f} {t_rate:9,.0f} {ratio:6.2f}x "
            f"| {cpu:8.1f} {t_cpu:9.1f} {cpu_ratio:6.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", choices=["nats", "rocketmq"], help="run one comparison only")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print every round")
    ap.add_argument("-n", "--messages", type=int, default=100_000, help="NATS messages per round")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-s", "--size", type=int, default=128, help="payload bytes")
    ap.add_argument("-w", "--window", type=int, default=4000, help="NATS: messages awaiting acks")
    ap.add_argument("--storage", default="file", choices=["file", "memory"])
    ap.add_argument("--nats-py-msg-id", action="store_true", help="nats-py also sends Nats-Msg-Id")
    ap.add_argument(
        "--rocketmq-messages", type=int, default=20_000, help="RocketMQ messages per round"
    )
    ap.add_argument(
        "--rocketmq-window", type=int, default=1000, help="RocketMQ: messages awaiting acks"
    )
    args = ap.parse_args()

    results: dict[tuple[str, str, str], list[Sample]] = {}
    titles: dict[str, str] = {}
    if args.only in (None, "nats"):
        titles["nats"] = bench_nats(args, results)
    if args.only in (None, "rocketmq"):
        titles["rocketmq"] = bench_rocketmq(args, results)

    print(
        f"{args.rounds} rounds each; medians, and the median of the per-round ratios "
        "(ferrymq / peer for msg/s, peer / ferrymq for CPU us/msg: higher favours ferrymq)"
    )
    if "nats" in titles:
        report(titles["nats"], "nats", "nats-py", args.messages, results, args.verbose)
    if "rocketmq" in titles:
        report(
            titles["rocketmq"],
            "rocketmq",
            "official",
            args.rocketmq_messages,
            results,
            args.verbose,
        )
    with open("/proc/loadavg") as f:
        print(f"(load average: {f.read().split()[0]}, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
