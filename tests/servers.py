"""The servers a test can run against, behind one small interface.

* :class:`EmbeddedServer` — ferrymq's embedded broker (:class:`ferrymq.testing.EmbeddedBroker`).
* :class:`RealServer` — a real Apache RocketMQ 5 (name server + local-mode proxy) run by
  ``scripts/rocketmq-server``; one per test session (the ``rocketmq_server`` fixture).
* :class:`SecureServer` — the same server's secure instance (``scripts/rocketmq-server
  --secure``: TLS enforced, ACL 2.0 on; the ``rocketmq_secure_server`` fixture).

Tests parametrised over both (the ``server`` and ``proxy_server`` fixtures of ``conftest.py``)
create their own topics and groups with :meth:`Server.setup`, send and receive through ferrymq
or the raw driver (``rmq_wire``), and assert the same behaviour on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import ferrymq
from ferrymq import MessageView
from ferrymq.testing import EmbeddedBroker
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "rocketmq-server"
C = TypeVar("C")
#: The ``fresh_topic`` fixture: ``(kind, queues=, prefix=, **broker_options) -> (broker, topic)``.
FreshTopic = Callable[..., tuple[EmbeddedBroker, str]]


def real_endpoints() -> str:
    """The real proxy's gRPC endpoint, as ``scripts/rocketmq-server`` reads it."""
    ep = os.environ.get("FERRYMQ_ROCKETMQ_ENDPOINTS", "127.0.0.1:8081").split(";")[0]
    for prefix in ("http://", "https://"):
        ep = ep.removeprefix(prefix)
    return ep.rstrip("/")


def started(closing: list[Any], client: C) -> C:
    """Start a ferrymq ``client`` put on the test's ``closing`` list first (closed at the end of
    the test, even when its start fails)."""
    closing.append(client)
    client.start()
    return client


class Collector:
    """A started ferrymq push consumer of ``topic`` (on the test's ``closing`` list) that
    records what its listener saw, in order; ``options`` go to the consumer."""

    def __init__(
        self, endpoints: str, group: str, topic: str, closing: list[Any], **options: Any
    ) -> None:
        self.got: list[MessageView] = []
        self._lock = threading.Lock()
        self.consumer = started(
            closing,
            ferrymq.PushConsumer(
                endpoints, group, subscriptions={topic: "*"}, listener=self._on, **options
            ),
        )

    def _on(self, m: MessageView) -> None:
        with self._lock:
            self.got.append(m)

    def ids(self) -> set[str]:
        """The ids of the messages seen so far."""
        with self._lock:
            return {m.message_id for m in self.got}

    def wait(self, want: int, timeout: float = 60.0) -> list[MessageView]:
        """The messages seen, once there are at least ``want``."""
        wait_for(f"{want} messages pushed", lambda: len(self.got) >= want, timeout)
        with self._lock:
            return list(self.got)


class Server(Protocol):
    kind: str

    @property
    def endpoints(self) -> str: ...

    @property
    def address(self) -> str: ...

    @property
    def remoting_endpoint(self) -> str: ...

    def setup(
        self,
        topics: Mapping[str, str] = ...,
        groups: Iterable[str] = ...,
        *,
        fifo_groups: Iterable[str] = ...,
        max_attempts: int | None = None,
    ) -> None: ...


class EmbeddedServer:
    """The embedded broker behind the :class:`Server` interface."""

    kind = "embedded"

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker

    @property
    def endpoints(self) -> str:
        return self.broker.endpoints

    @property
    def address(self) -> str:
        return self.broker.addresses[0]

    @property
    def remoting_endpoint(self) -> str:
        """The broker as name server + brokers over the remoting protocol."""
        return self.broker.remoting_endpoint

    def setup(
        self,
        topics: Mapping[str, str] = {},
        groups: Iterable[str] = (),
        *,
        fifo_groups: Iterable[str] = (),
        max_attempts: int | None = None,
    ) -> None:
        extra: dict[str, Any] = {}
        if max_attempts is not None:
            extra["max_delivery_attempts"] = max_attempts
        for name, kind in topics.items():
            self.broker.create_topic(name, kind, 8)
        for g in groups:
            self.broker.create_group(g, **extra)
        for g in fifo_groups:
            self.broker.create_group(g, fifo=True, **extra)

    def __repr__(self) -> str:
        return f"EmbeddedServer({self.endpoints})"


class RealServerError(RuntimeError):
    """``scripts/rocketmq-server`` failed; the message carries its output and the log tail."""


class RealServer:
    """A real Apache RocketMQ 5 (namesrv + local-mode proxy) run by ``scripts/rocketmq-server``."""

    kind = "real"
    #: Environment of every ``scripts/rocketmq-server`` run (``None``: this process's).
    env: dict[str, str] | None = None

    def __init__(self) -> None:
        self._endpoints = real_endpoints()
        self.started_here = False

    @property
    def endpoints(self) -> str:
        return self._endpoints

    @property
    def address(self) -> str:
        return self._endpoints

    @property
    def remoting_endpoint(self) -> str:
        """The name server (the brokers it lists serve the remoting protocol)."""
        port = os.environ.get("FERRYMQ_ROCKETMQ_NAMESRV_PORT", "9876")
        return f"remoting://127.0.0.1:{port}"

    def _script(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.env,
        )

    def run(self, *args: str, timeout: float = 300.0, check: bool = True) -> str:
        """Run ``scripts/rocketmq-server ARGS``; returns its output (stdout + stderr)."""
        proc = self._script(*args, timeout=timeout)
        out = proc.stdout + proc.stderr
        if check and proc.returncode != 0:
            logs = self._script("logs", timeout=30).stdout
            raise RealServerError(
                f"scripts/rocketmq-server {' '.join(args)} exited {proc.returncode}:\n{out}\n"
                f"--- server logs ---\n{logs}"
            )
        return out

    def running(self) -> bool:
        """Whether both JVMs are up and a QueryRoute answers OK."""
        return self._script("status", timeout=60).returncode == 0

    def start(self) -> float:
        """Start (idempotent); returns the seconds it took."""
        t0 = time.monotonic()
        self.run("start")
        return time.monotonic() - t0

    def stop(self, *, kill: bool = False) -> float:
        t0 = time.monotonic()
        self.run("stop", *(["--kill"] if kill else []))
        return time.monotonic() - t0

    def setup(
        self,
        topics: Mapping[str, str] = {},
        groups: Iterable[str] = (),
        *,
        fifo_groups: Iterable[str] = (),
        max_attempts: int | None = None,
    ) -> None:
        """Create topics and groups with one admin JVM; returns once every route is known."""
        suffix = f":attempts={max_attempts}" if max_attempts is not None else ""
        specs = [f"topic:{name}:{kind}" for name, kind in topics.items()]
        specs += [f"group:{g}{suffix}" for g in groups]
        specs += [f"group:{g}:fifo{suffix}" for g in fifo_groups]
        if specs:
            self.run("create", *specs, timeout=120)

    def __repr__(self) -> str:
        return f"RealServer({self.endpoints})"


#: The script's instance settings; the secure instance takes them from ``FERRYMQ_ROCKETMQ_SECURE_*``
#: (so pointing the plain tests at another instance never moves the secure one onto it).
_INSTANCE_VARIABLES = ("HOME", "ENDPOINTS", "NAMESRV_PORT", "REMOTING_PORT", "BROKER_PORT")


def secure_env() -> dict[str, str]:
    """The environment of ``scripts/rocketmq-server`` for the secure instance."""
    env = dict(os.environ, FERRYMQ_ROCKETMQ_SECURE="1")
    for name in _INSTANCE_VARIABLES:
        env.pop(f"FERRYMQ_ROCKETMQ_{name}", None)
        value = os.environ.get(f"FERRYMQ_ROCKETMQ_SECURE_{name}")
        if value:
            env[f"FERRYMQ_ROCKETMQ_{name}"] = value
    return env


class SecureServer(RealServer):
    """The secure instance of ``scripts/rocketmq-server`` (``--secure``): TLS enforced on the
    proxy (a CA generated into its state directory), ACL 2.0 authentication and authorization.

    Users (:meth:`credentials`): ``admin`` (Super), ``client`` (Normal: Pub/Sub on every topic,
    Sub on every group), ``limited`` (Normal: Pub/Sub on topics ``ferry-open-*`` only)."""

    kind = "secure"

    def __init__(self) -> None:
        super().__init__()
        self.env = secure_env()
        self._info: dict[str, str] = {}

    def info(self) -> dict[str, str]:
        """``status`` of the running instance: endpoints, namesrv, remoting, tls_ca, users."""
        if not self._info:
            out = self.run("status", timeout=60)
            self._info = dict(
                line.split("=", 1) for line in out.splitlines() if "=" in line and " " not in line
            )
        return self._info

    @property
    def endpoints(self) -> str:
        return self.info()["endpoints"]

    @property
    def address(self) -> str:
        return self.endpoints

    @property
    def remoting_endpoint(self) -> str:
        return f"remoting://{self.info()['namesrv']}"

    @property
    def ca_file(self) -> str:
        """The CA certificate (PEM) that signed the proxy's certificate."""
        return self.info()["tls_ca"]

    def credentials(self, role: str) -> tuple[str, str]:
        """``(access_key, secret_key)`` of ``admin``, ``client`` or ``limited``."""
        with open(self.info()["users"]) as f:
            user = json.load(f)[role]
        return user["access_key"], user["secret_key"]

    def __repr__(self) -> str:
        return f"SecureServer({self._info.get('endpoints', '?')})"
