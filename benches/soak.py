"""Soak run: many messages through producer → embedded broker → push consumer, watching memory.

The broker runs in its own process (this script with ``--serve``: an
:class:`ferrymq.testing.EmbeddedBroker` that answers each ``sample`` line on its stdin with its
resident memory and its topic's counters), so the resident memory (RSS) of the client process
(this one: a :class:`ferrymq.Producer` sending packed batches and a :class:`ferrymq.PushConsumer`
with a trivial callback) and of the broker are separate figures. The producer keeps at most
``--backlog`` messages ahead of the consumer's acks.

Every ``--interval`` seconds the script samples both processes and prints a row: messages sent
and acked, client RSS, broker RSS, messages the broker stores and the bytes its memory bound
counts for them. At the end it prints

* **client RSS, warm-up vs end**: the client's RSS once ``--warmup`` of the messages were acked,
  and at the end; the difference per message acked since then (a leak of a few bytes per message
  shows up over millions);
* **broker bytes per stored message**: the broker's RSS growth since it started (before any
  message) divided by the messages it stores at the end, and the bytes its bound counts per
  message.

With ``--max-topic-bytes`` large enough, the broker keeps every message (the default keeps up to
8 GiB, about 27 million messages of 100 B); with a smaller bound it evicts the oldest acked
messages once full and its RSS levels off.

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/soak.py [--messages 10000000] [--body 100] [--batch 1000] [--interval 5]
        [--warmup 0.1] [--max-topic-bytes N] [--json results.json]

``tests/test_soak.py`` runs a bounded version (200k messages) and checks the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

TOPIC = "soak"
GROUP = "soak-g"


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of a process of this machine, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# -- broker process ------------------------------------------------------------------------


def serve(options: dict[str, Any], queues: int) -> None:
    """Run the broker; answer each stdin line with a JSON sample; stop at end of input."""
    from ferrymq.testing import EmbeddedBroker

    with EmbeddedBroker(**options) as broker:
        broker.create_topic(TOPIC, "NORMAL", queues)
        broker.create_group(GROUP)
        print(json.dumps({"endpoints": broker.endpoints, "rss": rss_bytes()}), flush=True)
        for _ in sys.stdin:
            t = broker.stats()["topics"][TOPIC]
            sample = {"rss": rss_bytes(), "messages": t["messages"], "bytes": t["bytes"]}
            print(json.dumps(sample), flush=True)


class BrokerProcess:
    def __init__(self, options: dict[str, Any], queues: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", json.dumps(options), "--queues", str(queues)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        first = self._line()
        self.endpoints: str = first["endpoints"]
        self.start_rss: int = first["rss"]

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the broker process ended (exit code {self.proc.poll()})")
        return dict(json.loads(line))

    def sample(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("sample\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- client process ------------------------------------------------------------------------


@dataclass
class Row:
    seconds: float
    sent: int
    acked: int
    client_rss: int
    broker_rss: int
    stored: int
    accounted: int


@dataclass
class Result:
    messages: int
    body: int
    seconds: float
    broker_start_rss: int
    client_warm_rss: int
    client_end_rss: int
    warm_acked: int
    broker_end_rss: int
    stored: int
    accounted: int
    rows: list[Row]

    @property
    def client_growth_per_message(self) -> float:
        since_warm = max(1, self.messages - self.warm_acked)
        return (self.client_end_rss - self.client_warm_rss) / since_warm

    @property
    def broker_bytes_per_message(self) -> float:
        return (self.broker_end_rss - self.broker_start_rss) / max(1, self.stored)

    @property
    def accounted_per_message(self) -> float:
        return self.accounted / max(1, self.stored)


MIB = 1024 * 1024


def print_row(r: Row) -> None:
    print(
        f"{r.seconds:8.1f} {r.sent:>12,} {r.acked:>12,} {r.client_rss / MIB:>10.1f} "
        f"{r.broker_rss / MIB:>10.1f} {r.stored:>12,} {r.accounted / MIB:>10.1f}",
        flush=True,
    )


def run(
    messages: int,
    *,
    body: int = 100,
    batch: int = 1000,
    backlog: int = 200_000,
    interval: float = 5.0,
    warmup: float = 0.1,
    queues: int = 8,
    max_topic_bytes: int = 8 << 30,
    quiet: bool = False,
) -> Result:
    import ferrymq

    broker = BrokerProcess({"max_topic_bytes": max_topic_bytes, "long_polling_min": 1.0}, queues)
    rows: list[Row] = []
    sent = 0
    acked = 0
    failure: list[BaseException] = []
    stop = threading.Event()
    warm: tuple[int, int] | None = None  # (client RSS, acked) once warm
    try:
        producer = ferrymq.Producer(broker.endpoints, topics=[TOPIC]).start()
        consumer = ferrymq.PushConsumer(
            broker.endpoints,
            GROUP,
            subscriptions={TOPIC: "*"},
            listener=lambda m: None,
        )

        def acked_now() -> int:
            return int(consumer.stats()["acked"])

        def produce() -> None:
            nonlocal sent
            msgs = [ferrymq.Message(TOPIC, b"x" * body) for _ in range(batch)]
            try:
                while sent < messages and not stop.is_set():
                    while sent - acked_now() > backlog and not stop.is_set():
                        time.sleep(0.01)
                    k = min(batch, messages - sent)
                    producer.send_batch(msgs[:k], packed=True)
                    sent += k
            except BaseException as e:  # reported by the main thread
                failure.append(e)

        if not quiet:
            print(
                f"{'seconds':>8} {'sent':>12} {'acked':>12} {'client MiB':>10} "
                f"{'broker MiB':>10} {'stored':>12} {'counted MiB':>10}",
                flush=True,
            )
        start = time.monotonic()
        consumer.start()
        thread = threading.Thread(target=produce, name="soak-producer", daemon=True)
        thread.start()

        def sample() -> Row:
            b = broker.sample()
            row = Row(
                time.monotonic() - start,
                sent,
                acked,
                rss_bytes(),
                b["rss"],
                b["messages"],
                b["bytes"],
            )
            rows.append(row)
            if not quiet:
                print_row(row)
            return row

        next_sample = start + interval
        while acked < messages:
            if failure:
                raise RuntimeError("the producer failed") from failure[0]
            time.sleep(0.05)
            acked = acked_now()
            if warm is None and acked >= warmup * messages:
                warm = (rss_bytes(), acked)
            if time.monotonic() >= next_sample:
                sample()
                next_sample += interval
        thread.join()
        end = sample()
        seconds = time.monotonic() - start
        consumer.close()
        producer.close()
    finally:
        stop.set()
        broker.close()
    assert warm is not None
    return Result(
        messages=messages,
        body=body,
        seconds=seconds,
        broker_start_rss=broker.start_rss,
        client_warm_rss=warm[0],
        warm_acked=warm[1],
        client_end_rss=end.client_rss,
        broker_end_rss=end.broker_rss,
        stored=end.stored,
        accounted=end.accounted,
        rows=rows,
    )


def summary(r: Result) -> str:
    return "\n".join(
        [
            f"{r.messages:,} messages of {r.body} B in {r.seconds:.0f} s "
            f"({r.messages / r.seconds:,.0f} msg/s end to end)",
            f"client RSS: {r.client_warm_rss / MIB:.1f} MiB after warm-up "
            f"({r.warm_acked:,} acked), {r.client_end_rss / MIB:.1f} MiB at the end: "
            f"{r.client_growth_per_message:+.2f} B per message since warm-up",
            f"broker RSS: {r.broker_start_rss / MIB:.1f} MiB at start, "
            f"{r.broker_end_rss / MIB:.1f} MiB with {r.stored:,} messages stored: "
            f"{r.broker_bytes_per_message:.0f} B per stored message "
            f"(body + {r.broker_bytes_per_message - r.body:.0f}); the bound counts "
            f"{r.accounted_per_message:.0f} B per message",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--body", type=int, default=100, help="body size in bytes")
    ap.add_argument("--batch", type=int, default=1000, help="messages per packed send")
    ap.add_argument("--backlog", type=int, default=200_000, help="most messages sent, not acked")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of messages for warm-up")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--max-topic-bytes", type=int, default=8 << 30)
    ap.add_argument("--json", help="also write the results (with every row) to this file")
    ap.add_argument("--quiet", action="store_true", help="no rows, only the summary")
    args = ap.parse_args()
    if args.serve is not None:
        serve(json.loads(args.serve), args.queues)
        return
    # Every other option is an argument of run() of the same name.
    r = run(**{k: v for k, v in vars(args).items() if k not in ("serve", "json")})
    print(summary(r), flush=True)
    if args.json:
        out = asdict(r)
        out["client_growth_per_message"] = r.client_growth_per_message
        out["broker_bytes_per_message"] = r.broker_bytes_per_message
        out["accounted_per_message"] = r.accounted_per_message
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
