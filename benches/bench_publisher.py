"""ferrymq's managed publisher vs nats-py's ``publish_async`` on the same nats-server, one run.

Both publish the same messages (128 B by default) to a file-backed JetStream stream on a
nats-server started here (loopback, JetStream, temporary store), with the same window of
messages awaiting their ack (nats-py ``publish_async_max_pending`` = ferrymq ``max_in_flight``,
ferrymq as a sliding window: ``refill_allowed_at = max_in_flight - 1``). Each round is timed
from the first publish until every ack is in:

* ``drain``: publish everything, then wait once (ferrymq ``drain()``, nats-py
  ``publish_async_completed()``);
* ``await-each``: also await every message's own ack future (``asyncio.gather``).

ferrymq stamps every message with a ``Nats-Msg-Id`` (de-duplication), which costs the server
extra work; nats-py sends none unless ``--nats-py-msg-id`` is given.

    python benches/bench_publisher.py                 # 100k messages, 3 rounds each
    python benches/bench_publisher.py -n 20000 -r 1   # quick

Needs ``nats-server`` (``apt-get install -y nats-server``) and ``nats-py`` (``pip install
nats-py``). Build ferrymq with ``maturin develop --release`` first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import ferrymq


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def nats_server() -> Iterator[tuple[str, str]]:
    exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not shutil.which(exe):
        sys.exit("nats-server is not installed: apt-get install -y nats-server")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as store:
        port = free_port()
        proc = subprocess.Popen(
            [exe, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        sys.exit("nats-server did not start")
                    time.sleep(0.05)
            yield f"nats://127.0.0.1:{port}", version
        finally:
            proc.terminate()
            proc.wait(10)


def fresh_stream(js: ferrymq.JetStream, name: str, subject: str, storage: str) -> None:
    js.delete_stream(name)
    js.create_stream(name, [subject], storage=storage)


async def run_ferrymq(
    url: str, subject: str, n: int, payload: bytes, window: int, await_each: bool
) -> float:
    js = await ferrymq.JetStream.connect_async(url)
    pub = ferrymq.AsyncPublisher(js, max_in_flight=window, refill_allowed_at=window - 1)
    pub.start()
    t0 = time.perf_counter()
    if await_each:
        futures = [(await pub.publish_async(subject, payload)).ack_future for _ in range(n)]
        acks = await asyncio.gather(*futures)
        assert len(acks) == n
    else:
        for _ in range(n):
            await pub.publish_async(subject, payload)
    await pub.drain()
    elapsed = time.perf_counter() - t0
    await js.close_async()
    return elapsed


async def run_nats_py(
    url: str, subject: str, n: int, payload: bytes, window: int, await_each: bool, msg_id: bool
) -> float:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=window)
    t0 = time.perf_counter()
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
    elapsed = time.perf_counter() - t0
    await nc.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", "--messages", type=int, default=100_000)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-s", "--size", type=int, default=128, help="payload bytes")
    ap.add_argument("-w", "--window", type=int, default=4000, help="messages awaiting acks")
    ap.add_argument("--storage", default="file", choices=["file", "memory"])
    ap.add_argument("--nats-py-msg-id", action="store_true", help="nats-py also sends Nats-Msg-Id")
    args = ap.parse_args()
    payload = b"x" * args.size
    n = args.messages

    with nats_server() as (url, version):
        admin = ferrymq.JetStream(url)
        print(
            f"nats-server {version}, {args.storage} storage, {n} messages of {args.size} B, "
            f"window {args.window}, {args.rounds} rounds (best / median msgs/s)"
        )
        results: dict[tuple[str, str], list[float]] = {}
        for mode in ("drain", "await-each"):
            each = mode == "await-each"
            for r in range(args.rounds):
                # Alternate who goes first so that neither always gets a warmer server.
                order = ["ferrymq", "nats-py"] if r % 2 == 0 else ["nats-py", "ferrymq"]
                for who in order:
                    name = f"BENCH{r}{who.replace('-', '').upper()}"
                    subject = f"bench.{r}.{who.replace('-', '')}"
                    fresh_stream(admin, name, subject, args.storage)
                    if who == "ferrymq":
                        secs = asyncio.run(run_ferrymq(url, subject, n, payload, args.window, each))
                    else:
                        secs = asyncio.run(
                            run_nats_py(
                                url, subject, n, payload, args.window, each, args.nats_py_msg_id
                            )
                        )
                    stored = admin.stream_info(name).messages
                    assert stored == n, f"{who}: {stored} stored, expected {n}"
                    admin.delete_stream(name)
                    results.setdefault((mode, who), []).append(n / secs)
        admin.close()

    for mode in ("drain", "await-each"):
        f = results[(mode, "ferrymq")]
        p = results[(mode, "nats-py")]
        print(
            f"[{mode:10}] ferrymq {max(f):>10,.0f} / {statistics.median(f):>10,.0f}   "
            f"nats-py {max(p):>10,.0f} / {statistics.median(p):>10,.0f}   "
            f"ratio (median) {statistics.median(f) / statistics.median(p):.2f}x"
        )


if __name__ == "__main__":
    main()
