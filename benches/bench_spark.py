"""Rows/s of the ferrymq Spark data source in local[2], on the embedded broker over RocketMQ
and JMQ4 (and on nats-server when it is installed).

    python benches/bench_spark.py [--rows 200000] [--size 100] [--backends rocketmq,jmq,nats]

Prints, for reads and writes, the Spark rate next to peers measured in the same run:

* read: Arrow record batches (the default) vs the same read yielding Python tuples, and the
  native range reader alone in one process (no Spark);
* write: ``df.write`` vs the producer's ``send_batch`` alone in one process.

Build the extension with ``maturin develop --release`` first: a debug build is much slower.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import ferrymq
from ferrymq import _native
from ferrymq.testing import EmbeddedBroker


def best(f: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def fill(endpoints: str, topic: str, rows: int, size: int) -> float:
    cls = getattr(ferrymq, "Producer", None) or _native.RocketMQProducer
    p = cls(endpoints, topics=[topic])
    p.start()
    body = b"x" * size
    t0 = time.perf_counter()
    try:
        for a in range(0, rows, 500):
            p.send_batch([ferrymq.Message(topic, body) for _ in range(min(500, rows - a))])
    finally:
        p.close()
    return time.perf_counter() - t0


def raw_read(endpoints: str, topic: str, group: str) -> int:
    r = _native.PullReader(endpoints, group, topics=[topic])
    r.start()
    n = 0
    for q in r.queues(topic):
        at, end = 0, r.query_offset(topic, q, "end")
        while at < end:
            cols = r.read_range(topic, q, at, end, 10_000)
            cols.arrow_buffers()
            n += cols.num_rows
            at = cols.next_offset
    r.close()
    return n


def line(what: str, rows: int, secs: float, peer: str = "", peer_secs: float = 0.0) -> None:
    rate = rows / secs
    s = f"{what:<44} {rows:>9} rows {secs:7.2f} s {rate:>12,.0f} rows/s"
    if peer:
        s += f"   ({rate / (rows / peer_secs):.2f}x {peer})"
    print(s, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--backends", default="rocketmq,jmq,nats")
    args = ap.parse_args()
    backends = {b.strip() for b in args.backends.split(",")}
    from pyspark.sql import SparkSession

    import ferrymq.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    n, size = args.rows, args.size
    print(f"local[2], {n} messages of {size} B, 4 queues; best of 3 after a warm-up", flush=True)
    with EmbeddedBroker(max_topic_bytes=1 << 31) as broker:
        try:
            if "rocketmq" in backends:
                bench_rocketmq(spark, broker, n, size)
            if "jmq" in backends:
                bench_jmq(spark, broker, n, size)
            nats = shutil.which("nats-server") or shutil.which("/usr/sbin/nats-server")
            if nats and "nats" in backends:
                bench_nats(spark, nats, n, size)
        finally:
            # Spark first: its Python workers cache clients of the broker, which would log
            # reconnect attempts if the broker went away under them.
            spark.stop()


def bench_rocketmq(spark: Any, broker: EmbeddedBroker, n: int, size: int) -> None:
    broker.create_topic("bench", queues=4)
    broker.create_topic("sink", queues=4)
    broker.create_group("bench")
    fill_s = fill(broker.endpoints, "bench", n, size)
    src = {"endpoints": broker.endpoints, "subscribe": "bench", "group": "bench"}

    def spark_read(**extra: str) -> None:
        df = spark.read.format("ferrymq").options(**src, **extra).load()
        got = df.selectExpr("sum(length(value)) s", "count(*) c").collect()[0]
        assert got.c == n, got

    spark_read()
    raw_s = best(lambda: raw_read(broker.endpoints, "bench", "bench"))
    arrow_s = best(spark_read)
    rows_s = best(lambda: spark_read(readFormat="rows"))
    line("read: native range reader, 1 process", n, raw_s)
    line("read: spark.read (Arrow batches)", n, arrow_s, "native reader", raw_s)
    line("read: spark.read (Python tuples)", n, rows_s, "native reader", raw_s)
    print(f"{'':44} Arrow batches are {rows_s / arrow_s:.2f}x faster than tuples")

    df = spark.range(n).selectExpr(f"repeat('x', {size}) as value").cache()
    df.count()

    def spark_write() -> None:
        df.write.format("ferrymq").option("endpoints", broker.endpoints).option(
            "topic", "sink"
        ).mode("append").save()

    spark_write()
    write_s = best(spark_write)
    line("write: producer send_batch, 1 process", n, fill_s)
    line("write: df.write", n, write_s, "producer", fill_s)


JMQ_AUTH = {"app": "test_app", "token": "test_token"}


def bench_jmq(spark: Any, broker: EmbeddedBroker, n: int, size: int) -> None:
    """JMQ4: the same read and write measurements against the embedded JMQ4 server."""
    endpoint = broker.jmq_endpoint
    broker.create_topic("jbench", queues=4)
    broker.create_topic("jsink", queues=4)
    p = _native.JmqProducer(endpoint, **JMQ_AUTH)
    p.start()
    body = b"x" * size
    t0 = time.perf_counter()
    for a in range(0, n, 500):
        p.send_batch([ferrymq.Message("jbench", body) for _ in range(min(500, n - a))])
    fill_s = time.perf_counter() - t0
    p.close()

    def raw_read() -> None:
        with _native.JmqRangeReader(endpoint, **JMQ_AUTH) as r:
            got = 0
            for part, (left, right) in r.bounds("jbench").items():
                at = left
                while at < right:
                    cols = r.read_range("jbench", part, at, right, 10_000)
                    cols.arrow_buffers()
                    got += cols.num_rows
                    at = cols.next_offset
            assert got == n, got

    def spark_read() -> None:
        df = spark.read.format("ferrymq").options(
            endpoints=endpoint, subscribe="jbench", **JMQ_AUTH
        )
        got = df.load().selectExpr("sum(length(value)) s", "count(*) c").collect()[0]
        assert got.c == n, got

    spark_read()
    raw_s = best(raw_read)
    arrow_s = best(spark_read)
    line("JMQ4 read: native range reader, 1 process", n, raw_s)
    line("JMQ4 read: spark.read (Arrow batches)", n, arrow_s, "native reader", raw_s)

    df = spark.range(n).selectExpr(f"repeat('x', {size}) as value").cache()
    df.count()

    def spark_write() -> None:
        df.write.format("ferrymq").options(endpoints=endpoint, topic="jsink", **JMQ_AUTH).mode(
            "append"
        ).save()

    spark_write()
    write_s = best(spark_write)
    line("JMQ4 write: producer send_batch, 1 process", n, fill_s)
    line("JMQ4 write: df.write", n, write_s, "producer", fill_s)
    df.unpersist()


def bench_nats(spark: Any, exe: str, n: int, size: int) -> None:
    import socket
    import subprocess
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as store:
        proc = subprocess.Popen(
            [exe, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"nats://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    js = ferrymq.JetStream(url)
                    break
                except Exception:
                    time.sleep(0.1)
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
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
