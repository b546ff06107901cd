"""The NATS JetStream backend of :class:`ferrymq.SimpleConsumer`, chosen by ``nats://``.

It drives the binding's durable pull consumers (``JetStream.group_consumer``), one per
subscription; the mapping is the core's (``nats/consumer_rpc.rs``), stated once there:

* the group is the durable consumer's name, a topic is a subject (wildcards allowed) that the
  consumer filters on; its stream is the one whose subjects hold it, unless
  ``nats_options={"stream": …}`` names it. One subscription per stream and group;
* messages are :class:`ferrymq.JsMessage` (``message_id`` is the ``Nats-Msg-Id``, else the stream
  sequence; ``delivery_attempt`` the JetStream delivery count);
* a receive is a fetch: it returns with the first messages that arrive, waiting up to
  ``await_duration``; with several subscriptions each is polled in turn for at most 1 s;
* the invisible duration is the durable consumer's ``ack_wait``, set when it is created
  (``nats_options={"ack_wait": …}``, default 30 s): ``receive(invisible_duration=)`` refuses
  another value;
* ``ack`` is a confirmed ``+ACK`` (a list: plain acks and one confirmed at the end, in one
  round trip; async: concurrent confirmed acks); ``change_invisible_duration`` is ``-NAK``
  with that delay (redelivered after it); no tag or SQL filters, no ``subscribe``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from . import _native
from ._args import known_options, nonblank
from ._jmq_simple import DEFAULT_AWAIT, FixedSubscriptions, _seconds, _topics
from ._native import JsMessage
from ._nats import user_password
from ._views import only
from .exceptions import ClientClosedError, InvalidArgumentError

__all__ = ["NatsSimpleBackend", "jetstream_args"]

#: ``nats_options`` names.
OPTIONS = frozenset({"stream", "ack_wait", "name"})
#: The longest single fetch while several subscriptions are polled in turn.
_SLICE = 1.0
_DEFAULT_ACK_WAIT = 30.0


def _messages(message: object) -> list[JsMessage]:
    return only(JsMessage, message, "message", "a nats:// consumer")


def jetstream_args(
    endpoints: str | Iterable[str],
    group: str,
    *,
    credentials: object,
    token: str | None,
    request_timeout: float | timedelta | None,
    options: Mapping[str, Any] | None,
) -> tuple[_native.JetStream, str | None, float]:
    """Check a consuming facade's arguments for ``nats://``: the (unconnected) client, the
    stream named in ``nats_options`` and the durable consumers' ``ack_wait``."""
    nonblank(group, "must not be blank (the durable consumer's name)")
    extra = known_options("nats_options", options, OPTIONS)
    user, password = user_password(credentials)
    stream: str | None = extra.get("stream")
    ack_wait = _native.seconds("ack_wait", extra.get("ack_wait", _DEFAULT_ACK_WAIT), zero=False)
    js = _native.JetStream(
        endpoints if isinstance(endpoints, str) else list(endpoints),
        name=extra.get("name"),
        user=user,
        password=password,
        token=token,
        request_timeout=5.0 if request_timeout is None else request_timeout,
    )
    return js, stream, ack_wait


class NatsSimpleBackend(FixedSubscriptions):
    """:class:`ferrymq.SimpleConsumer` over JetStream durable pull consumers."""

    _scheme, _topic_word = "nats", "subjects"

    def __init__(
        self,
        endpoints: str | Iterable[str],
        group: str,
        *,
        subscriptions: object,
        await_duration: float | timedelta | None,
        credentials: object,
        token: str | None,
        request_timeout: float | timedelta | None,
        options: Mapping[str, Any] | None,
    ) -> None:
        self._js, self._stream, self._ack_wait = jetstream_args(
            endpoints,
            group,
            credentials=credentials,
            token=token,
            request_timeout=request_timeout,
            options=options,
        )
        self._group = group
        self._topics = _topics(subscriptions)
        self._wait = _seconds("await_duration", await_duration, DEFAULT_AWAIT)
        self._consumers: list[_native.JsPullConsumer] = []
        self._next = 0
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._consumers:
            return
        self._js.start()
        self._consumers = [
            self._js.group_consumer(self._group, t, stream=self._stream, ack_wait=self._ack_wait)
            for t in self._topics
        ]

    async def start_async(self) -> None:
        # Binding consumers is a few JetStream API requests, each with the GIL released.
        await asyncio.to_thread(self.start)

    def close(self) -> None:
        self._closed = True
        self._js.close()

    async def close_async(self) -> None:
        self._closed = True
        await self._js.close_async()

    def _ready(self, invisible_duration: float | timedelta | None) -> list[_native.JsPullConsumer]:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if not self._consumers:
            raise ClientClosedError("the consumer is not started; call start() first")
        if invisible_duration is not None:
            asked = _native.seconds("invisible_duration", invisible_duration, zero=False)
            if asked != self._ack_wait:
                raise InvalidArgumentError(
                    f"invisible_duration: on JetStream it is the durable consumer's ack_wait "
                    f"({self._ack_wait} s, set with nats_options={{'ack_wait': …}}), not {asked}"
                )
        return self._consumers

    def _turn(self, consumers: list[_native.JsPullConsumer]) -> _native.JsPullConsumer:
        c = consumers[self._next % len(consumers)]
        self._next += 1
        return c

    # -- consuming ------------------------------------------------------------------------

    def receive(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JsMessage]:
        consumers = self._ready(invisible_duration)
        if len(consumers) == 1:
            return consumers[0].fetch(max_messages, self._wait)
        deadline = time.monotonic() + self._wait
        for c in consumers:
            got = c.fetch(max_messages, 0.0)
            if got:
                return got
        while (left := deadline - time.monotonic()) > 0:
            got = self._turn(consumers).fetch(max_messages, min(left, _SLICE))
            if got:
                return got
        return []

    async def receive_async(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JsMessage]:
        consumers = self._ready(invisible_duration)
        if len(consumers) == 1:
            return await consumers[0].fetch_async(max_messages, self._wait)
        deadline = time.monotonic() + self._wait
        for c in consumers:
            got = await c.fetch_async(max_messages, 0.0)
            if got:
                return got
        while (left := deadline - time.monotonic()) > 0:
            got = await self._turn(consumers).fetch_async(max_messages, min(left, _SLICE))
            if got:
                return got
        return []

    def ack(self, message: object) -> None:
        messages = _messages(message)
        if messages:
            # Plain acks, then a confirmed one: one round trip confirms them all.
            self._ready(None)[0].ack_all(messages)

    async def ack_async(self, message: object) -> None:
        await asyncio.gather(*(m.ack_async() for m in _messages(message)))

    def change_invisible_duration(self, message: object, duration: float | timedelta) -> None:
        (m,) = _messages(message)
        m.nak(duration)

    async def change_invisible_duration_async(
        self, message: object, duration: float | timedelta
    ) -> None:
        (m,) = _messages(message)
        await m.nak_async(duration)

    # -- introspection --------------------------------------------------------------------

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._consumers else "new")
        return (
            f"SimpleConsumer(endpoints={self._js.endpoints!r}, protocol='nats', "
            f"group={self._group!r}, subjects={self._topics!r}, {state})"
        )
