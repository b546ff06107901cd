"""One bench run: where it connects (an endpoint, or an embedded broker started here), its
clients, and the main thread's loop that samples throughput every 100 ms, drives the progress
bar and decides when the run is over."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import ferrymq
from ferrymq._endpoints import protocol_of

from .._common import progress
from ._workers import ConsumerWorker, Plan, ProducerWorker, Tally

#: How often the main thread samples the counters (the plot's throughput resolution).
SAMPLE_EVERY = 0.1


@dataclass
class Target:
    """Where the clients connect and the options they need there."""

    endpoint: str
    protocol: str
    embedded: bool
    producer_options: dict[str, Any] = field(default_factory=dict)
    consumer_options: dict[str, Any] = field(default_factory=dict)


def connect_target(args: argparse.Namespace, stack: contextlib.ExitStack) -> Target:
    """The endpoint of ``args`` (checked), or an embedded broker entered on ``stack`` with the
    topic (and, for JMQ4, the app) created."""
    token: str | None = args.token
    if args.endpoint is None:
        from ferrymq.testing import EmbeddedBroker

        protocol = args.protocol or "rocketmq"
        broker = stack.enter_context(
            EmbeddedBroker(
                # Receives return at once when messages are there; the floor only bounds how
                # long a consumer idles at the end of the run.
                long_polling_min=1.0,
                # Nobody reads a produce-only run's messages: keep the broker's memory bounded
                # without refusing sends.
                when_full="drop_oldest" if args.consumers == 0 else "reject",
            )
        )
        broker.create_topic(args.topic, "NORMAL", 8)
        if protocol == "jmq":
            token = token or "ferrymq-bench"
            broker.add_jmq_app(args.group, token)
            endpoint = broker.jmq_endpoint
        else:
            endpoint = broker.endpoints
        embedded = True
    else:
        if args.protocol is not None:
            raise ferrymq.InvalidArgumentError(
                "--protocol: picks the embedded broker's endpoint; with ENDPOINT its scheme "
                "says the protocol"
            )
        endpoint = args.endpoint
        protocol = protocol_of(endpoint, "ENDPOINT")
        if protocol == "remoting":
            raise ferrymq.InvalidArgumentError(
                "ENDPOINT: remoting:// has no acknowledging consumers; bench a RocketMQ 5 "
                "proxy (host:port), jmq:// or nats://"
            )
        embedded = False
    target = Target(endpoint, protocol, embedded)
    if protocol == "rocketmq":
        target.producer_options = {"topics": [args.topic]}
        # A real proxy long-polls at least 5 s and refuses shorter call deadlines.
        target.consumer_options = {"await_duration": 1.0 if embedded else 5.0}
    elif protocol == "jmq":
        target.producer_options = {"app": args.group, "token": token}
        target.consumer_options = {"token": token, "await_duration": 1.0}
    else:
        target.producer_options = {"token": token}
        target.consumer_options = {"token": token, "await_duration": 1.0}
    return target


def new_run_id() -> int:
    return random.getrandbits(32)


@dataclass
class Outcome:
    """How the run ended and what it measured."""

    producers: list[Tally]
    consumers: list[Tally]
    #: seconds from the start to the end of the run
    elapsed: float
    #: (seconds since the start, messages sent so far, messages received so far)
    samples: list[tuple[float, int, int]]
    complete: bool
    interrupted: bool
    foreign: int = 0
    skewed: int = 0
    #: the clock of the start (``time.perf_counter()``), what every tally's ``last`` counts from
    started: float = 0.0


class Bench:
    """The running threads, the counters the main thread samples, and the end condition."""

    def __init__(
        self,
        plan: Plan,
        producers: list[ferrymq.Producer],
        consumers: list[ferrymq.SimpleConsumer],
        *,
        count: int | None,
        duration: float | None,
        timeout: float,
        batch: int,
        consume_any_run: bool,
    ) -> None:
        self.stop = threading.Event()
        self.count = count
        self.duration = duration
        self.timeout = timeout
        self.started = time.perf_counter()
        quotas = _split(count, len(producers))
        self.producers = [
            ProducerWorker(i + 1, p, plan, q, self.stop)
            for i, (p, q) in enumerate(zip(producers, quotas, strict=True))
        ]
        run_id = None if consume_any_run else plan.run_id
        self.consumers = [
            ConsumerWorker(i + 1, c, batch, run_id, self.stop) for i, c in enumerate(consumers)
        ]
        self.samples: list[tuple[float, int, int]] = []
        self.complete = False
        self.interrupted = False
        self.finished_at: float | None = None

    def sent(self) -> int:
        return sum(w.tally.messages for w in self.producers)

    def received(self) -> int:
        return sum(w.tally.messages for w in self.consumers)

    def _raise_failure(self) -> None:
        for w in (*self.producers, *self.consumers):
            if w.error is not None:
                raise w.error

    def run(self) -> None:
        """Start the threads and sample until the run is over (complete, incomplete after
        ``timeout`` idle seconds, or a worker failed: raised here). Ctrl-C raises
        ``KeyboardInterrupt`` from here; call :meth:`interrupt` then."""
        consume = bool(self.consumers)
        total = self.count if self.duration is None else None
        with progress(total, "received" if consume else "sent") as bar:
            self.started = time.perf_counter()
            if self.duration is not None:
                deadline = self.started + self.duration
                for p in self.producers:
                    p.plan = dataclasses.replace(p.plan, deadline=deadline)
            for w in (*self.consumers, *self.producers):
                w.start()
            producers_done: float | None = None if self.producers else self.started
            last_progress = self.started
            last_received = 0
            while True:
                self.stop.wait(SAMPLE_EVERY)
                now = time.perf_counter()
                sent, received = self.sent(), self.received()
                self.samples.append((now - self.started, sent, received))
                bar.update((received if consume else sent) - bar.n)
                if any(w.error is not None for w in (*self.producers, *self.consumers)):
                    self.stop.set()
                    self.join(producers_only=False)
                    self._raise_failure()
                if received != last_received:
                    last_received, last_progress = received, now
                if producers_done is None and not any(w.is_alive() for w in self.producers):
                    producers_done = now
                if producers_done is None:
                    continue
                if not consume:
                    self.complete = True
                    break
                if not self.producers and self.count is None:
                    # Consume only, for --duration: whatever arrives in that time.
                    if now - self.started >= (self.duration or 0.0):
                        self.complete = True
                        break
                    continue
                want = sent if self.producers else (self.count or 0)
                if received >= want:
                    self.complete = True
                    break
                if now - max(last_progress, producers_done) >= self.timeout:
                    break
        self.finished_at = time.perf_counter()
        self.stop.set()
        self.join(producers_only=True)

    def interrupt(self) -> None:
        """Ctrl-C: stop sending and receiving; the producers finish what they have in flight."""
        self.interrupted = True
        self.stop.set()
        self.join(producers_only=True)
        if self.finished_at is None:
            self.finished_at = time.perf_counter()

    def join(self, *, producers_only: bool) -> None:
        """Wait for the producers (and the consumers, whose receive may idle up to its long
        polling time)."""
        for w in (*self.producers, *(() if producers_only else self.consumers)):
            if w.is_alive():
                w.join()

    def outcome(self) -> Outcome:
        end = self.finished_at if self.finished_at is not None else time.perf_counter()
        return Outcome(
            producers=[w.tally for w in self.producers],
            consumers=[w.tally for w in self.consumers],
            elapsed=end - self.started,
            samples=list(self.samples),
            complete=self.complete,
            interrupted=self.interrupted,
            foreign=sum(w.foreign for w in self.consumers),
            skewed=sum(w.skewed for w in self.consumers),
            started=self.started,
        )


def _split(count: int | None, parts: int) -> list[int | None]:
    """``count`` shared out among ``parts`` producers as evenly as it goes."""
    if count is None:
        return [None] * parts
    share, extra = divmod(count, parts) if parts else (0, 0)
    return [share + (1 if i < extra else 0) for i in range(parts)]
