"""Spark in tests: a local session on loopback, and streaming queries run to the end.

Shared by the ``spark`` fixture (conftest.py), test_spark.py and the local-cluster job
(spark_cluster_job.py, a separate process that imports this module from its own folder).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def local_session(master: str, app: str, **config: str) -> Any:
    """A SparkSession bound to 127.0.0.1, without UI, two shuffle partitions, errors-only logs
    and the ferrymq data source registered; ``config`` adds Spark settings."""
    # Workers run PYSPARK_PYTHON, not sys.executable: without this they may pick another
    # interpreter that lacks pyarrow and ferrymq.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import ferrymq.spark

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in config.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(session)
    return session


def run_available_now(writer: Any, timeout: float) -> None:
    """Start the streaming ``writer`` with an availableNow trigger and wait for it to end;
    ``AssertionError`` when it takes longer than ``timeout`` seconds or fails."""
    q = writer.trigger(availableNow=True).start()
    try:
        if not q.awaitTermination(timeout):
            raise AssertionError(f"the streaming query did not finish in {timeout} s")
    finally:
        q.stop()
    if q.exception() is not None:
        raise AssertionError(f"the streaming query failed: {q.exception()}")


def stream_batches(
    reader: Any, checkpoint: Path, seen: dict[int, list[str]], timeout: float
) -> dict[int, list[str]]:
    """Run the streaming ``reader`` to its end from ``checkpoint``; every micro-batch's values
    (as sorted strings) go into ``seen`` under its batch id, which is returned."""

    def sink(df: Any, batch_id: int) -> None:
        seen[batch_id] = sorted(r.v for r in df.selectExpr("cast(value as string) v").collect())

    writer = reader.load().writeStream.foreachBatch(sink)
    run_available_now(writer.option("checkpointLocation", str(checkpoint)), timeout)
    return seen


def lose_commit(checkpoint: Path, batch: int) -> None:
    """Delete the commit of micro-batch ``batch``, as if the driver died before the sink
    committed: Spark re-plans it from the offsets in the checkpoint."""
    for name in (str(batch), f".{batch}.crc"):
        f = checkpoint / "commits" / name
        if f.exists():
            f.unlink()
