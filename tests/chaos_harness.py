"""Chaos harness: producers and consumers run while faults are injected, and every message is
accounted for.

Each message carries ``<id>|<group>|<seq>`` as its body (and its id as a key): a unique id and,
for FIFO topics, the message group and a per-group sequence number. One producer feeds each
message group, one message at a time (sync ``send`` or ``produce``, which keeps a group's
messages in order), so the order in which the broker stores a group is its sequence order.

Accounting, per consumer group (each consumer group receives every message of its topic):

* **acked**: ids whose send the client saw succeed (``send`` returned, ``on_delivery`` without
  error, the publisher's flight acked). A send that failed or timed out may still have been
  stored; if such a message is received it is counted as ``unacked_received``, never as an error.
* **received**: ids the consumer *consumed*: the push listener returned ``SUCCESS`` (a delivery
  the listener failed on purpose is not a consumption), or the simple consumer processed the
  message before acking it.
* **lost** = acked - received, after the drain (which waits until every acked id was received, or
  a bounded deadline). Must be 0.
* **duplicates**: consumptions of an id already consumed (at-least-once redeliveries: a failed or
  refused ack, an expired invisibility, a send retried after the broker stored it but the answer
  was lost).
* **reordered** (FIFO only): the *first* consumption of sequence ``s`` of a group after the first
  consumption of a higher sequence of the same group (a message that was skipped and came later).
* **rewinds** (FIFO only): a redelivery (a duplicate) of sequence ``s`` consumed after a higher
  sequence of its group was already consumed: the listener saw the group go backwards. It is a
  duplicate, not a reorder, but a FIFO consumer that waits for each ack keeps it at 0 too.

NORMAL topics have no order guarantee; their order columns are ``n/a``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ferrymq
from ferrymq import ConsumeResult, Message, Producer, PushConsumer, SimpleConsumer
from ferrymq.testing import EmbeddedBroker
from servers import RealServer

PRODUCERS = ("send", "produce", "publisher")
CONSUMERS = ("push", "simple", "push_fifo")
#: Fault kinds of the embedded broker (endpoints numbered from 0).
EMBEDDED_FAULTS = (
    "refuse",
    "hang",
    "latency",
    "restart",
    "drop_telemetry",
    "throttle_send",
    "fail_send",
    "fail_ack",
    "fail_receive",
)


@dataclass
class Scenario:
    name: str
    seconds: float = 6.0  # producing time
    drain: float = 30.0  # longest wait for every acked id to be received
    seed: int = 1
    producers: tuple[str, ...] = PRODUCERS
    consumers: tuple[str, ...] = CONSUMERS
    faults: tuple[str, ...] = EMBEDDED_FAULTS
    fault_gap: tuple[float, float] = (0.2, 0.6)  # seconds between two faults
    fifo_groups: int = 4  # message groups per FIFO producer
    fifo_pipelining: bool = False
    fifo_accelerator: bool = False
    listener_failure_rate: float = 0.02
    rate: float = 400.0  # most messages/s per producer
    endpoints: int = 2
    simple_await: float = 1.0  # simple consumer's long polling (a real proxy: 5 s or more)
    simple_invisible: float = 3.0  # its invisible duration (a real proxy: 10 s or more)


# -- the ledger ------------------------------------------------------------------------------


@dataclass
class ConsumerLedger:
    topic: str
    fifo: bool
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    high: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, set[int]] = field(default_factory=dict)
    stored_twice: int = 0
    duplicates: int = 0
    reordered: int = 0
    rewinds: int = 0
    listener_failures: int = 0
    receive_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consumed(self, mid: str, group: str, seq: int, offset: int) -> None:
        with self.lock:
            self.counts[mid] += 1
            high = self.high.get(group, -1) if self.fifo else -1
            offsets = self.offsets.setdefault(mid, set())
            if self.counts[mid] > 1:
                self.duplicates += 1
                if offset not in offsets:
                    # Another stored copy (a send retried after the broker stored it): the
                    # broker delivers it in its own place in the queue, not as a redelivery.
                    self.stored_twice += 1
                    offsets.add(offset)
                elif self.fifo and seq < high:
                    self.rewinds += 1
                    self._example(f"rewind {group}: {seq} again after {high}")
                return
            offsets.add(offset)
            if not self.fifo:
                return
            if seq < high:
                self.reordered += 1
                self._example(f"reorder {group}: {seq} first seen after {high}")
            else:
                self.high[group] = seq

    def _example(self, what: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(what)


@dataclass
class Ledger:
    acked: dict[str, str] = field(default_factory=dict)  # id -> topic
    send_failures: collections.Counter[str] = field(default_factory=collections.Counter)
    consumers: dict[str, ConsumerLedger] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, mid: str, topic: str) -> None:
        with self.lock:
            self.acked[mid] = topic

    def fail(self, producer: str) -> None:
        with self.lock:
            self.send_failures[producer] += 1

    def acked_of(self, topic: str) -> set[str]:
        with self.lock:
            return {m for m, t in self.acked.items() if t == topic}

    def missing(self) -> int:
        return sum(len(self.acked_of(c.topic) - set(c.counts)) for c in self.consumers.values())


def body_of(mid: str, group: str, seq: int) -> bytes:
    return f"{mid}|{group}|{seq}".encode()


def parse(body: bytes) -> tuple[str, str, int]:
    mid, group, seq = body.decode().split("|")
    return mid, group, int(seq)


# -- faults ----------------------------------------------------------------------------------


def fault_schedule(sc: Scenario) -> list[tuple[float, str, int, float]]:
    """(at, kind, endpoint, parameter): the same seed gives the same schedule."""
    rng = random.Random(sc.seed)
    out: list[tuple[float, str, int, float]] = []
    t = rng.uniform(*sc.fault_gap)
    while t < sc.seconds and sc.faults:
        kind = rng.choice(sc.faults)
        out.append((t, kind, rng.randrange(sc.endpoints), rng.uniform(0.2, 0.8)))
        t += rng.uniform(*sc.fault_gap)
    return out


class EmbeddedFaults:
    """Applies a schedule to an embedded broker; counts what it injected by kind."""

    def __init__(self, broker: EmbeddedBroker, schedule: list[tuple[float, str, int, float]]):
        self.broker = broker
        self.schedule = schedule
        self.injected: collections.Counter[str] = collections.Counter()
        self._undo: list[tuple[float, Callable[[], None]]] = []

    def run(self, stop: threading.Event, t0: float) -> None:
        b = self.broker
        for at, kind, ep, p in self.schedule:
            while not stop.is_set() and time.monotonic() - t0 < at:
                self._undo_due(t0)
                stop.wait(0.02)
            if stop.is_set():
                break
            self._undo_due(t0)
            now = time.monotonic() - t0
            if kind in ("refuse", "hang"):
                b.set_unavailable(ep, kind)  # type: ignore[arg-type]
                self._undo.append((now + p, lambda ep=ep: b.set_unavailable(ep, None)))
            elif kind == "latency":
                b.set_latency(ep, p / 4)
                self._undo.append((now + p * 2, lambda ep=ep: b.set_latency(ep, 0)))
            elif kind == "restart":
                b.restart(ep)
            elif kind == "drop_telemetry":
                b.drop_telemetry(ep)
            else:
                code, rpc = {
                    "throttle_send": ("TOO_MANY_REQUESTS", "SendMessage"),
                    "fail_send": ("INTERNAL_SERVER_ERROR", "SendMessage"),
                    "fail_ack": ("INTERNAL_SERVER_ERROR", "AckMessage"),
                    "fail_receive": ("INTERNAL_SERVER_ERROR", "ReceiveMessage"),
                }[kind]
                b.inject_status(ep, code, rpc=rpc, count=1 + int(p * 5))
            self.injected[kind] += 1
        self.clear()

    def _undo_due(self, t0: float) -> None:
        now = time.monotonic() - t0
        due = [u for u in self._undo if u[0] <= now]
        self._undo = [u for u in self._undo if u[0] > now]
        for _, undo in due:
            undo()

    def clear(self) -> None:
        self._undo = []
        self.broker.clear_faults()


class RealServerKills:
    """SIGKILLs the real proxy (and name server) and starts it again, ``cycles`` times."""

    def __init__(self, server: RealServer, cycles: int, gap: float) -> None:
        self.server, self.cycles, self.gap = server, cycles, gap
        self.injected: collections.Counter[str] = collections.Counter()
        self.downtime: list[float] = []

    def run(self, stop: threading.Event, t0: float) -> None:
        for _ in range(self.cycles):
            if stop.wait(self.gap):
                return
            self.server.stop(kill=True)
            self.injected["sigkill"] += 1
            self.downtime.append(self.server.start())
            self.injected["restart"] += 1


# -- producers -------------------------------------------------------------------------------


class Producers:
    def __init__(self, sc: Scenario, ledger: Ledger, endpoints: str, normal: str, fifo: str):
        self.sc, self.ledger, self.normal, self.fifo = sc, ledger, normal, fifo
        self.endpoints = endpoints
        self.sent: collections.Counter[str] = collections.Counter()

    def _messages(self, name: str, fifo: bool) -> Iterable[tuple[Message, str, str]]:
        seqs = [0] * self.sc.fifo_groups
        n = 0
        while True:
            n += 1
            mid = f"{name}-{n}"
            if fifo and n % 2 == 0:
                g = n % self.sc.fifo_groups
                group, seqs[g] = f"{name}-g{g}", seqs[g] + 1
                m = Message(
                    self.fifo, body_of(mid, group, seqs[g]), keys=[mid], message_group=group
                )
                yield m, mid, self.fifo
            else:
                yield Message(self.normal, body_of(mid, "", 0), keys=[mid]), mid, self.normal

    def _pace(self, t0: float, n: int, stop: threading.Event) -> bool:
        ahead = n / self.sc.rate - (time.monotonic() - t0)
        if ahead > 0:
            stop.wait(ahead)
        return not stop.is_set()

    def run(self, kind: str, producer: Producer, stop: threading.Event) -> None:
        getattr(self, f"_run_{kind}")(producer, stop)

    def _run_send(self, p: Producer, stop: threading.Event) -> None:
        t0 = time.monotonic()
        for n, (m, mid, topic) in enumerate(self._messages("send", fifo=True)):
            if not self._pace(t0, n, stop):
                return
            self.sent["send"] += 1
            try:
                p.send(m)
            except ferrymq.FerryError:
                self.ledger.fail("send")
            else:
                self.ledger.ack(mid, topic)

    def _run_produce(self, p: Producer, stop: threading.Event) -> None:
        def report(mid: str, topic: str) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, receipt: Any) -> None:
                if err is None:
                    self.ledger.ack(mid, topic)
                else:
                    self.ledger.fail("produce")

            return on_delivery

        t0 = time.monotonic()
        for n, (m, mid, topic) in enumerate(self._messages("produce", fifo=True)):
            if not self._pace(t0, n, stop):
                break
            self.sent["produce"] += 1
            p.produce(m, on_delivery=report(mid, topic))
            if n % 64 == 63:
                p.flush(30)
        p.flush(60)

    def _run_publisher(self, p: Producer, stop: threading.Event) -> None:
        # NORMAL topic only: the publisher retries a message while later ones are in flight,
        # so it does not keep a message group's order (a retried message lands after them).
        retry = ferrymq.RetryConfig(attempts=3, backoff=(0.1, 0.3))
        pub = ferrymq.AsyncPublisher(p, max_in_flight=64, retry=retry, wait_timeout=10.0)
        pub.start()
        futures = []
        t0 = time.monotonic()
        try:
            for n, (m, mid, topic) in enumerate(self._messages("publisher", fifo=False)):
                if not self._pace(t0, n, stop):
                    break
                self.sent["publisher"] += 1
                fut = pub.submit(m)

                def done(f: concurrent.futures.Future[Any], mid: str = mid, t: str = topic) -> None:
                    if f.exception() is None:
                        self.ledger.ack(mid, t)
                    else:
                        self.ledger.fail("publisher")

                fut.add_done_callback(done)
                futures.append(fut)
        finally:
            pub.close(30)
        concurrent.futures.wait(futures, timeout=30)


# -- consumers -------------------------------------------------------------------------------


def _fails_on_purpose(seed: int, mid: str, rate: float) -> bool:
    h = hashlib.blake2b(f"{seed}/{mid}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < rate


def push_listener(sc: Scenario, book: ConsumerLedger) -> Callable[[Any], ConsumeResult]:
    def listener(message: Any) -> ConsumeResult:
        mid, group, seq = parse(message.body)
        # Only a first delivery fails on purpose, so every message is consumed on its retry.
        first = message.delivery_attempt <= 1
        if first and _fails_on_purpose(sc.seed, mid, sc.listener_failure_rate):
            with book.lock:
                book.listener_failures += 1
            return ConsumeResult.FAILURE
        book.consumed(mid, group, seq, message.offset)
        return ConsumeResult.SUCCESS

    return listener


def simple_loop(
    consumer: SimpleConsumer, book: ConsumerLedger, invisible: float, stop: threading.Event
) -> None:
    while not stop.is_set():
        try:
            batch = consumer.receive(max_messages=16, invisible_duration=invisible)
        except ferrymq.FerryError as e:
            with book.lock:
                book.receive_errors[f"{type(e).__name__}: {str(e)[:80]}"] += 1
            stop.wait(0.05)
            continue
        for message in batch:
            book.consumed(*parse(message.body), message.offset)
        try:
            if batch:
                consumer.ack(batch)
        except ferrymq.FerryError:
            pass  # redelivered after the invisible duration: a duplicate


# -- a run -----------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    server: str
    faults: dict[str, int]
    sent: dict[str, int]
    send_failures: dict[str, int]
    rows: dict[str, dict[str, Any]]
    seconds: float
    drained: bool


def run(
    sc: Scenario,
    endpoints: str,
    normal: str,
    fifo: str,
    groups: dict[str, str],
    faults: EmbeddedFaults | RealServerKills,
    client_options: dict[str, Any] | None = None,
) -> Result:
    """Produce for ``sc.seconds`` while ``faults`` runs, then drain and account."""
    opts: dict[str, Any] = {"request_timeout": 3.0, **(client_options or {})}
    ledger = Ledger()
    books = {
        "push": ConsumerLedger(normal, fifo=False),
        "simple": ConsumerLedger(normal, fifo=False),
        "push_fifo": ConsumerLedger(fifo, fifo=True),
    }
    ledger.consumers = {k: v for k, v in books.items() if k in sc.consumers}
    t0 = time.monotonic()
    stop_consumers = threading.Event()
    closers: list[Callable[[], None]] = []
    threads: list[threading.Thread] = []
    try:
        for name in sc.consumers:
            if name == "simple":
                sconsumer = SimpleConsumer(
                    endpoints,
                    groups[name],
                    subscriptions={normal: "*"},
                    await_duration=sc.simple_await,
                    **opts,
                ).start()
                closers.append(sconsumer.close)
                th = threading.Thread(
                    target=simple_loop,
                    args=(sconsumer, books[name], sc.simple_invisible, stop_consumers),
                    daemon=True,
                )
                th.start()
                threads.append(th)
                continue
            extra: dict[str, Any] = {}
            if name == "push_fifo":
                extra["fifo_accelerator"] = sc.fifo_accelerator
                if sc.fifo_pipelining:
                    extra["fifo_pipelining"] = True
            pconsumer = PushConsumer(
                endpoints,
                groups[name],
                subscriptions={books[name].topic: "*"},
                listener=push_listener(sc, books[name]),
                consumption_threads=8,
                shutdown_timeout=10.0,
                **extra,
                **opts,
            ).start()
            closers.append(pconsumer.close)

        stop_producers = threading.Event()
        producers = Producers(sc, ledger, endpoints, normal, fifo)
        prod_threads = []
        for kind in sc.producers:
            p = Producer(endpoints, topics=[normal, fifo], **opts).start()
            closers.append(p.close)
            th = threading.Thread(target=producers.run, args=(kind, p, stop_producers))
            th.start()
            prod_threads.append(th)
        stop_faults = threading.Event()
        fault_thread = threading.Thread(target=faults.run, args=(stop_faults, t0))
        fault_thread.start()
        time.sleep(sc.seconds)  # the producing phase is a fixed time by design
        if isinstance(faults, RealServerKills):
            fault_thread.join(1800)  # every kill/restart cycle happens while producers run
            time.sleep(5)
        stop_producers.set()
        for th in prod_threads:
            th.join(120)
        stop_faults.set()
        fault_thread.join(600)
        if isinstance(faults, EmbeddedFaults):
            faults.clear()
        deadline = time.monotonic() + sc.drain
        while ledger.missing() and time.monotonic() < deadline:
            time.sleep(0.1)
        # A short settle lets late duplicates and redeliveries show up in the counts.
        drained = ledger.missing() == 0
    finally:
        stop_consumers.set()
        for th in threads:
            th.join(30)
        for close in reversed(closers):
            with contextlib.suppress(ferrymq.FerryError):
                close()
    rows = {}
    for name, book in ledger.consumers.items():
        acked = ledger.acked_of(book.topic)
        got = set(book.counts)
        rows[name] = {
            "topic": "FIFO" if book.fifo else "NORMAL",
            "acked": len(acked),
            "received": len(got & acked),
            "unacked_received": len(got - acked),
            "lost": len(acked - got),
            "duplicates": book.duplicates,
            "stored_twice": book.stored_twice,
            "reordered": book.reordered if book.fifo else None,
            "rewinds": book.rewinds if book.fifo else None,
            "listener_failures": book.listener_failures,
            "receive_errors": dict(book.receive_errors),
            "examples": list(book.examples),
            "lost_ids": sorted(acked - got)[:5],
        }
    return Result(
        scenario=sc.name,
        server="real" if isinstance(faults, RealServerKills) else "embedded",
        faults=dict(faults.injected),
        sent=dict(producers.sent),
        send_failures=dict(ledger.send_failures),
        rows=rows,
        seconds=time.monotonic() - t0,
        drained=drained,
    )


def run_embedded(sc: Scenario) -> Result:
    """``sc`` against a fresh embedded broker of ``sc.endpoints`` endpoints."""
    with EmbeddedBroker(
        endpoints=sc.endpoints,
        long_polling_min=0.5,
        min_invisible=0.0,
        auto_renew_invisible=3.0,
    ) as broker:
        broker.create_topic("chaos-normal", "NORMAL", queues=8)
        broker.create_topic("chaos-fifo", "FIFO", queues=8)
        groups = {"push": "c-push", "simple": "c-simple", "push_fifo": "c-fifo"}
        for name, g in groups.items():
            broker.create_group(g, fifo=name == "push_fifo", retry_backoff=[0.2, 0.5, 1.0])
        faults = EmbeddedFaults(broker, fault_schedule(sc))
        result = run(
            sc,
            broker.endpoints,
            "chaos-normal",
            "chaos-fifo",
            groups,
            faults,
            {"route_refresh_interval": 1.0},
        )
        dead = sum(len(broker.dead_letters(g)) for g in groups.values())
        for row in result.rows.values():
            row["dead_lettered"] = dead
        return result


# -- the table -------------------------------------------------------------------------------

HEADER = (
    "| scenario | server | faults injected | producers: sent / failed | consumer | topic | acked | "
    "received | lost | duplicates | reordered | rewinds | run time |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def table_rows(r: Result) -> list[str]:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(r.faults.items())) or "none"
    sent = ", ".join(f"{k} {v}/{r.send_failures.get(k, 0)}" for k, v in sorted(r.sent.items()))
    out = []
    for name, row in r.rows.items():

        def na(v: Any) -> str:
            return "n/a" if v is None else str(v)

        out.append(
            f"| {r.scenario} | {r.server} | {faults} | {sent} | {name} | {row['topic']} | "
            f"{row['acked']} | {row['received']} (+{row['unacked_received']} unacked) | "
            f"{row['lost']} | {row['duplicates']} ({row['stored_twice']} stored twice) | "
            f"{na(row['reordered'])} | "
            f"{na(row['rewinds'])} | {r.seconds:.1f} s |"
        )
    return out
