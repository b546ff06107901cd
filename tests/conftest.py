"""Shared pytest fixtures.

Servers are started once per session. The embedded broker fixtures:

* ``broker`` — one session-wide :class:`ferrymq.testing.EmbeddedBroker` (1 endpoint, no
  auto-create, test timers: 1 s long-polling floor, no invisible-duration floor, 1 s transaction
  check-back). Create your own topics and groups with names from ``unique`` so tests do not
  see each other's messages. Never inject faults into it: use ``make_broker``.
* ``make_broker(**kwargs)`` — a private broker for one test (faults, several endpoints,
  credentials), closed at the end of the test. Same test timers unless overridden.
* ``unique(prefix)`` — a fresh, valid topic/group name.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from _nats_server import HoldingProxy, NatsServer, run_nats_server
from ferrymq.testing import EmbeddedBroker

#: Broker options used by the fixtures: the proxy's rules with short timers.
TEST_BROKER_OPTIONS: dict[str, Any] = {
    "long_polling_min": 1.0,
    "min_invisible": 0.0,
    "transaction_check_delay": 1.0,
    "transaction_check_interval": 1.0,
}

_counter = itertools.count()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(endpoints=1, **TEST_BROKER_OPTIONS) as b:
        yield b


@pytest.fixture
def make_broker() -> Iterator[Callable[..., EmbeddedBroker]]:
    created: list[EmbeddedBroker] = []

    def make(**kwargs: Any) -> EmbeddedBroker:
        options = {**TEST_BROKER_OPTIONS, **kwargs}
        b = EmbeddedBroker(**options)
        created.append(b)
        return b

    yield make
    for b in created:
        b.close()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    base = re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:80]

    def name(prefix: str = "t") -> str:
        return f"{prefix}-{base}-{next(_counter)}"

    return name


# --------------------------------------------------------------------------------------------
# Spark (tests marked ``spark``): one local[2] session for the whole run; skipped when pyspark,
# pyarrow or Java is missing.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(broker: EmbeddedBroker) -> Iterator[Any]:
    # Depends on ``broker`` only so that Spark (and the clients cached in its Python workers)
    # stops before the broker does.
    import os
    import shutil
    import sys

    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (apt-get install openjdk-17-jre-headless)")
    # Workers run PYSPARK_PYTHON, not sys.executable: without this they may pick another
    # interpreter that lacks pyarrow and ferrymq.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import ferrymq.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(session)
    yield session
    session.stop()


# --------------------------------------------------------------------------------------------
# NATS JetStream (tests marked ``nats``): one nats-server with JetStream for the whole run, on a
# free loopback port with a temporary store. Fails (does not skip) when nats-server is missing.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """A nats-server with JetStream on a free loopback port and a temporary store directory,
    started once per session. Fails (does not skip) when nats-server is not installed."""
    with run_nats_server() as server:
        yield server


@pytest.fixture
def nats_proxy(nats_server: NatsServer) -> Iterator[HoldingProxy]:
    """A loopback proxy in front of the session's nats-server that can hold back acks."""
    proxy = HoldingProxy(nats_server.port)
    try:
        yield proxy
    finally:
        proxy.close()
