"""Duration and time arguments: one converter, one rule, no panic across the FFI.

Every duration parameter takes ``int``/``float`` seconds or a ``timedelta``; ``bool``, NaN,
infinities, negative values and anything above ten years are refused with an
``InvalidArgumentError`` naming the parameter. The sweep below feeds adversarial values to each
parameter on live embedded brokers; a ``PanicException`` (a ``BaseException``) or a hang fails.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import ferrymq
from ferrymq import InvalidArgumentError
from ferrymq.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(60)

APP = "test_app"
TOKEN = "test_token"

BAD: list[object] = [
    1e20,
    2**63,
    2**64,
    -(2**63),
    -1,
    float("nan"),
    float("inf"),
    float("-inf"),
    timedelta.max,
    timedelta.min,
    True,
    "1",
]
BAD_IDS = [repr(v)[:24] for v in BAD]


def refused(call: Callable[[], object], field: str) -> None:
    """`call` must raise a ValueError/TypeError naming `field`; never a panic."""
    with pytest.raises(BaseException, match=re.escape(field)) as info:  # a panic too
        call()
    e = info.value
    assert type(e).__name__ != "PanicException", f"panic: {e}"
    assert isinstance(e, (ValueError, TypeError)), repr(e)
    assert field in str(e), f"{field!r} not named in {e}"


@pytest.fixture(scope="module")
def producer(broker: EmbeddedBroker) -> Iterator[ferrymq.Producer]:
    with ferrymq.Producer(broker.endpoints) as p:
        yield p


@pytest.fixture(scope="module")
def jmq_dur_topic(jmq_broker: EmbeddedBroker) -> str:
    jmq_broker.create_topic("dur-jmq")
    return "dur-jmq"


# -- the sweep: case -> (parameter name, call with the broker, the module's client and the value)

Sweep = dict[str, tuple[str, Callable[[EmbeddedBroker, Any, object], object]]]
SUB = {"dur-topic": "*"}
JMQ_SUB = {"dur-jmq": "*"}


def _each(cls: str, make: Callable[..., object], fields: tuple[str, ...], **kw: Any) -> Sweep:
    """A case ``cls.field`` per field: ``make(broker, field=value, **kw)``."""
    return {f"{cls}.{f}": (f, lambda b, c, v, f=f: make(b, **{f: v}, **kw)) for f in fields}


def _producer(b: EmbeddedBroker, **kw: object) -> object:
    return ferrymq.Producer(b.endpoints, **kw)


def _simple(b: EmbeddedBroker, **kw: object) -> object:
    return ferrymq.SimpleConsumer(b.endpoints, "g", subscriptions=SUB, **kw)


def _push(b: EmbeddedBroker, **kw: object) -> object:
    return ferrymq.PushConsumer(b.endpoints, "g", subscriptions=SUB, listener=lambda m: None, **kw)


ROCKETMQ: Sweep = {
    "Message.delivery_time": (
        "delivery_time",
        lambda b, p, v: ferrymq.Message("t", b"x", delivery_time=v),
    ),
    **_each(
        "Producer",
        _producer,
        (
            "request_timeout",
            "heartbeat_interval",
            "route_refresh_interval",
            "settings_sync_interval",
        ),
    ),
    **_each("SimpleConsumer", _simple, ("route_refresh_interval", "settings_sync_interval")),
    **_each("PushConsumer", _push, ("route_refresh_interval", "settings_sync_interval")),
    "Producer.poll": ("timeout", lambda b, p, v: p.poll(v)),
    "Producer.flush": ("timeout", lambda b, p, v: p.flush(v)),
    **_each("SimpleConsumer", _simple, ("await_duration",)),
    **_each("PushConsumer", _push, ("shutdown_timeout",)),
    **{
        f"AsyncPublisher.{f}": (f, lambda b, p, v, f=f: ferrymq.AsyncPublisher(p, **{f: v}))
        for f in ("wait_timeout", "poll_time", "hold_pause_time")
    },
    "RetryConfig.deadline": (
        "retry.deadline",
        lambda b, p, v: ferrymq.AsyncPublisher(p, retry=ferrymq.RetryConfig(deadline=v)),
    ),
    "RetryConfig.backoff": (
        "retry.backoff",
        lambda b, p, v: ferrymq.AsyncPublisher(p, retry=ferrymq.RetryConfig(backoff=(v,))),
    ),
    **_each("EmbeddedBroker", lambda b, **kw: EmbeddedBroker(**kw), ("max_delay", "max_invisible")),
    "EmbeddedBroker.set_latency": ("seconds", lambda b, p, v: b.set_latency(0, v)),
    "EmbeddedBroker.create_group": (
        "retry_backoff",
        lambda b, p, v: b.create_group("dur-g", retry_backoff=[v]),
    ),
}


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("case", ROCKETMQ)
def test_rocketmq_durations_refuse_bad_values(
    broker: EmbeddedBroker, producer: ferrymq.Producer, case: str, value: object
) -> None:
    field, call = ROCKETMQ[case]
    refused(lambda: call(broker, producer, value), field)


def _jmq_producer(b: EmbeddedBroker, **kw: object) -> object:
    """``Producer("jmq://")`` with JMQ4 options (they pass through ``jmq_options``)."""
    return ferrymq.Producer(b.jmq_endpoint, app=APP, token=TOKEN, jmq_options=kw)


def _jmq_consumer(b: EmbeddedBroker, **kw: object) -> object:
    return ferrymq.SimpleConsumer(
        b.jmq_endpoint, APP, subscriptions=JMQ_SUB, token=TOKEN, jmq_options=kw
    )


def _simple_receive(b: EmbeddedBroker, c: object, v: object) -> object:
    with ferrymq.SimpleConsumer(
        b.jmq_endpoint, APP, subscriptions=JMQ_SUB, token=TOKEN, await_duration=0.1
    ) as s:
        return s.receive(1, invisible_duration=v)


def _jmq_facade(b: EmbeddedBroker, **kw: object) -> ferrymq.Producer:
    return ferrymq.Producer(b.jmq_endpoint, app=APP, token=TOKEN, **kw)


JMQ: Sweep = {
    **_each(
        "Producer(jmq).jmq_options",
        _jmq_producer,
        (
            "send_timeout",
            "transaction_timeout",
            "feedback_interval",
            "metadata_refresh",
        ),
    ),
    **_each(
        "SimpleConsumer(jmq).jmq_options",
        _jmq_consumer,
        ("ack_timeout", "long_poll", "session_timeout", "metadata_refresh"),
    ),
    "SimpleConsumer(jmq).receive.invisible_duration": ("invisible_duration", _simple_receive),
    **_each(
        "SimpleConsumer(jmq)",
        lambda b, **kw: ferrymq.SimpleConsumer(
            b.jmq_endpoint, APP, subscriptions=JMQ_SUB, token=TOKEN, **kw
        ),
        ("await_duration", "request_timeout"),
    ),
    **_each(
        "PushConsumer(jmq)",
        lambda b, **kw: ferrymq.PushConsumer(
            b.jmq_endpoint, APP, subscriptions=JMQ_SUB, listener=lambda m: None, token=TOKEN, **kw
        ),
        ("shutdown_timeout",),
    ),
    "JmqServer.set_latency": ("seconds", lambda b, c, v: b.jmq.set_latency(v)),
    **_each("Producer(jmq)", _jmq_facade, ("request_timeout",)),
    "Producer(jmq).poll": ("timeout", lambda b, c, v: _jmq_facade(b).poll(v)),
    "Producer(jmq).flush": ("timeout", lambda b, c, v: _jmq_facade(b).flush(v)),
}


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("case", JMQ)
def test_jmq_durations_refuse_bad_values(
    jmq_broker: EmbeddedBroker, jmq_dur_topic: str, case: str, value: object
) -> None:
    field, call = JMQ[case]
    refused(lambda: call(jmq_broker, jmq_dur_topic, value), field)


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("invisible_duration", {"invisible_duration": timedelta(days=30)}),
        ("invisible_duration", {"invisible_duration": 0.0005}),
        ("max_messages", {"max_messages": 40_000}),
    ],
    ids=["30-days", "half-a-millisecond", "40000-messages"],
)
def test_jmq_receive_refuses_what_its_fetch_cannot_carry(
    jmq_broker: EmbeddedBroker, jmq_dur_topic: str, field: str, kw: dict[str, object]
) -> None:
    # A JMQ4 fetch carries an i32 of milliseconds (0 meaning the broker's default) and an i16
    # count: values beyond them are refused, not clamped.
    with (
        ferrymq.SimpleConsumer(
            jmq_broker.jmq_endpoint, APP, subscriptions=JMQ_SUB, token=TOKEN, await_duration=0.1
        ) as s,
        pytest.raises(InvalidArgumentError, match=field),
    ):
        s.receive(**kw)


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("field", ["connect_timeout", "request_timeout"])
def test_nats_durations_refuse_bad_values(field: str, value: object) -> None:
    # checked before any connection is attempted
    refused(lambda: ferrymq.JetStream("nats://127.0.0.1:1", **{field: value}), field)


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
def test_facade_durations_of_every_protocol_refuse_bad_values(
    broker: EmbeddedBroker, producer: ferrymq.Producer, value: object
) -> None:
    # Producer over NATS and remoting, and the publisher's close: the facades' own duration
    # arguments go through the same converter (nothing here needs a connection).
    nats = ferrymq.Producer("nats://127.0.0.1:1")
    remoting = ferrymq.Producer(broker.remoting_endpoint)
    refused(
        lambda: ferrymq.Producer("nats://127.0.0.1:1", request_timeout=value), "request_timeout"
    )
    for p in (nats, remoting):
        refused(lambda: p.poll(value), "timeout")  # noqa: B023
        refused(lambda: p.flush(value), "timeout")  # noqa: B023
    publisher = ferrymq.AsyncPublisher(producer)
    refused(lambda: asyncio.run(publisher.close_async(value)), "timeout")


# -- accepted forms ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, timedelta(0), 0.05, timedelta(milliseconds=50), 1])
def test_waits_take_zero_int_float_and_timedelta(producer: ferrymq.Producer, value: object) -> None:
    assert producer.poll(value) >= 0
    assert producer.flush(value) >= 0


def test_timeouts_take_timedelta_and_refuse_zero(broker: EmbeddedBroker) -> None:
    with ferrymq.Producer(broker.endpoints, request_timeout=timedelta(seconds=3)) as p:
        assert p.flush(timedelta(seconds=1)) == 0
    refused(lambda: ferrymq.Producer(broker.endpoints, request_timeout=0), "request_timeout")


def test_ten_years_is_the_limit(producer: ferrymq.Producer) -> None:
    ten_years = 315_576_000
    refused(lambda: producer.poll(ten_years + 1), "timeout")
    refused(lambda: producer.poll(timedelta(seconds=ten_years, microseconds=1)), "timeout")
    with pytest.raises(InvalidArgumentError, match="315576000"):
        producer.poll(1e20)


def test_delivery_time_forms() -> None:
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert ferrymq.Message("t", b"x", delivery_time=at).delivery_time == at.timestamp()
    assert ferrymq.Message("t", b"x", delivery_time=1_900_000_000).delivery_time == 1_900_000_000
    m = ferrymq.Message("t", b"x", delivery_time=timedelta(seconds=60))
    assert m.delivery_time is not None
    for bad in (datetime.max.replace(tzinfo=timezone.utc) + timedelta(0), 2**64, -1.0):
        refused(lambda bad=bad: ferrymq.Message("t", b"x", delivery_time=bad), "delivery_time")


def test_publisher_huge_wait_timeout_and_window_are_refused(producer: ferrymq.Producer) -> None:
    refused(lambda: ferrymq.AsyncPublisher(producer, wait_timeout=2**63), "wait_timeout")
    refused(lambda: ferrymq.AsyncPublisher(producer, max_in_flight=2**63), "max_in_flight")
    refused(lambda: ferrymq.AsyncPublisher(producer, max_in_flight=2**64), "max_in_flight")


@pytest.mark.parametrize("n", [0, -1, 1025, 2**31, 2**63, 2**64])
def test_push_consumer_threads_are_bounded(broker: EmbeddedBroker, n: int) -> None:
    refused(
        lambda: ferrymq.PushConsumer(
            broker.endpoints,
            "g",
            subscriptions={"dur-topic": "*"},
            listener=lambda m: None,
            consumption_threads=n,
        ),
        "consumption_threads",
    )


def test_the_converter_is_exposed_for_facades() -> None:
    from ferrymq import _native

    assert _native.seconds("x", timedelta(milliseconds=1500)) == 1.5
    assert _native.seconds("x", 0, zero=True) == 0.0
    refused(lambda: _native.seconds("x", 0), "x")
