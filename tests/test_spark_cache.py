"""The Spark data source's per-process client cache: leases, idle eviction, fork and bad
configuration (no Spark needed: the cache is plain Python)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ferrymq
from ferrymq.spark import _cache
from ferrymq.testing import EmbeddedBroker
from waiting import in_forked_child, wait_for


class _Client:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _cache.clear()
    monkeypatch.delenv(_cache.IDLE_TIMEOUT_ENV, raising=False)
    yield
    _cache.clear()


def _factory(made: list[_Client]) -> Callable[[], _Client]:
    def make() -> _Client:
        made.append(_Client())
        return made[-1]

    return make


def test_one_client_per_key_and_process() -> None:
    made: list[_Client] = []
    with _cache.lease("a", _factory(made)) as first, _cache.lease("a", _factory(made)) as again:
        assert first is again
    with _cache.lease("b", _factory(made)) as other:
        assert other is not first
    assert len(made) == 2
    assert _cache.size() == 2


def test_a_factory_that_raises_caches_nothing() -> None:
    def broken() -> Any:
        raise ferrymq.FerryConnectionError("no broker")

    with pytest.raises(ferrymq.FerryConnectionError), _cache.lease("a", broken):
        pass
    assert _cache.size() == 0


def test_an_idle_client_is_closed_and_a_new_one_made_on_next_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_cache.IDLE_TIMEOUT_ENV, "0.2")
    made: list[_Client] = []
    with _cache.lease("a", _factory(made)):
        pass
    wait_for("the idle client closed", made[0].closed.is_set, 10)
    assert _cache.size() == 0
    with _cache.lease("a", _factory(made)) as fresh:
        assert fresh is made[1]
        assert not fresh.closed.is_set()


def test_a_leased_client_is_never_closed_for_idleness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_cache.IDLE_TIMEOUT_ENV, "0.1")
    made: list[_Client] = []
    with _cache.lease("held", _factory(made)) as held:
        # Another client going idle meanwhile proves the janitor ran past the held one.
        with _cache.lease("brief", _factory(made)):
            pass
        wait_for("the brief client closed", made[1].closed.is_set, 10)
        assert not held.closed.is_set()
    wait_for("the released client closed", made[0].closed.is_set, 10)


def test_a_real_producer_is_closed_when_idle(
    monkeypatch: pytest.MonkeyPatch, broker: EmbeddedBroker
) -> None:
    monkeypatch.setenv(_cache.IDLE_TIMEOUT_ENV, "0.2")

    def make() -> ferrymq.Producer:
        p = ferrymq.Producer(broker.endpoints)
        p.start()
        return p

    topic = "spark-cache-idle"
    broker.create_topic(topic, "NORMAL", 1)
    with _cache.lease("p", make) as producer:
        producer.send(ferrymq.Message(topic, b"x"))
    wait_for("the producer evicted", lambda: _cache.size() == 0, 10)
    with pytest.raises(ferrymq.ClientClosedError):
        producer.send(ferrymq.Message(topic, b"y"))


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf", "nan"])
def test_a_bad_idle_timeout_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(_cache.IDLE_TIMEOUT_ENV, raw)
    with (
        pytest.raises(ferrymq.InvalidArgumentError, match=_cache.IDLE_TIMEOUT_ENV),
        _cache.lease("a", _Client),
    ):
        pass
    assert _cache.size() == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_starts_empty() -> None:
    made: list[_Client] = []
    with _cache.lease("a", _factory(made)):
        pass
    # The child: the parent's client is not its to use or close.
    assert in_forked_child(lambda: str(_cache.size())) == "0"
    assert _cache.size() == 1
    assert not made[0].closed.is_set()
