"""``ferrymq.PullConsumer``: offset-based consumption, the API of Kafka's ``KafkaConsumer`` and
RocketMQ's ``DefaultLitePullConsumer`` (assign / seek / poll / commit).

Positions live in the client: you assign queues, optionally seek, and ``poll`` returns the
messages after each queue's position, advancing it. ``commit`` stores the group's offsets on the
brokers (where lag tools and a restarted consumer see them). Nothing is acknowledged per
message: replaying is a ``seek``.

It speaks RocketMQ's classic remoting protocol: give the name servers as
``remoting://host:port[;host:port]`` (a stock RocketMQ's name server, 9876 by default; or the
embedded broker's ``remoting_endpoint``). The engine runs in the Rust core; every call here only
converts arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from . import _native
from ._args import as_list, nonblank
from ._endpoints import first_endpoint, protocol_of
from ._lifecycle import Lifecycle
from ._native import Credentials, MessageView
from .exceptions import InvalidArgumentError

__all__ = ["MessageQueue", "PullConsumer"]

_V = TypeVar("_V")


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic: queue ids are per broker, so a queue is (topic, broker, id)."""

    topic: str
    broker: str
    queue_id: int

    @classmethod
    def of(cls, message: MessageView) -> MessageQueue:
        """The queue a polled message came from."""
        return cls(message.topic, message.broker_name, message.queue_id)

    @property
    def key(self) -> str:
        """``"<broker>:<queue id>"``, the partition key of the Spark source's offsets."""
        return f"{self.broker}:{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker}:{self.queue_id}"


def _tuple(q: MessageQueue, name: str = "queue") -> tuple[str, str, int]:
    if not isinstance(q, MessageQueue):
        raise InvalidArgumentError(f"{name}: {q!r} is not a ferrymq.MessageQueue")
    return (q.topic, q.broker, q.queue_id)


def _queues(queues: Iterable[MessageQueue], name: str = "queues") -> list[tuple[str, str, int]]:
    if isinstance(queues, MessageQueue):
        raise InvalidArgumentError(f"{name}: pass a list of MessageQueue, not one")
    return [_tuple(q, name) for q in as_list(queues, name, "an iterable of MessageQueue")]


def _ms(when: float | datetime, queue: MessageQueue) -> int:
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidArgumentError(f"timestamps: {queue}: the datetime needs a timezone")
        return int(when.timestamp() * 1000)
    if isinstance(when, bool) or not isinstance(when, int | float) or not when >= 0:
        raise InvalidArgumentError(
            f"timestamps: {queue}: {when!r} is not Unix seconds or an aware datetime"
        )
    if when > 1e13:
        raise InvalidArgumentError(f"timestamps: {queue}: {when!r} is too far in the future")
    return int(when * 1000)


def _mapping(value: Mapping[MessageQueue, _V], name: str) -> Mapping[MessageQueue, _V]:
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{name}: must be a mapping of MessageQueue to a value, not {type(value).__name__}"
        )
    return value


def _offset_items(offsets: Mapping[MessageQueue, int]) -> list[tuple[tuple[str, str, int], int]]:
    out = []
    for q, off in _mapping(offsets, "offsets").items():
        if isinstance(off, bool) or not isinstance(off, int):
            raise InvalidArgumentError(f"offsets: {q}: {off!r} is not an integer offset")
        if not 0 <= off < 2**63:
            raise InvalidArgumentError(f"offsets: {q}: {off} is not a valid offset")
        out.append((_tuple(q, "offsets"), off))
    return out


class PullConsumer(Lifecycle):
    """Reads queues by offset for one consumer group; thread-safe.

    Args:
        endpoints: ``"remoting://host:port[;host:port]"``: name servers of a RocketMQ cluster.
        group: the consumer group whose offsets :meth:`commit` and :meth:`committed` use.
        tag_filter: ``"*"`` (default) or ``"TagA || TagB"``; filtered messages are skipped.
        auto_offset_reset: where an assigned queue starts when the group committed nothing:
            ``"latest"`` (default: new messages only), ``"earliest"`` or ``"none"`` (poll
            raises until you :meth:`seek`).
        credentials: :class:`Credentials` or ``(access_key, secret_key)``: ACL request signing.
        namespace: RocketMQ namespace.
        request_timeout: seconds (or timedelta) per request (default 3 s).

    Use ``with`` / ``async with`` or call :meth:`close`. Every network method has an
    ``_async`` twin.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        group: str,
        *,
        tag_filter: str | None = None,
        auto_offset_reset: str = "latest",
        credentials: Credentials | tuple[str, str] | tuple[str, str, str] | None = None,
        namespace: str | None = None,
        request_timeout: float | timedelta | None = None,
    ) -> None:
        if protocol_of(endpoints) != "remoting":
            raise InvalidArgumentError(
                f"endpoints: PullConsumer reads RocketMQ over the remoting protocol; give the "
                f"name servers as remoting://host:port (got {first_endpoint(endpoints)!r})"
            )
        nonblank(group, "must be a non-empty string")
        self._native = _native.OffsetConsumer(
            endpoints,
            group,
            tag_filter=tag_filter,
            auto_offset_reset=auto_offset_reset,
            credentials=credentials,
            namespace=namespace,
            request_timeout=request_timeout,
        )

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._native.group

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PullConsumer:
        """Nothing to connect ahead of the first call (connections are made on demand)."""
        return self

    async def start_async(self) -> PullConsumer:
        return self

    def close(self) -> None:
        """Close the connections; later calls raise ``ClientClosedError``. Idempotent."""
        self._native.close()

    async def close_async(self) -> None:
        await self._native.close_async()

    # -- queues and assignment ---------------------------------------------------------------

    def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (every broker's), sorted."""
        return [MessageQueue(*t) for t in self._native.queues(topic)]

    async def queues_async(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(*t) for t in await self._native.queues_async(topic)]

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues from now on (replacing the assignment). Queues that
        stay assigned keep their position."""
        self._native.assign(_queues(queues))

    def assignment(self) -> list[MessageQueue]:
        """The assigned queues."""
        return [MessageQueue(*t) for t in self._native.assignment()]

    # -- positions ---------------------------------------------------------------------------

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Make ``offset`` the next offset :meth:`poll` returns from ``queue`` (assigned)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**63:
            raise InvalidArgumentError(f"offset: {offset!r} is not a non-negative integer")
        self._native.seek(_tuple(queue), offset)

    def seek_to_beginning(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Seek to the first stored offset (every assigned queue by default)."""
        self._native.seek_to_beginning(self._or_assigned(queues))

    async def seek_to_beginning_async(self, queues: Iterable[MessageQueue] | None = None) -> None:
        await self._native.seek_to_beginning_async(self._or_assigned(queues))

    def seek_to_end(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Seek past the last stored message (every assigned queue by default)."""
        self._native.seek_to_end(self._or_assigned(queues))

    async def seek_to_end_async(self, queues: Iterable[MessageQueue] | None = None) -> None:
        await self._native.seek_to_end_async(self._or_assigned(queues))

    def position(self, queue: MessageQueue) -> int:
        """The next offset :meth:`poll` returns from ``queue``."""
        return self._native.position(_tuple(queue))

    async def position_async(self, queue: MessageQueue) -> int:
        return await self._native.position_async(_tuple(queue))

    def beginning_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The first stored offset of each queue."""
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, self._native.beginning_offsets(_queues(qs)), strict=True))

    async def beginning_offsets_async(
        self, queues: Iterable[MessageQueue]
    ) -> dict[MessageQueue, int]:
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, await self._native.beginning_offsets_async(_queues(qs)), strict=True))

    def end_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """The offset the next message of each queue will get."""
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, self._native.end_offsets(_queues(qs)), strict=True))

    async def end_offsets_async(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, await self._native.end_offsets_async(_queues(qs)), strict=True))

    def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, float | datetime]
    ) -> dict[MessageQueue, int | None]:
        """For each queue, the first offset stored at or after the time (Unix seconds or an
        aware ``datetime``), or ``None`` when every stored message is older."""
        items = [
            (_tuple(q, "timestamps"), _ms(t, q))
            for q, t in _mapping(timestamps, "timestamps").items()
        ]
        return dict(zip(timestamps, self._native.offsets_for_times(items), strict=True))

    async def offsets_for_times_async(
        self, timestamps: Mapping[MessageQueue, float | datetime]
    ) -> dict[MessageQueue, int | None]:
        items = [
            (_tuple(q, "timestamps"), _ms(t, q))
            for q, t in _mapping(timestamps, "timestamps").items()
        ]
        found = await self._native.offsets_for_times_async(items)
        return dict(zip(timestamps, found, strict=True))

    # -- consuming ---------------------------------------------------------------------------

    def poll(self, max_messages: int = 16, timeout: float | timedelta = 20.0) -> list[MessageView]:
        """Up to ``max_messages`` messages after the assigned queues' positions, waiting up to
        ``timeout`` when none is available (0: do not wait). ``MessageQueue.of(message)`` and
        ``message.offset`` tell where each came from."""
        return self._native.poll(_max(max_messages), timeout)

    async def poll_async(
        self, max_messages: int = 16, timeout: float | timedelta = 20.0
    ) -> list[MessageView]:
        return await self._native.poll_async(_max(max_messages), timeout)

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Store the group's offsets on the brokers: ``offsets`` (each the next offset to read,
        i.e. the last processed message's offset + 1), or every assigned queue's position."""
        self._native.commit(None if offsets is None else _offset_items(offsets))

    async def commit_async(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        await self._native.commit_async(None if offsets is None else _offset_items(offsets))

    def committed(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
        """The group's committed offset of each queue (``None``: nothing committed)."""
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, self._native.committed(_queues(qs)), strict=True))

    async def committed_async(
        self, queues: Iterable[MessageQueue]
    ) -> dict[MessageQueue, int | None]:
        qs = as_list(queues, "queues", "an iterable of MessageQueue")
        return dict(zip(qs, await self._native.committed_async(_queues(qs)), strict=True))

    def _or_assigned(self, queues: Iterable[MessageQueue] | None) -> list[tuple[str, str, int]]:
        if queues is None:
            return self._native.assignment()
        return _queues(queues)

    def __repr__(self) -> str:
        return f"PullConsumer(group={self.group!r}, assignment={len(self.assignment())} queues)"


def _max(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 65536:
        raise InvalidArgumentError(f"max_messages: {n!r} is not an integer in 1..65536")
    return n
