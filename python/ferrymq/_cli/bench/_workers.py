"""The bench's threads: producers (one client each, in one of four send modes) and consumers
(one :class:`ferrymq.SimpleConsumer` each, receiving in batches), and what each counts.

Every message body starts with a 16-byte header: a magic, the run's id and the producer's
wall-clock send time in nanoseconds. A consumer takes the time once per received batch, so a
message's end-to-end latency is that time minus its send time (both ``time.time_ns()``, so a
consumer in another process on the same host measures the same thing). Latencies go into a
:class:`ferrymq._native.LatencyHistogram` once per batch, never once per message.
"""

from __future__ import annotations

import functools
import struct
import threading
import time
from dataclasses import dataclass, field

import ferrymq
from ferrymq._native import LatencyHistogram

#: magic, run id, send time (ns since the epoch), little-endian.
HEADER = struct.Struct("<4sIq")
MAGIC = b"FQB1"
#: The smallest --size: the header.
HEADER_SIZE = HEADER.size
#: Send → ack latencies a producer keeps before one ``record_many`` call.
RECORD_EVERY = 256

MODES = ("sync", "async", "batch", "packed")


@dataclass(frozen=True)
class Plan:
    """What every worker of one run shares."""

    topic: str
    size: int
    mode: str
    window: int
    batch: int
    run_id: int
    #: stop sending at this ``time.perf_counter()`` (``--duration``), else None
    deadline: float | None = None


@dataclass
class Tally:
    """What one worker did: messages, payload bytes, when its last one was done, latencies."""

    messages: int = 0
    bytes: int = 0
    #: ``time.perf_counter()`` of the last message sent (acked) or received
    last: float | None = None
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class Worker(threading.Thread):
    """A thread whose failure stops the run and is raised again by the main thread."""

    def __init__(self, name: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.tally = Tally()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # handed to the main thread, which reports it
            self.error = e
            self.stop.set()

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    """Sends ``quota`` messages (or until the plan's deadline, or a stop) with one client."""

    def __init__(
        self,
        index: int,
        client: ferrymq.Producer,
        plan: Plan,
        quota: int | None,
        stop: threading.Event,
    ) -> None:
        super().__init__(f"ferrymq-bench-producer-{index}", stop)
        self.client = client
        self.plan = plan
        self.quota = quota
        self._pad = b"x" * (plan.size - HEADER_SIZE)

    def _more(self, sent: int) -> int:
        """How many messages may go next (at most a batch), 0 when this producer is done."""
        if self.stop.is_set():
            return 0
        if self.plan.deadline is not None and time.perf_counter() >= self.plan.deadline:
            return 0
        if self.quota is None:
            return self.plan.batch
        return min(self.plan.batch, self.quota - sent)

    def _body(self) -> bytes:
        return HEADER.pack(MAGIC, self.plan.run_id, time.time_ns()) + self._pad

    def work(self) -> None:
        if self.plan.mode == "sync":
            self._sync()
        elif self.plan.mode == "async":
            self._async()
        else:
            self._batches(packed=self.plan.mode == "packed")

    def _sync(self) -> None:
        """``send`` one message at a time: latency = the call, per message."""
        t, topic, send, size = self.tally, self.plan.topic, self.client.send, self.plan.size
        clock = time.perf_counter_ns
        waits: list[int] = []
        while self._more(t.messages):
            message = ferrymq.Message(topic, self._body())
            start = clock()
            send(message)
            end = clock()
            waits.append(end - start)
            t.messages += 1
            t.bytes += size
            t.last = end / 1e9
            if len(waits) >= RECORD_EVERY:
                t.latency.record_many(waits)
                waits.clear()
        t.latency.record_many(waits)

    def _async(self) -> None:
        """``produce`` with ``max_pending`` = the window: latency = produce → the delivery
        callback, per message (the callback runs when this thread next polls, which it does
        whenever the window is full and at the end)."""
        t, topic, produce, size = self.tally, self.plan.topic, self.client.produce, self.plan.size
        clock = time.perf_counter_ns
        waits: list[int] = []
        failed: list[BaseException] = []

        def delivered(start: int, err: ferrymq.FerryError | None, _receipt: object) -> None:
            if err is not None:
                failed.append(err)
                self.stop.set()
                return
            end = clock()
            waits.append(end - start)
            t.messages += 1
            t.bytes += size
            t.last = end / 1e9
            if len(waits) >= RECORD_EVERY:
                t.latency.record_many(waits)
                waits.clear()

        queued = 0
        while self._more(queued):
            produce(ferrymq.Message(topic, self._body()), functools.partial(delivered, clock()))
            queued += 1
        self.client.flush()
        t.latency.record_many(waits)
        if failed:
            raise failed[0]

    def _batches(self, *, packed: bool) -> None:
        """``send_batch`` (``packed``: one request per batch): latency = the call, per batch."""
        t, topic, send_batch, size = (
            self.tally,
            self.plan.topic,
            self.client.send_batch,
            self.plan.size,
        )
        clock = time.perf_counter_ns
        waits: list[int] = []
        while n := self._more(t.messages):
            body = self._body()
            batch = [ferrymq.Message(topic, body) for _ in range(n)]
            start = clock()
            send_batch(batch, packed=packed)
            end = clock()
            waits.append(end - start)
            t.messages += n
            t.bytes += n * size
            t.last = end / 1e9
            if len(waits) >= RECORD_EVERY:
                t.latency.record_many(waits)
                waits.clear()
        t.latency.record_many(waits)


class ConsumerWorker(Worker):
    """Receives batches until stopped, acks each batch and records its end-to-end latencies.

    Counts only messages with this run's header (any run's when ``run_id`` is None: consume
    only); anything else on the topic is acked and counted as ``foreign``."""

    def __init__(
        self,
        index: int,
        client: ferrymq.SimpleConsumer,
        batch: int,
        run_id: int | None,
        stop: threading.Event,
    ) -> None:
        super().__init__(f"ferrymq-bench-consumer-{index}", stop)
        self.client = client
        self.batch = batch
        self.run_id = run_id
        #: messages without this run's header
        self.foreign = 0
        #: messages received before their send time (clock stepped back): recorded as 0 ns
        self.skewed = 0

    def work(self) -> None:
        t, receive, ack, batch = self.tally, self.client.receive, self.client.ack, self.batch
        unpack, header, run_id = HEADER.unpack_from, HEADER_SIZE, self.run_id
        while not self.stop.is_set():
            messages = receive(batch)
            if not messages:
                continue
            now = time.time_ns()
            arrived = time.perf_counter()
            latencies: list[int] = []
            nbytes = 0
            for m in messages:
                body = m.body
                if len(body) >= header:
                    magic, run, sent = unpack(body)
                    if magic == MAGIC and (run_id is None or run == run_id):
                        d = now - sent
                        if d < 0:
                            self.skewed += 1
                            d = 0
                        latencies.append(d)
                        nbytes += len(body)
                        continue
                self.foreign += 1
            ack(messages)
            t.latency.record_many(latencies)
            t.bytes += nbytes
            t.messages += len(latencies)
            if latencies:
                t.last = arrived
