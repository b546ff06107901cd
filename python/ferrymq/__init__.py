"""ferrymq: a fast, fault-tolerant messaging client for Python with a Rust core.

Backends: Apache RocketMQ 5 (gRPC, protocol v2, and the classic remoting protocol), JMQ4
(JoyQueue) and NATS JetStream, plus an
embedded broker for development and tests (:mod:`ferrymq.testing`).
"""

from __future__ import annotations

import logging as _logging

from . import _native
from ._native import (
    ConsumeResult,
    Credentials,
    FilterExpression,
    JetStream,
    JmqSendReceipt,
    Message,
    MessageView,
    NatsSendReceipt,
    PublishAck,
    SendReceipt,
    StreamInfo,
    TlsConfig,
    Transaction,
)
from ._views import Receipt, ReceivedMessage
from .consumer import PushConsumer, SimpleConsumer
from .exceptions import (
    BrokerError,
    ClientClosedError,
    FerryConnectionError,
    FerryError,
    FerryTimeoutError,
    FlowControlError,
    InternalError,
    InvalidArgumentError,
    ProtocolError,
)
from .interceptors import HookContext, HookPoint, Interceptor
from .producer import DeliveryCallback, Producer, TransactionResolution
from .publisher import AsyncPublisher, Flight, PublisherListener, RetryConfig
from .pull_consumer import MessageQueue, PullConsumer

__version__: str = _native.__version__

__all__ = [
    "AsyncPublisher",
    "BrokerError",
    "ClientClosedError",
    "ConsumeResult",
    "Credentials",
    "DeliveryCallback",
    "FerryConnectionError",
    "FerryError",
    "FerryTimeoutError",
    "FilterExpression",
    "Flight",
    "FlowControlError",
    "HookContext",
    "HookPoint",
    "Interceptor",
    "InternalError",
    "InvalidArgumentError",
    "JetStream",
    "JmqSendReceipt",
    "Message",
    "MessageQueue",
    "MessageView",
    "NatsSendReceipt",
    "Producer",
    "ProtocolError",
    "PublishAck",
    "PublisherListener",
    "PullConsumer",
    "PushConsumer",
    "Receipt",
    "ReceivedMessage",
    "RetryConfig",
    "SendReceipt",
    "SimpleConsumer",
    "StreamInfo",
    "TlsConfig",
    "Transaction",
    "TransactionResolution",
    "__version__",
    "features",
    "sync_log_level",
]


def features() -> list[str]:
    """The features compiled into this build of the native core."""
    return list(_native.features())


def sync_log_level() -> None:
    """Re-read the effective level of the ``ferrymq`` logger and apply it to the Rust core.

    Rust log events below that level are discarded without taking the GIL. ferrymq calls this
    at import and whenever a client is created; call it yourself after changing the level of the
    ``ferrymq`` logger while clients are running.
    """
    _native.set_log_level(_logging.getLogger("ferrymq").getEffectiveLevel())


sync_log_level()
