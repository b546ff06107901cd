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


@pytest.fixture(scope="session")
def jmq_broker() -> Iterator[EmbeddedBroker]:
    """A broker with two RocketMQ endpoints and two JMQ4 nodes, for the JMQ4 tests."""
    with EmbeddedBroker(endpoints=2, jmq_nodes=2, **TEST_BROKER_OPTIONS) as b:
        b.add_jmq_app("other_app", "other_token")
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
