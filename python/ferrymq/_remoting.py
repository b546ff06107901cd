"""The remoting backend of :class:`ferrymq.Producer` (``remoting://`` endpoints): RocketMQ's
classic TCP protocol, name servers first. A batch travels in ``SEND_BATCH_MESSAGE`` requests in
which every message keeps its own keys, tag, properties and unique id (what a gRPC proxy cannot
carry), so ``send_batch`` is both the fastest way to publish and exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, NoReturn

from . import _native
from ._backend import PyBackend
from ._native import Message, SendReceipt
from .exceptions import InvalidArgumentError

__all__ = ["RemotingBackend"]


_UNSUPPORTED = (
    ": not available over remoting:// (send and send_batch are; use a gRPC "
    "endpoint host:port for transactions, delayed-message recall and produce())"
)


def _unsupported(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(what + _UNSUPPORTED)


class RemotingBackend(PyBackend):
    """:class:`ferrymq.Producer` over the remoting protocol."""

    _no_recall = "recall" + _UNSUPPORTED

    def __init__(
        self,
        endpoints: str | Iterable[str],
        *,
        credentials: Any = None,
        namespace: str | None = None,
        request_timeout: float | timedelta | None = None,
        transaction_checker: Callable[[Any], object] | None = None,
    ) -> None:
        if transaction_checker is not None:
            raise _unsupported("transaction_checker")
        eps = endpoints if isinstance(endpoints, str) else list(endpoints)
        self._native = _native.RemotingProducer(
            eps, credentials=credentials, namespace=namespace, request_timeout=request_timeout
        )
        self._endpoints = eps if isinstance(eps, str) else ";".join(eps)
        self._namespace = namespace or ""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._native.start()
        self._started = True

    async def start_async(self) -> None:
        self.start()

    def close(self) -> None:
        self._native.close()
        self._closed = True

    async def close_async(self) -> None:
        self.close()

    # -- sending --------------------------------------------------------------------------

    def send(self, message: Message) -> SendReceipt:
        return self._native.send(message)

    async def send_async(self, message: Message) -> SendReceipt:
        return await self._native.send_async(message)

    def send_batch(self, messages: Iterable[Message], *, packed: bool = False) -> list[SendReceipt]:
        # A remoting batch always packs many messages per request, each keeping its metadata.
        del packed
        return self._native.send_batch(messages)

    async def send_batch_async(
        self, messages: Iterable[Message], *, packed: bool = False
    ) -> list[SendReceipt]:
        del packed
        return await self._native.send_batch_async(messages)

    def produce(self, message: Message, on_delivery: Callable[..., object] | None = None) -> None:
        raise _unsupported("produce")

    def poll(self, timeout: float | timedelta = 0.0) -> int:
        # nothing is ever produced here; the argument is still checked as everywhere
        _native.seconds("timeout", timeout, zero=True)
        return 0

    def flush(self, timeout: float | timedelta | None = None) -> int:
        if timeout is not None:
            _native.seconds("timeout", timeout, zero=True)
        return 0

    def begin_transaction(self) -> NoReturn:
        raise _unsupported("begin_transaction")

    # -- introspection --------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return 0

    @property
    def endpoints(self) -> str:
        return self._endpoints

    @property
    def settings(self) -> dict[str, Any]:
        return {"protocol": "remoting", "endpoints": self._endpoints}

    def __repr__(self) -> str:
        return f"Producer(endpoints={self._endpoints!r}, protocol='remoting')"
