"""The lifecycle the lazily connecting clients share (``Producer`` over ``jmq://`` and
``nats://``, and ``JetStream``: their native classes extend ``_native.LazyClient``): one test
per edge, run over each class."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ferrymq
from _nats_server import HoldingProxy, NatsServer
from ferrymq.testing import EmbeddedBroker
from waiting import InThread, wait_for

APP, TOKEN = "test_app", "test_token"

#: A client of an endpoint (and of a topic, for the consumer).
Factory = Callable[[str, str], Any]

KINDS: dict[str, tuple[str, Factory]] = {
    "jmq-producer": (
        "jmq",
        lambda ep, _: ferrymq.Producer(f"jmq://{ep}", app=APP, token=TOKEN),
    ),
    "jetstream": ("nats", lambda ep, _: ferrymq.JetStream(ep)),
    "nats-producer": ("nats", lambda ep, _: ferrymq.Producer(ep)),
}


@pytest.fixture(params=list(KINDS))
def kind(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Callable[[str], Any], int, Callable[[int], str]]]:
    """A client factory, the port of its server, and how to spell an endpoint of a port."""
    protocol, make = KINDS[request.param]
    if protocol == "jmq":
        broker: EmbeddedBroker = request.getfixturevalue("jmq_broker")
        topic: str = request.getfixturevalue("jmq_topic")
        port = int(broker.jmq_endpoint.rsplit(":", 1)[1])
        yield lambda ep: make(ep, topic), port, lambda p: f"127.0.0.1:{p}"
    else:
        server: NatsServer = request.getfixturevalue("nats_server")
        yield lambda ep: make(ep, ""), server.port, lambda p: f"nats://127.0.0.1:{p}"


def test_an_exception_in_the_with_body_propagates_and_closes(
    kind: tuple[Callable[[str], Any], int, Callable[[int], str]],
) -> None:
    make, port, spell = kind
    client = make(spell(port))
    entered: list[Any] = []

    def body() -> None:
        with client as c:
            entered.append(c)
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        body()
    assert entered == [client]
    with pytest.raises(ferrymq.ClientClosedError):
        client.start()


def test_a_connection_that_completes_after_close_is_closed_too(
    kind: tuple[Callable[[str], Any], int, Callable[[int], str]],
) -> None:
    # close() while start() is still connecting finds no client to close; the connection that
    # completes afterwards must be closed as well, not left open until garbage collection.
    make, port, spell = kind
    proxy = HoldingProxy(port)
    try:
        proxy.hold()  # the server's answers wait: the connect cannot finish
        client = make(spell(proxy.port))
        started = InThread(client.start)
        wait_for("the client to connect to the proxy", lambda: proxy.accepted >= 1)
        client.close()
        proxy.release()
        with pytest.raises(ferrymq.ClientClosedError):
            started.wait(30)
        wait_for(
            "the client to close the connection made after close()",
            lambda: proxy.client_closed >= proxy.accepted,
            timeout=15,
        )
    finally:
        proxy.close()
