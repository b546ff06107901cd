"""The typed interface every backend's receipts and received messages share.

``Producer.send`` returns a :class:`Receipt` whatever the protocol, and the consumers hand
out :class:`ferrymq.MessageView` on every protocol (:class:`ReceivedMessage` is the interface
it implements); the concrete receipt classes add what their protocol has:

==========================  ===================================  ==============================
protocol                    receipt                              received message
==========================  ===================================  ==============================
RocketMQ 5, remoting        :class:`ferrymq.SendReceipt`         :class:`ferrymq.MessageView`
                            (queue, offset, recall handle …)     (queue, offset, receipt …)
JMQ4                        :class:`ferrymq.JmqSendReceipt`      :class:`ferrymq.MessageView`
                            (partition, index, broker)           (queue_id = partition …)
NATS JetStream              :class:`ferrymq.NatsSendReceipt`     :class:`ferrymq.MessageView`
                            (stream, sequence, duplicate)        (offset = stream sequence)
==========================  ===================================  ==============================

Narrow a receipt with ``isinstance`` to reach a protocol's own fields.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ReceivedMessage", "Receipt"]


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
    def trace_context(self) -> str | None:
        """The W3C ``traceparent`` the producer propagated, as received, or None (RocketMQ:
        the ``trace_context`` field, else a ``traceparent`` property as OpenTelemetry's Java
        instrumentation writes it; NATS: the header; JMQ4: the attribute)."""
        ...

    @property
    def trace_state(self) -> str | None:
        """The W3C ``tracestate`` that came with the trace context, or None."""
        ...

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
