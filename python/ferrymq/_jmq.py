"""The JMQ4 (JoyQueue) backend of :class:`ferrymq.Producer`, chosen by ``jmq://host:port``.

It adapts :class:`ferrymq.JmqProducer` to the interface the facade drives, where the concepts
match: ``send``/``send_batch`` (and ``_async``), ``produce`` + ``poll``/``flush`` callbacks,
``begin_transaction``. Differences, by protocol:

* a JMQ4 transaction belongs to one topic, so :meth:`JmqBackend.begin_transaction` returns a
  transaction whose topic is fixed (and PREPARE sent) by its first ``send``;
* the transaction checker receives a :class:`JmqOrphan` (topic, broker tx id, your
  ``transaction_id``) instead of a RocketMQ ``MessageView``; it answers a
  :class:`ferrymq.TransactionResolution` as for RocketMQ;
* ``produce`` goes through the same batched produce path as RocketMQ's (one batch
  ``PRODUCE_MESSAGE`` per chunk of a topic); reports come back through ``poll``/``flush``;
* ``recall`` does not exist (JMQ4 has no delayed messages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from . import _native
from ._args import as_list, as_message, known_options
from ._backend import PyBackend
from ._endpoints import first_endpoint
from ._native import JmqSendReceipt, Message
from .exceptions import FerryError, InvalidArgumentError

#: ``on_delivery(err, receipt)`` of ``produce``.
Callback = Callable[[FerryError | None, Any], object]

__all__ = ["JmqBackend", "JmqOrphan"]


#: The :class:`ferrymq.JmqProducer` options ``Producer`` passes through ``jmq_options``.
PRODUCER_OPTIONS = frozenset(
    {
        "region",
        "qos",
        "compression",
        "compress_threshold",
        "send_timeout",
        "max_body",
        "transaction_timeout",
        "transaction_topics",
        "feedback_interval",
        "metadata_refresh",
        "client_ip",
    }
)


@dataclasses.dataclass(frozen=True)
class JmqOrphan:
    """An expired JMQ4 transaction offered to the transaction checker."""

    topic: str
    tx_id: str
    transaction_id: str


def _checker(
    checker: Callable[[Any], object] | None,
) -> Callable[[str, str, str], str | None] | None:
    if checker is None:
        return None

    def check(topic: str, tx_id: str, transaction_id: str) -> str | None:
        answer = checker(JmqOrphan(topic, tx_id, transaction_id))
        value = getattr(answer, "value", answer)
        if value in ("commit", "rollback"):
            return str(value)
        return None

    return check


def _topic_of(value: object) -> str:
    """The topic of a message sent in a transaction (the first one opens it on its topic)."""
    return as_message(value).topic


class _Transaction:
    """A JMQ4 transaction whose topic is set by the first ``send``."""

    def __init__(self, producer: _native.JmqProducer) -> None:
        self._producer = producer
        self._tx: _native.JmqTransaction | None = None
        self._receipts: list[JmqSendReceipt] = []
        self._done = False

    def _open(self, topic: str) -> _native.JmqTransaction:
        if self._tx is None:
            self._tx = self._producer.begin_transaction(topic)
        return self._tx

    def send(self, message: Message) -> JmqSendReceipt:
        receipt = self._open(_topic_of(message)).send(message)[0]
        self._receipts.append(receipt)
        return receipt

    async def send_async(self, message: Message) -> JmqSendReceipt:
        if self._tx is None:
            self._tx = await self._producer.begin_transaction_async(_topic_of(message))
        receipt = (await self._tx.send_async(message))[0]
        self._receipts.append(receipt)
        return receipt

    def commit(self) -> None:
        if self._tx is not None:
            self._tx.commit()
        self._done = True

    def rollback(self) -> None:
        if self._tx is not None:
            self._tx.rollback()
        self._done = True

    async def commit_async(self) -> None:
        if self._tx is not None:
            await self._tx.commit_async()
        self._done = True

    async def rollback_async(self) -> None:
        if self._tx is not None:
            await self._tx.rollback_async()
        self._done = True

    @property
    def receipts(self) -> list[JmqSendReceipt]:
        return list(self._receipts)

    def __enter__(self) -> _Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._done:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()


class JmqBackend(PyBackend):
    """:class:`ferrymq.Producer` over JMQ4."""

    _no_recall = "recall: JMQ4 has no delayed messages to recall"

    def __init__(
        self,
        endpoints: str | Iterable[str],
        *,
        app: str | None,
        token: str | None,
        namespace: str | None = None,
        request_timeout: float | timedelta | None = None,
        max_attempts: int | None = None,
        transaction_checker: Callable[[Any], object] | None = None,
        max_pending: int = 65536,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if not app:
            raise InvalidArgumentError("app: a jmq:// endpoint needs app= and token=")
        if not token:
            raise InvalidArgumentError("token: a jmq:// endpoint needs app= and token=")
        self._namespace = namespace or ""
        extra = known_options("jmq_options", options, PRODUCER_OPTIONS)
        self._native = _native.JmqProducer(
            first_endpoint(endpoints),
            app=app,
            token=token,
            namespace=namespace,
            request_timeout=10.0 if request_timeout is None else request_timeout,
            max_attempts=max_attempts if max_attempts is not None else 3,
            transaction_checker=_checker(transaction_checker),
            max_pending=max_pending,
            **extra,
        )
        self._app = app

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._native.start()
        self._started = True

    async def start_async(self) -> None:
        await self._native.start_async()
        self._started = True

    def close(self) -> None:
        self._native.close()

    async def close_async(self) -> None:
        await self._native.close_async()

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def native(self) -> _native.JmqProducer:
        """The :class:`ferrymq.JmqProducer` (for :class:`ferrymq.AsyncPublisher`)."""
        return self._native

    # -- sending --------------------------------------------------------------------------

    def send(self, message: Message) -> JmqSendReceipt:
        return self._native.send(message)

    async def send_async(self, message: Message) -> JmqSendReceipt:
        return await self._native.send_async(message)

    def send_batch(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[JmqSendReceipt]:
        # A JMQ4 batch is always one MESSAGE per topic, each message keeping its businessId.
        del packed
        return self._native.send_batch(
            as_list(messages, "messages", "an iterable of ferrymq.Message")
        )

    async def send_batch_async(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[JmqSendReceipt]:
        del packed
        return await self._native.send_batch_async(
            as_list(messages, "messages", "an iterable of ferrymq.Message")
        )

    def produce(self, message: Message, on_delivery: Callback | None = None) -> None:
        self._native.produce(message, on_delivery)

    def poll(self, timeout: float | timedelta = 0.0) -> int:
        return self._native.poll(timeout)

    def flush(self, timeout: float | timedelta | None = None) -> int:
        return self._native.flush(timeout)

    def begin_transaction(self) -> _Transaction:
        return _Transaction(self._native)

    # -- introspection --------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return self._native.pending

    @property
    def client_id(self) -> str:
        return f"jmq:{self._app}"

    @property
    def endpoints(self) -> str:
        return self._native.endpoint

    @property
    def settings(self) -> dict[str, Any]:
        return {"protocol": "jmq4", "endpoint": self._native.endpoint, "app": self._app}

    def __repr__(self) -> str:
        return f"Producer(endpoint={self._native.endpoint!r}, protocol='jmq4', app={self._app!r})"
