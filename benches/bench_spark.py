"""Rows/s of the ferrymq Spark data source in local[2], on the embedded broker over RocketMQ
and JMQ4 (and on nats-server when it is installed).

    python benches/bench_spark.py [--rows 200000] [--size 100] [--backends rocketmq,jmq,nats]
    python benches/bench_spark.py --server real [--rows 100000] [--master local-cluster[2,1,1024]]

``--server real`` measures RocketMQ over the remoting protocol (name server + broker) on a real
Apache RocketMQ started by ``scripts/rocketmq-server`` *and* on the embedded broker, in one run:
batch read, streaming read (``availableNow`` from the earliest offsets) and ``df.write``
rows/s, plus ``ferrymq.PullConsumer`` messages/s next to the push consumer's on the same
topic. ``--server embedded`` runs the same remoting rows on the embedded broker only.

Prints, for reads and writes, the Spark rate next to peers measured in the same run:

* read: Arrow record batches (the default) vs the same read yielding Python tuples, and the
  native range reader alone in one process (no Spark);
* write: ``df.write`` vs the producer's ``send_batch`` alone in one process.

Build the extension with ``maturin develop --release`` first: a debug build is much slower.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import ferrymq
from _bench_measure import parser
from _bench_server import nats_server
from ferrymq import _native
from ferrymq.testing import EmbeddedBroker
from servers import EmbeddedServer, RealServer


def best(f: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def fill(endpoints: str, topic: str, rows: int, size: int, batch: int = 500, **kw: Any) -> float:
    """Seconds ``Producer.send_batch`` takes to store ``rows`` messages of ``size`` bytes on
    ``topic``, ``batch`` at a time (``kw``: the producer's other arguments)."""
    body = b"x" * size
    with ferrymq.Producer(endpoints, **kw) as p:
        t0 = time.perf_counter()
        for a in range(0, rows, batch):
            p.send_batch([ferrymq.Message(topic, body) for _ in range(min(batch, rows - a))])
        return time.perf_counter() - t0


def read_columns(r: Any, topic: str, part: int, at: int, end: int) -> int:
    """Rows of ``topic``/``part`` from ``at`` to ``end`` read by the native range reader ``r``
    as Arrow buffers."""
    n = 0
    while at < end:
        cols = r.read_range(topic, part, at, end, 10_000)
        cols.arrow_buffers()
        n += cols.num_rows
        at = cols.next_offset
    return n


def spark_read(spark: Any, n: int, *exprs: str, **options: str) -> None:
    """``spark.read`` of every row (``exprs``: what to compute over them besides the count)."""
    df = spark.read.format("ferrymq").options(**options).load()
    got = df.selectExpr(*exprs, "count(*) c").collect()[0]
    assert got.c == n, got


def best_write(spark: Any, n: int, size: int, **options: str) -> float:
    """Best of three ``df.write`` runs of ``n`` rows of ``size`` bytes after a warm-up."""
    df = spark.range(n).selectExpr(f"repeat('x', {size}) as value").cache()
    df.count()

    def write() -> None:
        df.write.format("ferrymq").options(**options).mode("append").save()

    write()
    took = best(write)
    df.unpersist()
    return took


def raw_read(endpoints: str, topic: str, group: str) -> int:
    r = _native.OffsetReader.rocketmq(endpoints, group, topics=[topic])
    r.start()
    n = sum(read_columns(r, topic, q, 0, r.latest(topic, q)) for q in r.partitions(topic))
    r.close()
    return n


def line(what: str, rows: int, secs: float, peer: str = "", peer_secs: float = 0.0) -> None:
    rate = rows / secs
    s = f"{what:<44} {rows:>9} rows {secs:7.2f} s {rate:>12,.0f} rows/s"
    if peer:
        s += f"   ({rate / (rows / peer_secs):.2f}x {peer})"
    print(s, flush=True)


def main() -> None:
    ap = parser(__doc__, rows=200_000, size=100)
    ap.add_argument("--backends", default="rocketmq,jmq,nats")
    ap.add_argument(
        "--server",
        choices=["real", "embedded"],
        default=None,
        help="remoting rows: the real RocketMQ next to the embedded broker, or embedded only",
    )
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    backends = {b.strip() for b in args.backends.split(",")}
    from pyspark.sql import SparkSession

    import ferrymq.spark

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    n, size = args.rows, args.size
    if args.server is not None:
        try:
            bench_remoting_servers(spark, args.server, n, size, args.master)
        finally:
            spark.stop()
        return
    print(f"local[2], {n} messages of {size} B, 4 queues; best of 3 after a warm-up", flush=True)
    with EmbeddedBroker(max_topic_bytes=1 << 31) as broker:
        try:
            if "rocketmq" in backends:
                bench_rocketmq(spark, broker, n, size)
            if "jmq" in backends:
                bench_jmq(spark, broker, n, size)
            nats = shutil.which("nats-server") or shutil.which("/usr/sbin/nats-server")
            if nats and "nats" in backends:
                bench_nats(spark, n, size)
        finally:
            # Spark first: its Python workers cache clients of the broker, which would log
            # reconnect attempts if the broker went away under them.
            spark.stop()


def bench_rocketmq(spark: Any, broker: EmbeddedBroker, n: int, size: int) -> None:
    broker.create_topic("bench", queues=4)
    broker.create_topic("sink", queues=4)
    broker.create_group("bench")
    fill_s = fill(broker.endpoints, "bench", n, size, topics=["bench"])
    src = {"endpoints": broker.endpoints, "subscribe": "bench", "group": "bench"}

    def read(**extra: str) -> None:
        spark_read(spark, n, "sum(length(value)) s", **src, **extra)

    read()
    raw_s = best(lambda: raw_read(broker.endpoints, "bench", "bench"))
    arrow_s = best(read)
    rows_s = best(lambda: read(readFormat="rows"))
    line("read: native range reader, 1 process", n, raw_s)
    line("read: spark.read (Arrow batches)", n, arrow_s, "native reader", raw_s)
    line("read: spark.read (Python tuples)", n, rows_s, "native reader", raw_s)
    print(f"{'':44} Arrow batches are {rows_s / arrow_s:.2f}x faster than tuples")

    write_s = best_write(spark, n, size, endpoints=broker.endpoints, topic="sink")
    line("write: producer send_batch, 1 process", n, fill_s)
    line("write: df.write", n, write_s, "producer", fill_s)


JMQ_AUTH = {"app": "test_app", "token": "test_token"}


def bench_jmq(spark: Any, broker: EmbeddedBroker, n: int, size: int) -> None:
    """JMQ4: the same read and write measurements against the embedded JMQ4 server."""
    endpoint = broker.jmq_endpoint
    broker.create_topic("jbench", queues=4)
    broker.create_topic("jsink", queues=4)
    fill_s = fill(endpoint, "jbench", n, size, **JMQ_AUTH)

    def raw_read() -> None:
        with _native.OffsetReader.jmq(endpoint, **JMQ_AUTH) as r:
            right = dict(r.snapshot("jbench", "latest"))
            spans = r.snapshot("jbench", "earliest")
            got = sum(read_columns(r, "jbench", p, at, right[p]) for p, at in spans)
            assert got == n, got

    def read() -> None:
        spark_read(
            spark, n, "sum(length(value)) s", endpoints=endpoint, subscribe="jbench", **JMQ_AUTH
        )

    read()
    raw_s = best(raw_read)
    arrow_s = best(read)
    line("JMQ4 read: native range reader, 1 process", n, raw_s)
    line("JMQ4 read: spark.read (Arrow batches)", n, arrow_s, "native reader", raw_s)

    write_s = best_write(spark, n, size, endpoints=endpoint, topic="jsink", **JMQ_AUTH)
    line("JMQ4 write: producer send_batch, 1 process", n, fill_s)
    line("JMQ4 write: df.write", n, write_s, "producer", fill_s)


def bench_nats(spark: Any, n: int, size: int) -> None:
    with nats_server() as (url, _version):
        js = ferrymq.JetStream(url)
        js.create_stream("BENCH", ["bench.>"], max_bytes=1 << 31)
        js.close()
        df = spark.range(n).selectExpr(f"repeat('x', {size}) as value", "'bench.a' as topic")
        df = df.cache()
        df.count()
        t0 = time.perf_counter()
        df.write.format("ferrymq").option("endpoints", url).mode("append").save()
        w = time.perf_counter() - t0
        line("write: df.write to JetStream", n, w)

        def read() -> None:
            got = (
                spark.read.format("ferrymq")
                .option("endpoints", url)
                .option("subscribe", "BENCH")
                .option("minPartitions", "2")
                .load()
                .selectExpr("count(*) c")
                .collect()[0]
            )
            assert got.c == n, got

        read()
        line("read: spark.read from JetStream (2 ranges)", n, best(read))


# --------------------------------------------------------------------------------------------
# RocketMQ over the remoting protocol: the real server next to the embedded broker
# --------------------------------------------------------------------------------------------


def bench_remoting_servers(spark: Any, which: str, n: int, size: int, master: str) -> None:
    import uuid

    print(
        f"{master}, {n} messages of {size} B, 8 queues, RocketMQ over remoting; "
        "best of 3 after a warm-up (stream: one run each)",
        flush=True,
    )
    results: dict[str, dict[str, float]] = {}
    tag = uuid.uuid4().hex[:8]
    topics = [f"rb-{tag}", f"rs-{tag}"]
    groups = [f"rg-{tag}", f"pg-{tag}"]
    if which == "real":
        real = RealServer()
        real.start()  # left running, like a server that was running already
        real.setup(dict.fromkeys(topics, "NORMAL"), groups)
        results["real"] = bench_remoting(
            spark, "real", real.remoting_endpoint, real.endpoints, topics, groups, n, size
        )
    with EmbeddedBroker(endpoints=2, max_topic_bytes=1 << 31) as broker:
        EmbeddedServer(broker).setup(dict.fromkeys(topics, "NORMAL"), groups)
        results["embedded"] = bench_remoting(
            spark, "embedded", broker.remoting_endpoint, broker.endpoints, topics, groups, n, size
        )
    if "real" in results:
        print("\nreal / embedded, same run:")
        for k, v in results["real"].items():
            print(
                f"  {k:<28} {v:>12,.0f} vs {results['embedded'][k]:>12,.0f} rows/s "
                f"({v / results['embedded'][k]:.2f}x)"
            )


def bench_remoting(
    spark: Any,
    label: str,
    endpoint: str,
    grpc_endpoints: str,
    topics: list[str],
    groups: list[str],
    n: int,
    size: int,
) -> dict[str, float]:
    import tempfile

    topic, sink = topics
    group, push_group = groups
    out: dict[str, float] = {}
    fill_s = fill(endpoint, topic, n, size, batch=1000)
    line(f"[{label}] write: Producer.send_batch, 1 process", n, fill_s)
    out["producer send_batch"] = n / fill_s
    src = {"endpoints": endpoint, "subscribe": topic, "group": group}

    spark_read(spark, n, **src)
    read_s = best(lambda: spark_read(spark, n, **src))
    line(f"[{label}] read: spark.read", n, read_s)
    out["spark.read"] = n / read_s

    def stream_read() -> float:
        with tempfile.TemporaryDirectory() as ckpt:
            counted = [0]

            def sink_batch(df: Any, _batch: int) -> None:
                counted[0] += df.count()

            t0 = time.perf_counter()
            q = (
                spark.readStream.format("ferrymq")
                .options(**src, startingOffsets="earliest")
                .load()
                .writeStream.foreachBatch(sink_batch)
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            took = time.perf_counter() - t0
            assert counted[0] == n, counted
            return took

    stream_s = stream_read()
    line(f"[{label}] read: spark.readStream (availableNow)", n, stream_s)
    out["spark.readStream"] = n / stream_s

    write_s = best_write(spark, n, size, endpoints=endpoint, topic=sink)
    line(f"[{label}] write: df.write", n, write_s)
    out["df.write"] = n / write_s

    # PullConsumer next to the push consumer, on the same topic.
    with ferrymq.PullConsumer(endpoint, f"{group}-pc") as c:
        c.assign(c.queues(topic))
        c.seek_to_beginning()
        got = 0
        t0 = time.perf_counter()
        while got < n:
            got += len(c.poll(1024, timeout=5.0))
        pull_s = time.perf_counter() - t0
    line(f"[{label}] PullConsumer.poll", n, pull_s)
    out["PullConsumer"] = n / pull_s

    acked = [0]

    def listener(_m: Any) -> None:
        acked[0] += 1

    pc = ferrymq.PushConsumer(
        grpc_endpoints, push_group, subscriptions={topic: "*"}, listener=listener
    )
    t0 = time.perf_counter()
    pc.start()
    try:
        deadline = time.monotonic() + 600
        while pc.stats()["acked"] < n and time.monotonic() < deadline:
            time.sleep(0.01)
        push_s = time.perf_counter() - t0
    finally:
        pc.close()
    line(f"[{label}] PushConsumer (gRPC)", n, push_s, "PullConsumer", pull_s)
    out["PushConsumer"] = n / push_s
    return out


if __name__ == "__main__":
    main()
