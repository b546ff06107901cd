"""The typed interface every backend's receipts and received messages share.

``Producer.send`` returns a :class:`Receipt` and the consumers hand out
:class:`ReceivedMessage` views whatever the protocol; the concrete classes add what their
protocol has:

==========================  ===================================  ==============================
protocol                    receipt                              received message
==========================  ===================================  ==============================
RocketMQ 5, remoting        :class:`ferrymq.SendReceipt`         :class:`ferrymq.MessageView`
                            (queue, offset, recall handle …)     (queue, offset, receipt …)
JMQ4                        :class:`ferrymq.JmqSendReceipt`      :class:`ferrymq.JmqMessage`
                            (partition, index, broker)           (partition, index, app …)
NATS JetStream              :class:`ferrymq.NatsSendReceipt`     :class:`ferrymq.JsMessage`
                            (stream, sequence, duplicate)        (stream, sequence, headers …)
==========================  ===================================  ==============================

Narrow with ``isinstance`` to reach a protocol's own fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar, runtime_checkable

from .exceptions import InvalidArgumentError

__all__ = ["ReceivedMessage", "Receipt", "only"]


@runtime_checkable
class Receipt(Protocol):
    """What a broker answered for one stored message, on every protocol."""

    @property
    def message_id(self) -> str:
        """The id consumers see (NATS: the ``Nats-Msg-Id`` it was deduplicated by)."""
        ...

    @property
    def topic(self) -> str:
        """The topic (NATS: the subject) the message was sent to."""
        ...


@runtime_checkable
class ReceivedMessage(Protocol):
    """A consumed message, on every protocol."""

    @property
    def message_id(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def message_group(self) -> str | None: ...
    @property
    def delivery_attempt(self) -> int:
        """1 on the first delivery, then counting redeliveries."""
        ...

    @property
    def born_timestamp(self) -> float | None:
        """Unix seconds the producer sent it at, if known."""
        ...

    @property
    def store_timestamp(self) -> float | None:
        """Unix seconds the broker stored it at, if known."""
        ...

    def __len__(self) -> int: ...


T = TypeVar("T")


def only(kind: type[T], message: object, field: str, owner: str) -> list[T]:
    """``message`` (one ``kind`` or an iterable of them) as a list; anything else raises
    ``InvalidArgumentError`` naming ``field`` and what ``owner`` takes instead."""
    if isinstance(message, kind):
        return [message]
    if isinstance(message, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        message, Iterable
    ):
        items: list[object] = [message]
    else:
        items = list(message)
    for m in items:
        if not isinstance(m, kind):
            raise InvalidArgumentError(
                f"{field}: {owner} takes ferrymq.{kind.__name__} (or an iterable of them), "
                f"not {type(m).__name__}"
            )
    return [m for m in items if isinstance(m, kind)]
