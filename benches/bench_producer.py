"""Producer throughput: ferrymq vs the official ``rocketmq-python-client`` (PyPI) and the official
Java client (``rocketmq-client-java``, run by ``tests/java/FerryPeer.java``), side by side on the
same server in one run: the embedded broker (default) or, with ``--server real``, a real Apache
RocketMQ 5 proxy (``scripts/rocketmq-server``; started and stopped by the script if it is not
running).

Scenarios, each with 100 B and 1 KiB bodies (``--sizes``):

* ``sync``    — one blocking ``send`` after another (round-trip bound); Java: ``send`` in a loop;
* ``async``   — a window of 1000 sends in flight: the official Python client's ``send_async``
  futures and Java's ``sendAsync`` under a 1000-permit semaphore, against ferrymq's
  ``produce`` + ``flush`` (bounded, batched in the background), ``asyncio.gather`` of
  ``await send_async`` under a 1000-slot semaphore, ``send_batch`` (1000 messages per call,
  one request each) and ``send_batch(packed=True)`` (1000 messages per call in one request:
  messages that differ only in their bodies).

Prints, for each client, messages/s (wall clock) and CPU time per message, with the ratios
ferrymq/Java and ferrymq/official-Python, then the context switches per sync send, then the
ceilings this machine sets in the same run (``_bench_floors.py``: a bare loopback TCP echo's
round trips/s, which bound every client's sync sends, and CPython's own cost of
``asyncio.gather`` under a semaphore, which bounds every client's ``await send_async``). CPU and
context switches: ferrymq as this whole process (client + embedded broker, which runs in this
process; with ``--server real`` the client only); the official Python client, measured in a
process of its own (alive in this one, its threads slowed ferrymq's sync sends by a quarter),
as that process plus this one's embedded broker over its measurement; Java as its own JVM
(client only), so on the embedded broker Java's figures leave
the broker's share out. The Java client is measured after a warm-up until its JIT is quiet
(20,000 ``sendAsync``, then for sync 3 s of ``send``: a minute or more on a busy machine), which
is what a long-running Java producer sees. On a shared machine
the wall-clock rate depends on what else runs; the CPU cost per message does much less, and
``2 cores / cost`` is the rate the run would reach on two dedicated cores.

Build the extension in release mode first (``maturin develop --release``), then run
``python benches/bench_producer.py [--seconds 3] [--sizes 100,1024] [--server embedded|real]
[--no-official] [--no-java]`` (the Java peer needs Java 17 and Maven: ``scripts/java-peer``).

``--telemetry [--rounds 5]`` measures instead what :mod:`ferrymq.telemetry` costs: ferrymq's
``sync``, ``gather(send_async)``, ``produce+flush`` and ``send_batch(1000)`` with telemetry
off, metrics on, and metrics and traces on (``_bench_telemetry.py``), the variants alternated
over the rounds, and prints each variant's median rate and CPU per message and its ratios to
off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import ferrymq
from _bench_floors import asyncio_gather_floor, echo_round_trips
from _bench_measure import Span, process_usage
from _bench_server import add_arguments, open_server, run_name
from _bench_telemetry import Measured, plan, report, variant
from _bench_telemetry import add_arguments as telemetry_arguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from java_peer import JavaPeer

# (messages/s, process CPU microseconds per message, process context switches per message)
Rate = tuple[float, float, float]
WINDOW = 1000  # sends in flight in the async scenarios


def timed(seconds: float, step: Callable[[], int], finish: Callable[[], object] = int) -> Rate:
    """Run ``step`` (returns messages done) until ``seconds`` pass, then ``finish``."""
    done = 0
    span = Span()
    while span.elapsed() < seconds:
        done += step()
    finish()
    return span.rate(done)


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


def ferry_send_async(endpoints: str, topic: str, body: bytes, seconds: float) -> Rate:
    """``asyncio.gather`` of ``await send_async`` with at most WINDOW in flight."""

    async def run() -> Rate:
        msg = ferrymq.Message(topic, body)
        window = asyncio.Semaphore(WINDOW)
        async with ferrymq.Producer(endpoints, topics=[topic]) as p:

            async def one() -> None:
                async with window:
                    await p.send_async(msg)

            done = 0
            span = Span()
            while span.elapsed() < seconds:
                await asyncio.gather(*(one() for _ in range(10_000)))
                done += 10_000
            return span.rate(done)

    return asyncio.run(run())


def ferry_batch(
    p: ferrymq.Producer, topic: str, body: bytes, seconds: float, packed: bool = False
) -> Rate:
    batch = [ferrymq.Message(topic, body)] * 1000

    def step() -> int:
        p.send_batch(batch, packed=packed)
        return 1000

    return timed(seconds, step)


def official_producer(endpoints: str, topic: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials, Producer

    p = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=10), (topic,))
    p.startup()
    return p


def official_message(topic: str, body: bytes) -> Any:
    from rocketmq import Message

    m = Message()
    m.topic = topic
    m.body = body
    return m


def official_sync(p: Any, msg: Any, seconds: float) -> Rate:
    def step() -> int:
        for _ in range(20):
            p.send(msg)
        return 20

    return timed(seconds, step)


def official_async(p: Any, msg: Any, seconds: float) -> Rate:
    def step() -> int:
        futures: list[Future[object]] = [p.send_async(msg) for _ in range(WINDOW)]
        for f in futures:
            f.result()
        return WINDOW

    return timed(seconds, step)


def official_worker(endpoints: str, topic: str, size: int, seconds: float) -> None:
    """``--official-worker``: the official client's sync and async rates, as one JSON line.
    Run in a process of its own: alive in the benchmark's process, the official client's
    threads took a quarter of ferrymq's sync rate there, even after its ``shutdown()``. With
    the embedded broker (it runs in the parent), the parent's CPU time and context switches
    over each measurement count as the client's, as they do for ferrymq."""
    logging.getLogger("rocketmq").setLevel(logging.ERROR)
    parent = os.getppid() if os.environ.get("FERRYMQ_BENCH_BROKER_IN_PARENT") else None
    p = official_producer(endpoints, topic)
    msg = official_message(topic, body=b"x" * size)
    out = {}
    try:
        for mode, run in (("sync", official_sync), ("async", official_async)):
            cpu0, cs0 = process_usage(parent)
            rate, cpu_us, cs = run(p, msg, seconds)
            cpu1, cs1 = process_usage(parent)
            sent = rate * seconds
            out[mode] = (rate, cpu_us + (cpu1 - cpu0) / sent * 1e6, cs + (cs1 - cs0) / sent)
    finally:
        p.shutdown()
    print(json.dumps(out), flush=True)


def official_rates(
    endpoints: str, topic: str, size: int, seconds: float, broker_here: bool
) -> tuple[Rate, Rate]:
    """The official client's (sync, async) rates, measured in a process of its own."""
    env = dict(os.environ)
    if broker_here:
        env["FERRYMQ_BENCH_BROKER_IN_PARENT"] = "1"
    argv = [sys.executable, __file__, "--official-worker", endpoints, topic, str(size)]
    out = subprocess.run(
        [*argv, "--seconds", str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        timeout=seconds * 2 + 300,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return tuple(r["sync"]), tuple(r["async"])


def java_send(
    java: JavaPeer, endpoints: str, topic: str, size: int, seconds: float, mode: str
) -> Rate:
    """The Java client in its own JVM, measured inside it for ``seconds`` after a warm-up: 20,000
    ``sendAsync`` (then, for sync, 3 s of ``send``), each until the JIT is quiet. A warm-up of a
    fixed 2 s left the client interpreted on a busy machine (30-100 msg/s, ms of CPU per send):
    its JIT needs thousands of calls, and its compiler threads share the cores."""
    p = java.run(
        "bench-send",
        endpoints=endpoints,
        topic=topic,
        mode=mode,
        window=WINDOW,
        size=size,
        warmup_msgs=20_000,
        warmup=3,
        seconds=seconds,
        timeout=seconds + 400,
    )
    (r,) = p.of("bench")
    warm = {k: v for k, v in r.items() if k.startswith(("warmup", "jit"))}
    print(f"  Java {mode} {size} B: warm-up {warm}", flush=True)
    return r["rate"], r["cpu_seconds"] / r["msgs"] * 1e6, r["context_switches"] / r["msgs"]


Row = tuple[str, int, Rate, Rate | None, Rate | None]


def ratio(ours: Rate, theirs: Rate | None) -> tuple[str, str, str, str]:
    """(their msg/s, rate ratio, their CPU, CPU ratio) columns."""
    if theirs is None:
        return f"{'-':>9}", f"{'-':>6}", f"{'-':>7}", f"{'-':>6}"
    (rate, cpu, _), (t_rate, t_cpu, _) = ours, theirs
    return (
        f"{t_rate:9,.0f}",
        f"{rate / t_rate:5.1f}x",
        f"{t_cpu:7.1f}",
        f"{t_cpu / cpu:5.1f}x",
    )


def telemetry_cost(args: argparse.Namespace, sizes: list[int]) -> None:
    """``--telemetry``: ferrymq's paths with telemetry off, metrics on, metrics+traces on."""
    results: dict[str, dict[str, list[Measured]]] = {}
    with open_server(args, endpoints=1, when_full="drop_oldest") as server:
        topic = run_name(server, "bench")
        server.setup({topic: "NORMAL"})
        for r, name in plan(args.rounds, args.variants):
            # A producer per variant: one created while telemetry is on is registered with it.
            with variant(name), ferrymq.Producer(server.endpoints, topics=[topic]) as p:
                for size in sizes:
                    body = b"x" * size
                    for scenario, run in (
                        ("sync", ferry_sync),
                        ("gather(send_async)", None),
                        ("produce+flush", ferry_produce),
                        ("send_batch(1000)", ferry_batch),
                    ):
                        if run is None:  # a producer of its own, on an event loop
                            rate = ferry_send_async(server.endpoints, topic, body, args.seconds)
                        else:
                            rate = run(p, topic, body, args.seconds)
                        key = f"{scenario} {size}B"
                        results.setdefault(key, {}).setdefault(name, []).append(rate[:2])
                        print(
                            f"  round {r} {name:<15} {key:<22} {rate[0]:>10,.0f} msg/s"
                            f" {rate[1]:>7.2f} CPU us/msg",
                            flush=True,
                        )
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    report(
        results,
        f"server: {args.server}, in this process; {args.rounds} rounds of {args.seconds} s;"
        f" load average at the end {load}",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument(
        "--warmup", type=float, default=6.0, help="seconds of ferrymq sends before measuring"
    )
    ap.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated")
    ap.add_argument("--no-official", action="store_true", help="skip the official Python client")
    ap.add_argument("--no-java", action="store_true", help="skip the official Java client")
    ap.add_argument("--official-worker", nargs=3, help=argparse.SUPPRESS)
    telemetry_arguments(ap)
    add_arguments(ap)
    args = ap.parse_args()
    if args.official_worker:
        endpoints, topic, size = args.official_worker
        official_worker(endpoints, topic, int(size), args.seconds)
        return
    logging.getLogger("rocketmq").setLevel(logging.ERROR)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.telemetry:
        telemetry_cost(args, sizes)
        return
    java = None if args.no_java else JavaPeer()

    with open_server(args, endpoints=1, when_full="drop_oldest") as server:
        topic = run_name(server, "bench")
        server.setup({topic: "NORMAL"})
        rows: list[Row] = []
        with ferrymq.Producer(server.endpoints, topics=[topic]) as p:
            # The server warms up first: a real one just started runs its JVMs' interpreted
            # code for thousands of requests (ferrymq's first sync sends measured 197/s then).
            ferry_produce(p, topic, b"x" * sizes[0], args.warmup / 2)
            ferry_sync(p, topic, b"x" * sizes[0], args.warmup / 2)
            for size in sizes:
                body = b"x" * size
                ours = ferry_sync(p, topic, body, args.seconds)
                theirs, theirs_async = (
                    official_rates(
                        server.endpoints, topic, size, args.seconds, args.server == "embedded"
                    )
                    if not args.no_official
                    else (None, None)
                )
                j_sync = (
                    java_send(java, server.endpoints, topic, size, args.seconds, "sync")
                    if java
                    else None
                )
                rows.append(("sync send", size, ours, theirs, j_sync))
                j_async = (
                    java_send(java, server.endpoints, topic, size, args.seconds, "async")
                    if java
                    else None
                )
                ours = ferry_produce(p, topic, body, args.seconds)
                rows.append(("produce+flush vs async", size, ours, theirs_async, j_async))
                ours = ferry_send_async(server.endpoints, topic, body, args.seconds)
                rows.append(("gather(send_async) vs async", size, ours, theirs_async, j_async))
                ours = ferry_batch(p, topic, body, args.seconds)
                rows.append(("send_batch(1000) vs async", size, ours, theirs_async, j_async))
                ours = ferry_batch(p, topic, body, args.seconds, packed=True)
                rows.append(("send_batch(packed) vs async", size, ours, theirs_async, j_async))
    echo = echo_round_trips(args.seconds)
    gather_floor = asyncio_gather_floor()

    print(f"server: {args.server}; async window {WINDOW}; ratios are ferrymq / other client")
    print(
        f"{'scenario':28} {'body':>6} | {'ferrymq':>9} {'Java':>9} {'f/J':>6} {'Python':>9}"
        f" {'f/Py':>6} msg/s | {'ferrymq':>7} {'Java':>7} {'J/f':>6} {'Python':>7} {'Py/f':>6}"
        " CPU us/msg"
    )
    for name, size, ours, py, jv in rows:
        j_rate, j_x, j_cpu, j_cx = ratio(ours, jv)
        p_rate, p_x, p_cpu, p_cx = ratio(ours, py)
        print(
            f"{name:28} {size:>5}B | {ours[0]:9,.0f} {j_rate} {j_x} {p_rate} {p_x}       |"
            f" {ours[1]:7.2f} {j_cpu} {j_cx} {p_cpu} {p_cx}"
        )
    broker = ", embedded broker included" if args.server == "embedded" else ""
    print(
        f"context switches per sync send (ferrymq: this process{broker}; Python: its process"
        f"{broker}; Java: its JVM):"
    )
    for name, size, ours, py, jv in rows:
        if name == "sync send":
            others = "".join(
                f", {label} {r[2]:.1f}" for label, r in (("Java", jv), ("Python", py)) if r
            )
            print(f"  {size} B: ferrymq {ours[2]:.1f}{others}")
    print_ceilings(rows, echo, gather_floor)
    with open("/proc/loadavg") as f:
        print(f"(load average at the end of the run, 1/5/15 min: {' '.join(f.read().split()[:3])})")


def print_ceilings(
    rows: list[Row], echo: tuple[float, float], gather_floor: tuple[float, float]
) -> None:
    """The machine's ceilings measured in this run (``_bench_floors.py``), beside what 3 times
    the Java client would take on the paths they bound."""
    java = {name: jv for name, size, _, _, jv in rows if jv is not None and size == rows[0][1]}
    print("ceilings on this machine, same run (no client, no broker):")
    need = java.get("sync send")
    print(
        f"  bare loopback TCP echo: {echo[0]:,.0f} round trips/s ({echo[1]:.0f} CPU us each)"
        + (f"; 3x the Java client's sync sends: {3 * need[0]:,.0f}/s" if need else "")
    )
    need = java.get("gather(send_async) vs async")
    print(
        f"  asyncio.gather of awaits under Semaphore({WINDOW}): {gather_floor[0]:,.0f} calls/s"
        f" ({gather_floor[1]:.1f} CPU us each)"
        + (f"; 3x the Java client's sendAsync: {3 * need[0]:,.0f}/s" if need else "")
    )


if __name__ == "__main__":
    main()
