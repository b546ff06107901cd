"""JetStream consumption: ``ferrymq.SimpleConsumer("nats://…")`` vs nats-py, same nats-server.

Both read pre-loaded messages through a durable pull consumer of their own (same stream, same
subject), in the simple-consumer shape: fetch up to ``--batch`` messages, ack them all and wait
for the server to confirm (ferrymq ``ack(batch)``: a confirmed ``+ACK`` per message, all in
flight at once; nats-py: ``ack()`` each and ``ack_sync()`` the last), repeat until every
message was acked. The two run one after the other, alternating which goes first per round, in
the same process; the script prints for each:

* **msg/s**: messages received and acked per second of wall time;
* **CPU µs/msg**: CPU time of this process (user + system) per message over the same span;

and the ratios ferrymq / nats-py.

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/bench_nats_consumer.py [--messages 20000] [--batch 16] [--body 100] [--rounds 2]

Needs ``nats-server`` (``apt-get install -y nats-server``) and ``nats-py``.
"""

from __future__ import annotations

import asyncio
import uuid

import ferrymq
from _bench_measure import Span, parser
from _bench_server import nats_server

Sample = tuple[float, float]  # wall seconds, CPU seconds


def preload(
    url: str, js: ferrymq.JetStream, stream: str, subject: str, n: int, body: bytes
) -> None:
    js.create_stream(stream, [subject])

    async def run() -> None:
        producer = await ferrymq.Producer(url).start_async()
        pub = ferrymq.AsyncPublisher(producer, max_in_flight=1000)
        pub.start()
        for _ in range(n):
            await pub.publish_async(subject, body)
        await pub.drain()
        await pub.close_async()
        await producer.close_async()

    asyncio.run(run())
    stored = js.stream_info(stream).messages
    if stored != n:
        raise SystemExit(f"preload stored {stored} of {n} messages")


def ferrymq_round(url: str, subject: str, n: int, batch: int) -> Sample:
    group = "f" + uuid.uuid4().hex[:8]
    with ferrymq.SimpleConsumer(url, group, subscriptions=subject, await_duration=5) as c:
        clock = Span()
        done = 0
        while done < n:
            got = c.receive(batch)
            if not got:
                raise SystemExit(f"ferrymq: only {done} of {n} received")
            c.ack(got)
            done += len(got)
        return clock.stop()


def nats_py_round(url: str, stream: str, subject: str, n: int, batch: int) -> Sample:
    import nats

    async def run() -> Sample:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            sub = await js.pull_subscribe(subject, "p" + uuid.uuid4().hex[:8], stream=stream)
            clock = Span()
            done = 0
            while done < n:
                got = await sub.fetch(batch, timeout=5)
                for m in got[:-1]:
                    await m.ack()
                await got[-1].ack_sync()
                done += len(got)
            return clock.stop()
        finally:
            await nc.close()

    return asyncio.run(run())


def main() -> int:
    ap = parser(__doc__, messages=20_000, batch=16, body=100, rounds=2)
    args = ap.parse_args()
    n = args.messages
    with nats_server() as (url, version):
        stream, subject = "BENCH", "bench.consume"
        with ferrymq.JetStream(url) as js:
            preload(url, js, stream, subject, n, b"x" * args.body)
        print(f"{version}; {n} messages of {args.body} B, fetch {args.batch} + ack, confirmed once")
        results: dict[str, list[Sample]] = {"ferrymq": [], "nats-py": []}
        for r in range(args.rounds):
            order = ["ferrymq", "nats-py"] if r % 2 == 0 else ["nats-py", "ferrymq"]
            for who in order:
                if who == "ferrymq":
                    results[who].append(ferrymq_round(url, subject, n, args.batch))
                else:
                    results[who].append(nats_py_round(url, stream, subject, n, args.batch))
        best = {k: min(v, key=lambda s: s[0]) for k, v in results.items()}
        print("| client | msg/s | CPU µs/msg |")
        print("| --- | ---: | ---: |")
        for who, (wall, cpu) in best.items():
            print(f"| {who} | {n / wall:,.0f} | {cpu / n * 1e6:.1f} |")
        (fw, fc), (pw, pc) = best["ferrymq"], best["nats-py"]
        print(f"ferrymq / nats-py: {pw / fw:.2f}x msg/s, {pc / fc:.2f}x less CPU per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
