"""The interface :class:`ferrymq.Producer` drives, whatever the protocol behind it.

``_native.RocketMQProducer`` (RocketMQ 5), :class:`ferrymq._remoting.RemotingBackend`,
:class:`ferrymq._jmq.JmqBackend` and :class:`ferrymq._nats.NatsBackend` all satisfy
:class:`ProducerBackend`; mypy checks it where the facade picks one, so a backend whose methods
drift from the others fails the type check instead of being cast over. :class:`PyBackend` holds
what the backends written in Python share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from ._native import Message
from ._views import Receipt
from .exceptions import InvalidArgumentError

__all__ = ["ProducerBackend", "ProducerTransaction", "PyBackend"]


class ProducerTransaction(Protocol):
    """A transaction of any protocol: ``send`` half messages, then ``commit`` or ``rollback``
    (as a context manager: commit on success, roll back on an exception)."""

    def send(self, message: Message) -> Receipt: ...
    def send_async(self, message: Message) -> Awaitable[Receipt]: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def commit_async(self) -> Awaitable[None]: ...
    def rollback_async(self) -> Awaitable[None]: ...
    @property
    def receipts(self) -> Sequence[Receipt]: ...
    def __enter__(self) -> ProducerTransaction: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> object: ...


class ProducerBackend(Protocol):
    def start(self) -> None: ...
    def start_async(self) -> Awaitable[None]: ...
    def close(self) -> None: ...
    def close_async(self) -> Awaitable[None]: ...
    @property
    def started(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def send(self, message: Message) -> Receipt: ...
    def send_async(self, message: Message) -> Awaitable[Receipt]: ...
    def send_batch(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> Sequence[Receipt]: ...
    def send_batch_async(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> Awaitable[Sequence[Receipt]]: ...
    def produce(
        self, message: Message, on_delivery: Callable[..., object] | None = None
    ) -> None: ...
    def poll(self, timeout: float | timedelta = 0.0) -> int: ...
    def flush(self, timeout: float | timedelta | None = None) -> int: ...
    def begin_transaction(self) -> ProducerTransaction: ...
    def recall(self, topic: str, recall_handle: str) -> str: ...
    def recall_async(self, topic: str, recall_handle: str) -> Awaitable[str]: ...
    @property
    def pending(self) -> int: ...
    @property
    def client_id(self) -> str: ...
    @property
    def endpoints(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def isolated_endpoints(self) -> list[str]: ...
    @property
    def settings(self) -> dict[str, Any]: ...


class PyBackend:
    """Base of the producer backends written in Python (``jmq://``, ``nats://``,
    ``remoting://``): the lifecycle flags, and the answers of a protocol that isolates no
    endpoint and has no delayed messages to recall."""

    #: The message of the ``InvalidArgumentError`` that ``recall`` raises.
    _no_recall = "recall: this protocol has no delayed messages to recall"
    _namespace = ""
    _started = False
    _closed = False

    @property
    def started(self) -> bool:
        return self._started

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def client_id(self) -> str:
        return ""

    @property
    def isolated_endpoints(self) -> list[str]:
        return []

    def recall(self, topic: str, recall_handle: str) -> str:
        raise InvalidArgumentError(self._no_recall)

    async def recall_async(self, topic: str, recall_handle: str) -> str:
        raise InvalidArgumentError(self._no_recall)
