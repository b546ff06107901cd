"""Session-wide servers for the test-suite. Each helper adds its fixtures in its own section."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# -- NATS JetStream (nats-server) -------------------------------------------------------------
from _nats_server import HoldingProxy, NatsServer, run_nats_server


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
