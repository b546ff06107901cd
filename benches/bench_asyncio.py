"""asyncio send paths against ``produce`` + ``flush``, in one run, on one embedded broker that
runs in its own process.

Patterns, each over the same producer with ``--window`` sends in flight:

* ``produce+flush``          — the batched, callback-based path (the yardstick);
* ``coroutines send_async``  — ``--window`` coroutines, each looping ``await send_async``;
* ``wait-window send_async`` — a sliding window of tasks (``asyncio.wait`` FIRST_COMPLETED);
* ``gather+sem send_async``  — ``asyncio.gather`` of every send under an ``asyncio.Semaphore``
  (CPython's semaphore scans its waiters on every acquire: its own cost grows with the number
  of waiting tasks);
* ``sync send`` — one blocking ``send`` after another (context switches per round trip).

Prints msg/s, the client process's CPU time per message and its context switches per message,
and the broker process's CPU time per message; then, for scale, the same patterns with no
client at all (``_bench_floors.py``): CPython's own cost of ``asyncio.gather`` under a
semaphore, and a bare loopback TCP echo's round trips/s.
Build in release mode first (``maturin develop --release``), then
``python benches/bench_asyncio.py [--messages 30000] [--window 1000] [--rounds 2]``.
"""

from __future__ import annotations

import asyncio

import ferrymq
from _bench_floors import asyncio_gather_floor, echo_round_trips
from _bench_measure import Span, parser, process_cpu_seconds
from _bench_server import broker_process


class Timer(Span):
    """A round's figures, with the CPU time the broker's process (``broker_pid``) spent."""

    def __init__(self, name: str, n: int, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.broker0 = process_cpu_seconds(broker_pid)
        super().__init__()
        self.name, self.n = name, n

    def report(self) -> None:
        rate, cpu_us, switches = self.rate(self.n)
        broker1 = process_cpu_seconds(self.broker_pid)
        broker = (
            f"{(broker1 - self.broker0) / self.n * 1e6:6.1f}"
            if broker1 is not None and self.broker0 is not None
            else "     ?"
        )
        print(
            f"{self.name:26s} {rate:10,.0f} msg/s  {cpu_us:6.1f} CPU us/msg  "
            f"{switches:5.2f} context switches/msg  broker {broker} CPU us/msg",
            flush=True,
        )


def run(
    producer: ferrymq.Producer, msg: ferrymq.Message, n: int, window: int, broker_pid: int
) -> None:
    t = Timer("sync send", max(n // 10, 1), broker_pid)
    for _ in range(t.n):
        producer.send(msg)
    t.report()

    t = Timer("produce+flush", n, broker_pid)
    for _ in range(n):
        producer.produce(msg)
    producer.flush()
    t.report()

    async def coroutines() -> None:
        todo = iter(range(n))

        async def worker() -> None:
            for _ in todo:
                await producer.send_async(msg)

        t = Timer("coroutines send_async", n, broker_pid)
        await asyncio.gather(*(worker() for _ in range(window)))
        t.report()

    async def sliding() -> None:
        t = Timer("wait-window send_async", n, broker_pid)
        pending: set[asyncio.Future[ferrymq.SendReceipt]] = set()
        for _ in range(n):
            if len(pending) >= window:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.add(asyncio.ensure_future(producer.send_async(msg)))
        await asyncio.wait(pending)
        t.report()

    async def gather_semaphore() -> None:
        sem = asyncio.Semaphore(window)

        async def one() -> ferrymq.SendReceipt:
            async with sem:
                return await producer.send_async(msg)

        t = Timer("gather+sem send_async", n, broker_pid)
        await asyncio.gather(*(one() for _ in range(n)))
        t.report()

    asyncio.run(coroutines())
    asyncio.run(sliding())
    asyncio.run(gather_semaphore())


def main() -> None:
    ap = parser(__doc__, messages=30_000, window=1000, rounds=2, body=100)
    args = ap.parse_args()
    with (
        broker_process({"auto_create": True}) as (proc, endpoints),
        ferrymq.Producer(endpoints, topics=["bench-asyncio"]) as producer,
    ):
        msg = ferrymq.Message("bench-asyncio", b"x" * args.body)
        for _ in range(300):  # warm-up: route, connection, settings
            producer.send(msg)
        for r in range(args.rounds):
            print(f"round {r + 1}", flush=True)
            run(producer, msg, args.messages, args.window, proc.pid)
    rate, cpu_us = asyncio_gather_floor(args.messages, args.window)
    print(f"no client: gather+sem of awaits {rate:10,.0f} calls/s {cpu_us:6.1f} CPU us/call")
    rate, cpu_us = echo_round_trips(2.0, 300)
    print(f"no client: TCP echo round trip {rate:10,.0f} per s    {cpu_us:6.1f} CPU us each")


if __name__ == "__main__":
    main()
