"""Session-wide servers for the test-suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ferrymq import _native


@pytest.fixture(scope="session")
def jmq_server() -> Iterator[_native.JmqServer]:
    """The embedded JMQ4 server: two broker nodes on loopback ports sharing one store."""
    server = _native.JmqServer(nodes=2, apps={"other_app": "other_token"})
    yield server
    server.shutdown()
