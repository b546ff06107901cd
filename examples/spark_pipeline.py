"""A runnable Spark pipeline on ferrymq's embedded broker (no other server needed).

    pip install 'ferrymq[spark]'        # pyspark >= 4.0 and pyarrow; Java 17+ on PATH
    python examples/spark_pipeline.py

1. Starts an embedded RocketMQ broker with an ``orders`` topic (4 queues).
2. Publishes 2 000 JSON orders with the ferrymq producer.
3. Batch: reads the topic into a DataFrame, totals the amounts per customer and writes the
   totals to a ``totals`` topic (``df.write.format("ferrymq")``).
4. Streaming: reads ``orders`` with ``maxOffsetsPerTrigger`` into parquet files under a
   checkpoint, publishes 500 more orders, then restarts the query from its checkpoint: only the
   new orders are read (exactly once, thanks to the offsets in the checkpoint).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import ferrymq
import ferrymq.spark
from ferrymq.testing import EmbeddedBroker


def publish(endpoints: str, start: int, count: int) -> None:
    cls = getattr(ferrymq, "Producer", None) or ferrymq._native.RocketMQProducer
    producer = cls(endpoints, topics=["orders"])
    producer.start()
    try:
        for a in range(start, start + count, 100):
            producer.send_batch(
                [
                    ferrymq.Message(
                        "orders",
                        json.dumps({"id": i, "customer": f"c{i % 7}", "amount": i % 50}).encode(),
                        keys=[str(i)],
                        tag="order",
                    )
                    for i in range(a, min(a + 100, start + count))
                ]
            )
    finally:
        producer.close()


def main() -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    work = tempfile.mkdtemp(prefix="ferrymq-pipeline-")
    with EmbeddedBroker() as broker:
        broker.create_topic("orders", queues=4)
        broker.create_topic("totals", queues=2)
        broker.create_group("analytics")
        publish(broker.endpoints, 0, 2000)
        source = {"endpoints": broker.endpoints, "subscribe": "orders", "group": "analytics"}

        # -- batch: read, aggregate, write back -------------------------------------------------
        orders = spark.read.format("ferrymq").options(**source).load()
        schema = "id int, customer string, amount int"
        parsed = orders.select(F.from_json(F.col("value").cast("string"), schema).alias("o"))
        totals = parsed.groupBy("o.customer").agg(F.sum("o.amount").alias("total"))
        totals.orderBy("customer").show()
        (
            totals.select(
                F.col("customer").alias("key"),
                F.to_json(F.struct("customer", "total")).alias("value"),
            )
            .write.format("ferrymq")
            .option("endpoints", broker.endpoints)
            .option("topic", "totals")
            .mode("append")
            .save()
        )
        print("totals topic now holds", len(broker.messages("totals")), "messages")

        # -- streaming: checkpointed, restartable ----------------------------------------------
        out, checkpoint = os.path.join(work, "out"), os.path.join(work, "checkpoint")

        def run_stream() -> int:
            q = (
                spark.readStream.format("ferrymq")
                .options(**source)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "1000")
                .load()
                .selectExpr("partition", "offset", "cast(value as string) as order")
                .writeStream.format("parquet")
                .option("path", out)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            return sum(p["numInputRows"] for p in q.recentProgress)

        t0 = time.perf_counter()
        print("first run read", run_stream(), "orders")
        publish(broker.endpoints, 2000, 500)
        print("restart read", run_stream(), "new orders")
        total = spark.read.parquet(out).count()
        print(f"parquet holds {total} orders (2500 expected) in {time.perf_counter() - t0:.1f}s")
        # Stop Spark (and the clients cached in its Python workers) before the broker.
        spark.stop()


if __name__ == "__main__":
    main()
