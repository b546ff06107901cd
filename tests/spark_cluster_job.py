"""A Spark application run by ``test_spark_remoting.py`` in ``local-cluster`` mode (separate
executor JVMs and Python workers), against RocketMQ over the remoting protocol.

It writes rows with ``df.write`` (batched sends on the executors), reads them back with
``spark.read`` and with a streaming query that is stopped and restarted from its checkpoint,
and optionally checks data-loss detection after the topic is recreated. It prints one JSON
object with what it observed; the test makes the assertions.

    python tests/spark_cluster_job.py --endpoint remoting://127.0.0.1:9876 --topic T \\
        --group G --workdir DIR --rows 2000 [--recreate-cmd "..."]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from spark_helpers import local_session, lose_commit, stream_batches


def _write(spark: Any, endpoint: str, topic: str, start: int, count: int) -> None:
    df = spark.range(start, start + count, numPartitions=4).selectExpr(
        "cast(concat('v', cast(id as string)) as binary) as value",
        "cast(concat('k', cast(id as string)) as binary) as key",
        "case when id % 2 = 0 then 'even' else 'odd' end as tag",
        "map('i', cast(id as string)) as properties",
    )
    df.write.format("ferrymq").option("endpoints", endpoint).option("topic", topic).mode(
        "append"
    ).save()


def _stream(
    spark: Any, endpoint: str, topic: str, group: str, ckpt: Path, **options: str
) -> dict[int, list[str]]:
    reader = (
        spark.readStream.format("ferrymq")
        .option("endpoints", endpoint)
        .option("subscribe", topic)
        .option("group", group)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return stream_batches(reader, ckpt, {}, 180)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--recreate-cmd", default=None)
    a = ap.parse_args()
    work = Path(a.workdir)
    out: dict[str, Any] = {}
    spark = local_session(a.master, "ferrymq-remoting-cluster", **{"spark.executor.memory": "768m"})
    try:
        t = time.monotonic()
        _write(spark, a.endpoint, a.topic, 0, a.rows)
        out["write_seconds"] = time.monotonic() - t

        t = time.monotonic()
        rows = (
            spark.read.format("ferrymq")
            .option("endpoints", a.endpoint)
            .option("subscribe", a.topic)
            .option("group", a.group)
            .load()
            .selectExpr(
                "cast(value as string) v",
                "cast(key as string) k",
                "properties['i'] i",
                "tag",
                "partition",
                "offset",
                "messageId",
            )
            .collect()
        )
        out["read_seconds"] = time.monotonic() - t
        out["read"] = [[r.v, r.k, r.i, r.tag, r.partition, r.offset, r.messageId] for r in rows]
        out["read_partitions"] = (
            spark.read.format("ferrymq")
            .option("endpoints", a.endpoint)
            .option("subscribe", a.topic)
            .option("group", a.group)
            .load()
            .rdd.getNumPartitions()
        )

        # Streaming, stopped and restarted from its checkpoint; the last batch's commit is
        # lost, as if the driver died before the sink committed: it must be replayed exactly.
        ckpt = work / "ckpt"
        first = _stream(spark, a.endpoint, a.topic, a.group, ckpt)
        last = max(first)
        lose_commit(ckpt, last)
        _write(spark, a.endpoint, a.topic, a.rows, a.rows // 2)
        second = _stream(spark, a.endpoint, a.topic, a.group, ckpt)
        out["stream_first"] = {str(k): v for k, v in first.items()}
        out["stream_second"] = {str(k): v for k, v in second.items()}
        out["stream_last"] = last

        if a.recreate_cmd:
            subprocess.run(shlex.split(a.recreate_cmd), check=True, timeout=180)
            _write(spark, a.endpoint, a.topic, 0, 10)
            try:
                _stream(spark, a.endpoint, a.topic, a.group, ckpt)
                out["data_loss_error"] = None
            except Exception as e:  # the expected outcome
                out["data_loss_error"] = str(e)
            # failOnDataLoss=false goes on from the queues' beginning.
            after = _stream(spark, a.endpoint, a.topic, a.group, ckpt, failOnDataLoss="false")
            out["after_loss"] = sorted(v for b in after.values() for v in b)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
