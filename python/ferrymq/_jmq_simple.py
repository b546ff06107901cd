"""The jmq:// (JMQ4, JoyQueue) side of :class:`ferrymq.SimpleConsumer` and
:class:`ferrymq.PushConsumer`: the checks of their arguments (:func:`jmq_consumer`, shared by
both), and the simple consumer's backend over :class:`ferrymq.JmqConsumer`. A jmq:// push
consumer is the native push engine (``_native.PushConsumer(..., jmq=JmqConsumer(...))``), as for
RocketMQ.

Where the concepts match, the RocketMQ names are kept: ``receive``/``ack`` (and ``_async``),
the listener with ``ConsumeResult``, ``close`` waiting for callbacks. Where they differ:

* the consumer is identified by its JMQ4 **app**: pass it as ``group`` (``app=`` may repeat it)
  with ``token=``;
* subscriptions are topics fixed at construction; JMQ4 has no tag or SQL filters, so only
  ``None`` / ``"*"`` filters are accepted, and ``subscribe``/``unsubscribe`` raise;
* the simple consumer's messages are :class:`ferrymq.JmqMessage` objects, which also answer to
  the :class:`ferrymq.MessageView` names (``queue_id`` = partition, ``offset`` = index,
  ``delivery_attempt`` = 1, or 2 for a delivery from the retry queue); a push consumer's
  listener receives :class:`ferrymq.MessageView` with the same values;
* ``invisible_duration`` is the fetch's ack timeout. The broker keeps the whole *partition*
  occupied until the fetch is acked, and the first ack releases it: ack the messages of one
  ``receive`` together (``ack(list)``), or the rest may be delivered again (the push consumer
  settles each fetch in one request by itself);
* ``change_invisible_duration`` has no JMQ4 equivalent and raises; ``nack`` (COMMIT_ACK with a
  retry type) sends messages to the broker's retry queue, from which they come back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, NoReturn

from . import _native
from ._args import known_options, nonblank
from ._endpoints import first_endpoint
from ._native import FilterExpression, JmqMessage
from .exceptions import InvalidArgumentError

__all__ = ["FixedSubscriptions", "JmqSimpleBackend", "jmq_consumer"]


#: The :class:`ferrymq.JmqConsumer` options a facade passes through ``jmq_options``.
CONSUMER_OPTIONS = frozenset(
    {
        "mode",
        "region",
        "ack_timeout",
        "long_poll",
        "session_timeout",
        "metadata_refresh",
        "client_ip",
    }
)

#: Default long-polling time of ``SimpleConsumer.receive`` (as for RocketMQ).
DEFAULT_AWAIT = 20.0


def _seconds(field: str, v: float | timedelta | None, default: float) -> float:
    """A duration argument checked by the binding's one converter (0 allowed)."""
    return default if v is None else _native.seconds(field, v, zero=True)


def _is_all(f: object) -> bool:
    if f is None or f == "*" or f == "":
        return True
    if isinstance(f, FilterExpression):
        return f.type == "TAG" and f.expression == "*"
    return False


def _topics(subscriptions: object) -> list[str]:
    if subscriptions is None:
        raise InvalidArgumentError(
            "subscriptions: a jmq:// consumer needs its topics at construction"
        )
    if isinstance(subscriptions, str):
        topics = [subscriptions]
    elif isinstance(subscriptions, Mapping):
        topics = []
        for topic, f in subscriptions.items():
            if not _is_all(f):
                raise InvalidArgumentError(
                    f"subscriptions: JMQ4 has no tag or SQL filters (topic {topic!r} has {f!r}); "
                    "subscribe with None or '*'"
                )
            topics.append(topic)
    else:
        try:
            topics = list(subscriptions)  # type: ignore[call-overload]
        except TypeError:
            raise InvalidArgumentError(
                "subscriptions: must be a topic, a list of topics or a {topic: filter} mapping"
            ) from None
    if not topics or not all(isinstance(t, str) for t in topics):
        raise InvalidArgumentError("subscriptions: name at least one topic (str)")
    return topics


def jmq_consumer(
    endpoints: str | Iterable[str],
    group: str,
    *,
    subscriptions: object,
    app: str | None,
    token: str | None,
    namespace: str | None,
    request_timeout: float | timedelta | None,
    credentials: object,
    tls: object,
    options: Mapping[str, Any] | None,
) -> _native.JmqConsumer:
    """Check the facade's arguments for ``jmq://``; the (unconnected) consumer they make."""
    nonblank(group, "must not be blank (for jmq:// it is the JMQ4 app)")
    if app is not None and app != group:
        raise InvalidArgumentError(
            f"app: a JMQ4 consumer is identified by its app, which is the group ({group!r}); "
            f"app={app!r} differs"
        )
    if not token:
        raise InvalidArgumentError("token: a jmq:// endpoint needs token= (the app's token)")
    if credentials is not None:
        raise InvalidArgumentError("credentials: a jmq:// endpoint authenticates with token=")
    if tls:
        raise InvalidArgumentError("tls: ferrymq's JMQ4 client has no TLS")
    extra = known_options("jmq_options", options, CONSUMER_OPTIONS)
    topics = _topics(subscriptions)
    return _native.JmqConsumer(
        first_endpoint(endpoints),
        topics,
        app=group,
        token=token,
        namespace=namespace,
        request_timeout=request_timeout,
        **extra,
    )


def _invisible(v: float | timedelta | None) -> float | None:
    return None if v is None else _seconds("invisible_duration", v, 0.0)


def _no_change_invisible() -> InvalidArgumentError:
    return InvalidArgumentError(
        "change_invisible_duration: JMQ4 has no per-message invisible time (a fetch occupies "
        "its partition for the ack timeout); use nack() for a redelivery, or a longer "
        "invisible_duration in receive()"
    )


class FixedSubscriptions:
    """Base of the simple consumer backends whose topics are fixed at construction (``jmq://``,
    ``nats://``): ``subscribe``/``unsubscribe`` raise, every topic reads all its messages, and
    the client id is ``<scheme>:<group>``."""

    #: The scheme, and what the protocol calls a topic.
    _scheme, _topic_word = "jmq", "topics"
    _group: str
    _topics: list[str]

    def _no_subscribe(self, what: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"{what}: a {self._scheme}:// consumer's {self._topic_word} are fixed at construction"
        )

    def subscribe(self, topic: str, filter: object = None) -> NoReturn:
        raise self._no_subscribe("subscribe")

    def unsubscribe(self, topic: str) -> NoReturn:
        raise self._no_subscribe("unsubscribe")

    @property
    def group(self) -> str:
        return self._group

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        return {t: FilterExpression.all() for t in self._topics}

    @property
    def client_id(self) -> str | None:
        return f"{self._scheme}:{self._group}"


class JmqSimpleBackend(FixedSubscriptions):
    """:class:`ferrymq.SimpleConsumer` over JMQ4."""

    def __init__(
        self, native: _native.JmqConsumer, group: str, await_duration: float | timedelta | None
    ) -> None:
        self._wait = _seconds("await_duration", await_duration, DEFAULT_AWAIT)
        self._group = group
        self._topics = native.topics
        self._native = native

    @property
    def native(self) -> _native.JmqConsumer:
        return self._native

    def start(self) -> None:
        self._native.start()

    async def start_async(self) -> None:
        await self._native.start_async()

    def receive(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JmqMessage]:
        return self._native.receive(
            max_messages, self._wait, ack_timeout=_invisible(invisible_duration)
        )

    async def receive_async(
        self, max_messages: int = 16, invisible_duration: float | timedelta | None = None
    ) -> list[JmqMessage]:
        return await self._native.receive_async(
            max_messages, self._wait, ack_timeout=_invisible(invisible_duration)
        )

    def ack(self, message: JmqMessage | Iterable[JmqMessage]) -> None:
        self._native.ack(message)

    async def ack_async(self, message: JmqMessage | Iterable[JmqMessage]) -> None:
        await self._native.ack_async(message)

    def change_invisible_duration(self, message: object, duration: object) -> NoReturn:
        raise _no_change_invisible()

    async def change_invisible_duration_async(self, message: object, duration: object) -> NoReturn:
        raise _no_change_invisible()

    def close(self) -> None:
        self._native.close()

    async def close_async(self) -> None:
        await self._native.close_async()

    def __repr__(self) -> str:
        state = "closed" if self._native.closed else "open"
        return (
            f"SimpleConsumer(endpoint={self._native.endpoint!r}, protocol='jmq4', "
            f"app={self._group!r}, topics={self._native.topics!r}, {state})"
        )
