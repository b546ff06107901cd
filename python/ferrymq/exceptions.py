"""The exception tree of ferrymq.

Every error raised by ferrymq is a :class:`FerryError`. Errors that correspond to a builtin
category also inherit from it (``InvalidArgumentError`` is a ``ValueError``,
``FerryTimeoutError`` a ``TimeoutError``, ``FerryConnectionError`` a ``ConnectionError``), so
generic handlers keep working.

The Rust core maps its errors onto these classes in one place (``errors.rs`` in the binding).
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "ClientClosedError",
    "FerryConnectionError",
    "FerryError",
    "FerryTimeoutError",
    "FlowControlError",
    "InternalError",
    "InvalidArgumentError",
    "ProtocolError",
]


class FerryError(Exception):
    """Root of every ferrymq error.

    Attributes:
        retriable: whether retrying the same operation may succeed.
        code: the broker status code, when a broker answered with one (else ``None``).
        code_name: the symbolic name of ``code`` (for RocketMQ, the ``apache.rocketmq.v2.Code``).
        protocol: ``"rocketmq"``, ``"jmq"`` or ``"nats"`` when ``code`` is set.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        code_name: str | None = None,
        protocol: str | None = None,
        retriable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.code_name = code_name
        self.protocol = protocol
        self.retriable = retriable


class FerryConnectionError(FerryError, ConnectionError):
    """The broker could not be reached, or the connection broke."""


class FerryTimeoutError(FerryError, TimeoutError):
    """A deadline passed before the broker answered."""


class ProtocolError(FerryError):
    """Bytes on the wire did not decode, or the peer broke the protocol."""


class BrokerError(FerryError):
    """The broker answered with a non-OK status; see ``code``, ``code_name`` and ``retriable``."""


class FlowControlError(BrokerError):
    """The broker throttled the request (RocketMQ ``TOO_MANY_REQUESTS``)."""


class InvalidArgumentError(FerryError, ValueError):
    """The caller passed something invalid; nothing was sent."""


class ClientClosedError(FerryError):
    """The client is closed, or was created in the parent of a forked process."""


class InternalError(FerryError):
    """A bug inside ferrymq (for example a Rust panic); please report it."""
