"""The one place that reads an endpoint string and says which protocol it names.

Every public class (``Producer``, the consumers, ``PullConsumer``) and the Spark data source ask
:func:`protocol_of`, so the same string means the same thing everywhere:

========================================================  ============
endpoints                                                 protocol
========================================================  ============
``host:port[;host:port]``, ``rocketmq://``, ``grpc://``,   ``rocketmq`` (RocketMQ 5 proxy, gRPC;
``http://``; TLS: ``rocketmqs://``, ``grpcs://``,          the ``s`` forms use TLS)
``https://``
``remoting://host:port[;host:port]``                       ``remoting`` (RocketMQ name servers)
``jmq://host:port``                                        ``jmq`` (JMQ4 / JoyQueue)
``nats://``                                                ``nats`` (NATS JetStream)
========================================================  ============
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from .exceptions import InvalidArgumentError

__all__ = ["Protocol", "first_endpoint", "protocol_of"]

Protocol = Literal["rocketmq", "remoting", "jmq", "nats"]

_SCHEMES: dict[str, Protocol] = {
    "": "rocketmq",
    "rocketmq": "rocketmq",
    "rocketmqs": "rocketmq",
    "grpc": "rocketmq",
    "grpcs": "rocketmq",
    "http": "rocketmq",
    "https": "rocketmq",
    "remoting": "remoting",
    "jmq": "jmq",
    "nats": "nats",
}


def _items(endpoints: object, field: str) -> list[str]:
    if isinstance(endpoints, str):
        items = [endpoints]
    elif isinstance(endpoints, Iterable) and not isinstance(
        endpoints, (bytes, bytearray, memoryview, Mapping)
    ):
        items = list(endpoints)
    else:
        raise InvalidArgumentError(
            f'{field}: must be a str like "host:port" or a list of them, '
            f"not {type(endpoints).__name__}"
        )
    if not items:
        raise InvalidArgumentError(f"{field}: names no endpoint")
    for e in items:
        if not isinstance(e, str):
            raise InvalidArgumentError(
                f"{field}: every endpoint must be a str, not {type(e).__name__}"
            )
        if not e.strip():
            raise InvalidArgumentError(f"{field}: an endpoint is empty")
    return items


def first_endpoint(endpoints: str | Iterable[str], field: str = "endpoints") -> str:
    """The first endpoint of ``endpoints`` (validated as in :func:`protocol_of`)."""
    return _items(endpoints, field)[0].strip()


def protocol_of(endpoints: str | Iterable[str], field: str = "endpoints") -> Protocol:
    """The protocol ``endpoints`` names, by scheme (see the module docs). Raises
    ``InvalidArgumentError`` naming ``field`` for a wrong type, an empty value, an unknown
    scheme or endpoints of different protocols."""
    found: set[Protocol] = set()
    for item in _items(endpoints, field):
        # A scheme applies to the whole "scheme://a:1;b:2" list it starts.
        item = item.strip()
        scheme = item.split("://", 1)[0].lower() if "://" in item else ""
        protocol = _SCHEMES.get(scheme)
        if protocol is None:
            known = ", ".join(f"{s}://" for s in sorted(_SCHEMES) if s)
            raise InvalidArgumentError(
                f"{field}: unsupported scheme {scheme!r} in {item!r} (host:port or one of {known})"
            )
        found.add(protocol)
    if len(found) != 1:
        raise InvalidArgumentError(
            f"{field}: {endpoints!r} mixes protocols ({', '.join(sorted(found)) or 'none'})"
        )
    return found.pop()
