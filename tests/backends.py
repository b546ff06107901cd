"""One protocol's server behind the one client API, for tests that state a behaviour once for
every protocol: the ``backend`` fixture of conftest.py is parametrized over ``rocketmq`` (the
session's embedded broker), ``jmq`` (the JMQ4 side of ``jmq_broker``) and ``nats`` (the
session's nats-server), so the test ids name the protocol that broke."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ferrymq


@dataclass
class Backend:
    #: what the clients' ``protocol`` property says
    protocol: str
    endpoint: str
    #: a fresh topic (NATS: subject) that nothing else writes to
    topic: str
    #: a consumer group reading ``topic`` (JMQ4: the app; NATS: the durable name)
    group: str
    #: a topic (NATS: subject) no server stores
    missing: str
    #: how many messages the server stores for ``topic``
    stored: Callable[[], int]
    #: the receipt class a send over this protocol returns
    receipt: type[ferrymq.Receipt]
    #: what a publisher's ack names as its stream (NATS: the stream; others: the topic)
    stream: str
    #: options every producer / consumer / simple consumer of this protocol needs
    producer_options: dict[str, Any] = field(default_factory=dict)
    consumer_options: dict[str, Any] = field(default_factory=dict)
    receive_options: dict[str, Any] = field(default_factory=dict)

    def producer(self, **options: Any) -> ferrymq.Producer:
        return ferrymq.Producer(self.endpoint, **self.producer_options, **options)

    def simple_consumer(self, **options: Any) -> ferrymq.SimpleConsumer:
        return ferrymq.SimpleConsumer(
            self.endpoint,
            self.group,
            subscriptions=self.topic,
            **{**self.consumer_options, **self.receive_options, **options},
        )

    def push_consumer(self, listener: Any, **options: Any) -> ferrymq.PushConsumer:
        return ferrymq.PushConsumer(
            self.endpoint,
            self.group,
            subscriptions=self.topic,
            listener=listener,
            **self.consumer_options,
            **options,
        )

    def send(self, n: int) -> list[bytes]:
        """Send ``n`` messages (bodies ``m0``, ``m1`` …) one by one (a JMQ4 batch would be
        stored, and redelivered, as one entry); returns the bodies."""
        bodies = [b"m%d" % i for i in range(n)]
        with self.producer() as p:
            for body in bodies:
                p.send(ferrymq.Message(self.topic, body))
        return bodies
