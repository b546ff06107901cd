"""Shared pytest fixtures. Each helper adds its fixtures in its own section.

Servers are started once per session. The embedded broker fixtures:

* ``broker`` — one session-wide :class:`ferrymq.testing.EmbeddedBroker` (1 endpoint, no
  auto-create, test timers: 1 s long-polling floor, no invisible-duration floor, 1 s transaction
  check-back). Create your own topics and groups with names from ``unique`` so tests do not
  see each other's messages. Never inject faults into it: use ``make_broker``.
* ``make_broker(**kwargs)`` — a private broker for one test (faults, several endpoints,
  credentials), closed at the end of the test. Same test timers unless overridden.
* ``unique(prefix)`` — a fresh, valid topic/group name.
* ``fresh_topic(kind="NORMAL", queues=8, prefix="t", **kwargs)`` — ``(broker, topic)``: a
  private broker (``make_broker(**kwargs)``) with a fresh topic.

One behaviour over every protocol:

* ``backend`` — parametrized over ``rocketmq``, ``jmq`` and ``nats``: a fresh topic and group
  on that protocol's server, with its clients' options (:class:`backends.Backend`).

The official Java client (``tests/java``, built by ``scripts/java-peer``):

* ``java_peer`` — a :class:`java_peer.JavaPeer` that starts ``FerryPeer`` commands as
  subprocesses (killed at the end of the test). Built once per machine (Maven + javac; needs
  Java 17 and Maven); a failed build fails the tests that use it.

Real Apache RocketMQ (tests marked ``rocketmq``):

* ``rocketmq_server`` — a :class:`servers.RealServer`: the name server + local-mode proxy of
  ``scripts/rocketmq-server``, started once per session (before the first test, so its start
  time counts against no test's timeout) when any selected test is marked ``rocketmq``, and
  stopped at the end of the session if this session started it (``FERRYMQ_ROCKETMQ_KEEP=1``
  keeps it running for the next run). A server that cannot start fails those tests loudly;
  deselect them with ``-m "not rocketmq"``.
* ``server`` — parametrised over ``embedded`` (the ``broker`` fixture) and ``real``: the same
  test body runs against both (``servers.Server``: ``endpoints``, ``address``, ``setup()``).
* ``proxy_server`` — the same, but its embedded side keeps the proxy's default timers
  (``proxy_broker``: 5 s long-polling floor, 10 s invisible floor), for conformance tests that
  pin those limits.
* Tests marked ``restarts_server`` run last (they stop and start the real proxy).

The secure instance of the real server (tests marked ``rocketmq_secure``):

* ``rocketmq_secure_server`` — a :class:`servers.SecureServer` (``scripts/rocketmq-server
  --secure``: TLS enforced on the proxy, ACL 2.0 on; its own ports and state directory, so the
  plain tests never need credentials), started and stopped like ``rocketmq_server`` (same
  ``FERRYMQ_ROCKETMQ_KEEP``); ``FERRYMQ_ROCKETMQ_SECURE_HOME`` / ``_ENDPOINTS`` /
  ``_NAMESRV_PORT`` / ``_REMOTING_PORT`` / ``_BROKER_PORT`` move it elsewhere.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ferrymq

# -- NATS JetStream (nats-server) -------------------------------------------------------------
from _nats_server import HoldingProxy, NatsServer, run_nats_server
from backends import Backend
from ferrymq.spark._cache import IDLE_TIMEOUT_ENV
from ferrymq.testing import EmbeddedBroker
from java_peer import JavaPeer, JavaPeerError
from servers import (
    EmbeddedServer,
    FreshTopic,
    RealServer,
    RealServerError,
    SecureServer,
    Server,
)
from spark_helpers import local_session

#: Broker options used by the fixtures: the proxy's rules with short timers.
TEST_BROKER_OPTIONS: dict[str, Any] = {
    "long_polling_min": 1.0,
    "min_invisible": 0.0,
    "transaction_check_delay": 1.0,
    "transaction_check_interval": 1.0,
}

_counter = itertools.count()
#: Tells this session's names from earlier sessions': a real RocketMQ keeps its topics (and
#: their messages) across runs, so a name must never repeat from one run to the next.
_SESSION = uuid.uuid4().hex[:6]


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(endpoints=1, **TEST_BROKER_OPTIONS) as b:
        yield b


@pytest.fixture(scope="session")
def jmq_broker() -> Iterator[EmbeddedBroker]:
    """A broker with two RocketMQ endpoints and two JMQ4 nodes, for the JMQ4 tests."""
    with EmbeddedBroker(endpoints=2, jmq_nodes=2, **TEST_BROKER_OPTIONS) as b:
        b.add_jmq_app("other_app", "other_token")
        yield b


@pytest.fixture
def jmq_topic(jmq_broker: EmbeddedBroker, unique: Callable[[str], str]) -> str:
    """A fresh topic with four queues (JMQ4 partitions) on ``jmq_broker``."""
    name = unique("jmq")
    jmq_broker.create_topic(name, queues=4)
    return name


@pytest.fixture
def jmq_producer(jmq_broker: EmbeddedBroker) -> Iterator[ferrymq.Producer]:
    """A JMQ4 producer of ``jmq_broker``'s default app."""
    with ferrymq.Producer(jmq_broker.jmq_endpoint, app="test_app", token="test_token") as p:
        yield p


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
def fresh_topic(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str]
) -> FreshTopic:
    def make(
        kind: str = "NORMAL", *, queues: int = 8, prefix: str = "t", **broker: Any
    ) -> tuple[EmbeddedBroker, str]:
        b = make_broker(**broker)
        topic = unique(prefix)
        b.create_topic(topic, kind, queues)
        return b, topic

    return make


class _Unique(str):
    """A fresh token (``str``, for stream names and subjects) that is also callable:
    ``unique(prefix)`` gives a fresh, valid topic/group name."""

    _base: str

    def __new__(cls, base: str) -> _Unique:
        self = super().__new__(cls, uuid.uuid4().hex[:10].upper())
        self._base = base
        return self

    def __call__(self, prefix: str = "t") -> str:
        return f"{prefix}-{self._base}-{_SESSION}{next(_counter)}"


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> _Unique:
    return _Unique(re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:80])


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """A nats-server with JetStream on a free loopback port and a temporary store directory,
    started once per session. Fails (does not skip) when nats-server is not installed."""
    with run_nats_server() as server:
        yield server


@pytest.fixture
def tok() -> str:
    """A short unique token for stream names and subjects."""
    return uuid.uuid4().hex[:10].upper()


@pytest.fixture
def js(nats_server: NatsServer) -> Iterator[ferrymq.JetStream]:
    """A JetStream client of the session's nats-server."""
    with ferrymq.JetStream(nats_server.url, name="ferrymq-tests") as client:
        yield client


@pytest.fixture
def nats_stream(js: ferrymq.JetStream, tok: str) -> Iterator[tuple[ferrymq.JetStream, str]]:
    """A fresh stream ``S<tok>`` on subjects ``s<tok>.>``, deleted at the end of the test;
    yields the ``js`` client and ``tok``."""
    js.create_stream(f"S{tok}", [f"s{tok}.>"])
    try:
        yield js, tok
    finally:
        js.delete_stream(f"S{tok}")


@pytest.fixture
def nats_proxy(nats_server: NatsServer) -> Iterator[HoldingProxy]:
    """A loopback proxy in front of the session's nats-server that can hold back acks."""
    proxy = HoldingProxy(nats_server.port)
    try:
        yield proxy
    finally:
        proxy.close()


# --------------------------------------------------------------------------------------------
# One behaviour over every protocol (tests/backends.py).
# --------------------------------------------------------------------------------------------


@pytest.fixture(params=["rocketmq", "jmq", pytest.param("nats", marks=pytest.mark.nats)])
def backend(request: pytest.FixtureRequest, unique: _Unique) -> Backend:
    """A fresh topic and a consumer group of it on one protocol's server."""
    if request.param == "rocketmq":
        b: EmbeddedBroker = request.getfixturevalue("broker")
        topic, group = unique("t"), unique("g")
        b.create_topic(topic, "NORMAL", 4)
        b.create_group(group, retry_backoff=[0.1, 0.2, 0.3])
        return Backend(
            "rocketmq",
            b.endpoints,
            topic,
            group,
            unique("missing"),
            lambda: len(b.messages(topic)),
            ferrymq.SendReceipt,
            topic,
            receive_options={"await_duration": 1.0},
        )
    if request.param == "jmq":
        jb: EmbeddedBroker = request.getfixturevalue("jmq_broker")
        topic = request.getfixturevalue("jmq_topic")
        return Backend(
            "jmq",
            jb.jmq_endpoint,
            topic,
            "test_app",
            unique("missing"),
            lambda: jb.jmq.message_count(topic),
            ferrymq.JmqSendReceipt,
            topic,
            producer_options={"app": "test_app", "token": "test_token"},
            consumer_options={"token": "test_token"},
            receive_options={"await_duration": 0.3, "jmq_options": {"long_poll": 0.5}},
        )
    js, tok = request.getfixturevalue("nats_stream")
    server: NatsServer = request.getfixturevalue("nats_server")
    return Backend(
        "nats",
        server.url,
        f"s{tok}.a",
        f"g{tok}",
        f"nostream{tok}.a",
        lambda: js.stream_info(f"S{tok}").messages,
        ferrymq.NatsSendReceipt,
        f"S{tok}",
        receive_options={"await_duration": 0.5},
    )


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

    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (apt-get install openjdk-17-jre-headless)")
    # Clients cached in the reused Python workers close soon after their test: a client of a
    # broker that a test closed keeps reconnecting to its port, which the system may meanwhile
    # have handed to another server (a later Spark job's, say).
    os.environ.setdefault(IDLE_TIMEOUT_ENV, "2")
    session = local_session(
        "local[2]",
        "ferrymq-tests",
        **{
            "spark.driver.memory": "768m",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    yield session
    session.stop()


# --------------------------------------------------------------------------------------------
# Real Apache RocketMQ 5 (tests marked ``rocketmq``): scripts/rocketmq-server, once per session.
# --------------------------------------------------------------------------------------------

_REAL: dict[str, Any] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that stop and start the real proxy run last, so nothing else sees the restart.
    items.sort(key=lambda item: item.get_closest_marker("restarts_server") is not None)


#: Per marker: "server" (the RealServer), "start_seconds" or "error".
_SESSION_SERVERS: dict[str, dict[str, Any]] = {"rocketmq": _REAL, "rocketmq_secure": {}}
_SERVER_CLASSES: dict[str, Callable[[], RealServer]] = {
    "rocketmq": RealServer,
    "rocketmq_secure": SecureServer,
}


def _start_server(marker: str) -> RealServer:
    """Start the marker's server unless it runs already; records the outcome."""
    state = _SESSION_SERVERS[marker]
    server = _SERVER_CLASSES[marker]()
    try:
        if not server.running():
            server.started_here = True  # stop it at the end even if the start fails half-way
            state["start_seconds"] = server.start()
    except (RealServerError, subprocess.TimeoutExpired, OSError) as exc:
        state["error"] = f"the real RocketMQ server ({server.kind}) did not start: {exc}"
    state["server"] = server
    return server


def pytest_collection_finish(session: pytest.Session) -> None:
    # Start the real server(s) before the first test when a selected test needs one: a start
    # (24-60 s on a loaded machine) then counts against no test's timeout.
    if session.config.option.collectonly:
        return
    for marker in _SESSION_SERVERS:
        if any(item.get_closest_marker(marker) for item in session.items):
            _start_server(marker)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for state in _SESSION_SERVERS.values():
        server: RealServer | None = state.get("server")
        if (
            server is not None
            and server.started_here
            and not os.environ.get("FERRYMQ_ROCKETMQ_KEEP")
        ):
            server.run("stop", check=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # What each real server's start cost this session (a share of CI time worth watching).
    for state in _SESSION_SERVERS.values():
        if "start_seconds" in state:
            server = state["server"]
            took = state["start_seconds"]
            terminalreporter.write_line(f"real RocketMQ ({server.kind}) started in {took:.1f} s")


def _session_server(marker: str) -> RealServer:
    state = _SESSION_SERVERS[marker]
    if "server" not in state:  # selected indirectly (e.g. by a fixture): start it now
        _start_server(marker)
    if "error" in state:
        pytest.fail(state["error"], pytrace=False)
    server: RealServer = state["server"]
    return server


@pytest.fixture(scope="session")
def rocketmq_server() -> RealServer:
    return _session_server("rocketmq")


@pytest.fixture(scope="session")
def rocketmq_secure_server() -> SecureServer:
    server = _session_server("rocketmq_secure")
    assert isinstance(server, SecureServer)
    return server


@pytest.fixture(scope="session")
def proxy_broker() -> Iterator[EmbeddedBroker]:
    """An embedded broker with the proxy's default rules and timers."""
    with EmbeddedBroker(endpoints=1) as b:
        yield b


_SERVERS = ["embedded", pytest.param("real", marks=pytest.mark.rocketmq)]


def _either_server(request: pytest.FixtureRequest, embedded: str) -> Server:
    """The fixture ``embedded`` (a broker) or the real server, as the parameter says."""
    if request.param == "embedded":
        return EmbeddedServer(request.getfixturevalue(embedded))
    real: RealServer = request.getfixturevalue("rocketmq_server")
    return real


@pytest.fixture(params=_SERVERS)
def server(request: pytest.FixtureRequest) -> Server:
    return _either_server(request, "broker")


@pytest.fixture(params=_SERVERS)
def proxy_server(request: pytest.FixtureRequest) -> Server:
    return _either_server(request, "proxy_broker")


# --------------------------------------------------------------------------------------------
# The official Java client as a peer (tests/java/FerryPeer.java via scripts/java-peer).
# --------------------------------------------------------------------------------------------

_JAVA: dict[str, Any] = {}


@pytest.fixture
def java_peer() -> Iterator[JavaPeer]:
    if "peer" not in _JAVA and "error" not in _JAVA:
        try:
            _JAVA["peer"] = JavaPeer()
        except (JavaPeerError, subprocess.TimeoutExpired, OSError) as exc:
            _JAVA["error"] = f"the Java peer could not be built: {exc}"
    if "error" in _JAVA:
        pytest.fail(_JAVA["error"], pytrace=False)
    peer: JavaPeer = _JAVA["peer"].fresh()
    yield peer
    peer.kill_all()


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Clients to close at the end of the test (in reverse order)."""
    clients: list[Any] = []
    yield clients
    for c in reversed(clients):
        c.close()
