"""The NATS JetStream backend of :class:`ferrymq.Producer`, chosen by ``nats://``.

It drives the binding's :class:`ferrymq.JetStream` client (one NATS implementation): ``send``
is ``JetStream.publish`` of a :class:`ferrymq.Message` (subject = topic, properties as headers,
a fresh ``Nats-Msg-Id`` per call, which the receipt's ``message_id`` reports) and its receipt
a :class:`NatsSendReceipt`. Ids chosen by the caller (de-duplication across retries) are
:class:`ferrymq.AsyncPublisher`'s, which works over this producer too. Differences, by protocol:

* ``start()`` connects; the constructor only checks the arguments (as ``JetStream``'s does);
* ``send_batch`` publishes the messages one after the other and waits for each ack (``_async``:
  all at once); ``packed`` changes nothing;
* ``produce`` goes through the same batched produce path as RocketMQ's (``JetStream.produce``:
  publishes in produce order, acks awaited together); reports come back through
  ``poll``/``flush``;
* no transactions, no ``recall``, no namespace; streams are managed with
  :class:`ferrymq.JetStream` (``create_stream`` …).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from . import _native
from ._args import as_list, as_message
from ._backend import PyBackend
from ._native import Message, PublishAck
from .exceptions import ClientClosedError, FerryError, InvalidArgumentError

#: ``on_delivery(err, receipt)`` of ``produce``.
Callback = Callable[[FerryError | None, Any], object]

__all__ = ["NatsBackend", "NatsSendReceipt", "user_password"]


def user_password(credentials: object) -> tuple[str | None, str | None]:
    """``credentials`` of a ``nats://`` facade: ``None`` or ``(user, password)``."""
    if credentials is None:
        return None, None
    if not (
        isinstance(credentials, tuple)
        and len(credentials) == 2
        and all(isinstance(c, str) for c in credentials)
    ):
        raise InvalidArgumentError(
            "credentials: a nats:// endpoint takes (user, password) or token="
        )
    user, password = credentials
    return user, password


@dataclasses.dataclass(frozen=True)
class NatsSendReceipt:
    """What JetStream answered for one message sent with ``Producer("nats://…")``."""

    #: The ``Nats-Msg-Id`` the message was published (and de-duplicated) with.
    message_id: str
    #: The subject (the message's topic).
    topic: str
    #: The stream that stored it.
    stream: str
    #: Its stream sequence.
    sequence: int
    #: True when the stream recognised the id as a duplicate and did not store it again.
    duplicate: bool
    #: The JetStream domain, if any.
    domain: str | None

    @classmethod
    def of(cls, topic: str, ack: PublishAck) -> NatsSendReceipt:
        return cls(ack.message_id, topic, ack.stream, ack.sequence, ack.duplicate, ack.domain)


class NatsBackend(PyBackend):
    """:class:`ferrymq.Producer` over NATS JetStream."""

    _no_recall = "recall: NATS JetStream has no delayed messages to recall"

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        credentials: object,
        token: str | None,
        request_timeout: float | timedelta | None,
        max_pending: int,
    ) -> None:
        user, password = user_password(credentials)
        # checks the arguments; connects in start()
        self._js = _native.JetStream(
            endpoints if isinstance(endpoints, str) else list(endpoints),
            user=user,
            password=password,
            token=token,
            request_timeout=5.0 if request_timeout is None else request_timeout,
            max_pending=max_pending,
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _connected(self) -> _native.JetStream:
        if self._closed:
            raise ClientClosedError("the client is closed")
        if not self._started:
            raise ClientClosedError("the client is not started; call start() first")
        return self._js

    def start(self) -> None:
        self._js.start()
        self._started = True

    async def start_async(self) -> None:
        await self._js.start_async()
        self._started = True

    def close(self) -> None:
        self._closed = True
        self._js.close()

    async def close_async(self) -> None:
        self._closed = True
        await self._js.close_async()

    @property
    def native(self) -> _native.JetStream:
        """The connected :class:`ferrymq.JetStream` (for :class:`ferrymq.AsyncPublisher`)."""
        return self._connected()

    # -- sending --------------------------------------------------------------------------

    def send(self, message: Message) -> NatsSendReceipt:
        m = as_message(message)
        return NatsSendReceipt.of(m.topic, self._connected().publish(m))

    async def send_async(self, message: Message) -> NatsSendReceipt:
        m = as_message(message)
        return NatsSendReceipt.of(m.topic, await self._connected().publish_async(m))

    def send_batch(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[NatsSendReceipt]:
        del packed
        batch = as_list(messages, "messages", "an iterable of ferrymq.Message")
        return [self.send(m) for m in batch]

    async def send_batch_async(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[NatsSendReceipt]:
        del packed
        batch = [
            as_message(m) for m in as_list(messages, "messages", "an iterable of ferrymq.Message")
        ]
        js = self._connected()
        acks = await asyncio.gather(*(js.publish_async(m) for m in batch))
        return [NatsSendReceipt.of(m.topic, a) for m, a in zip(batch, acks, strict=True)]

    def produce(self, message: Message, on_delivery: Callback | None = None) -> None:
        m = as_message(message)
        js = self._connected()
        if on_delivery is None:
            js.produce(m)
            return
        topic = m.topic

        def report(err: FerryError | None, ack: PublishAck | None) -> None:
            on_delivery(err, None if ack is None else NatsSendReceipt.of(topic, ack))

        js.produce(m, report)

    def poll(self, timeout: float | timedelta = 0.0) -> int:
        return self._js.poll(timeout)

    def flush(self, timeout: float | timedelta | None = None) -> int:
        if self._started and not self._closed:
            return self._js.flush(timeout)
        if timeout is not None:
            # Nothing to wait for; the argument is still checked as everywhere.
            _native.seconds("timeout", timeout, zero=True)
        self._js.poll(0.0)
        return self._js.pending

    def begin_transaction(self) -> NoReturn:
        raise InvalidArgumentError("begin_transaction: NATS JetStream has no transactions")

    # -- introspection --------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return self._js.pending

    @property
    def endpoints(self) -> str:
        return self._js.endpoints

    @property
    def settings(self) -> dict[str, Any]:
        return {"protocol": "nats", "endpoints": self.endpoints}

    def __repr__(self) -> str:
        return f"Producer(endpoints={self.endpoints!r}, protocol='nats')"
