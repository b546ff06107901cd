"""ferrymq as a PySpark data source: ``format("ferrymq")`` for ``spark.read``,
``spark.readStream``, ``df.write`` and ``df.writeStream``.

Install with ``pip install 'ferrymq[spark]'`` (pyspark >= 4.0 and pyarrow), then::

    import ferrymq.spark

    ferrymq.spark.register(spark)
    df = (spark.read.format("ferrymq")
          .option("endpoints", "127.0.0.1:8081")
          .option("subscribe", "orders")
          .option("group", "analytics")
          .load())

The endpoint scheme picks the backend: ``host:port`` is RocketMQ 5 (gRPC), ``nats://`` is NATS
JetStream and ``jmq://`` is JMQ4. Options and columns follow Spark's Kafka connector; see the
README ("Spark") for each read mode's guarantee.

``import ferrymq`` never imports this module (nor pyspark).
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"ferrymq.spark needs pyspark >= 4.0 and pyarrow ({e}); "
        "install them with: pip install 'ferrymq[spark]'"
    ) from e

from ._options import SinkConfig, SourceConfig, parse_sink_options, parse_source_options
from ._source import HAS_ADMISSION_CONTROL, FerryDataSource

__all__ = [
    "HAS_ADMISSION_CONTROL",
    "FerryDataSource",
    "SinkConfig",
    "SourceConfig",
    "parse_sink_options",
    "parse_source_options",
    "register",
]


def register(spark: Any) -> None:
    """Register ``format("ferrymq")`` with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(FerryDataSource)
