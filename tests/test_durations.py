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
def jmq_consumer(jmq_broker: EmbeddedBroker) -> Iterator[ferrymq.JmqConsumer]:
    jmq_broker.create_topic("dur-jmq")
    with ferrymq.JmqConsumer(jmq_broker.jmq_endpoint, "dur-jmq", app=APP, token=TOKEN) as c:
        yield c


# -- the sweep: (parameter name, call with the value) ---------------------------------------


def _rocketmq_cases(broker: EmbeddedBroker, producer: ferrymq.Producer) -> dict[str, Any]:
    ep = broker.endpoints
    sub = {"dur-topic": "*"}
    return {
        "Message.delivery_time": (
            "delivery_time",
            lambda v: ferrymq.Message("t", b"x", delivery_time=v),
        ),
        "Producer.request_timeout": (
            "request_timeout",
            lambda v: ferrymq.Producer(ep, request_timeout=v),
        ),
        "Producer.heartbeat_interval": (
            "heartbeat_interval",
            lambda v: ferrymq.Producer(ep, heartbeat_interval=v),
        ),
        "Producer.route_refresh_interval": (
            "route_refresh_interval",
            lambda v: ferrymq.Producer(ep, route_refresh_interval=v),
        ),
        "Producer.settings_sync_interval": (
            "settings_sync_interval",
            lambda v: ferrymq.Producer(ep, settings_sync_interval=v),
        ),
        **{
            f"SimpleConsumer.{f}": (
                f,
                lambda v, f=f: ferrymq.SimpleConsumer(ep, "g", subscriptions=sub, **{f: v}),
            )
            for f in ("route_refresh_interval", "settings_sync_interval")
        },
        **{
            f"PushConsumer.{f}": (
                f,
                lambda v, f=f: ferrymq.PushConsumer(
                    ep, "g", subscriptions=sub, listener=lambda m: None, **{f: v}
                ),
            )
            for f in ("route_refresh_interval", "settings_sync_interval")
        },
        "Producer.poll": ("timeout", lambda v: producer.poll(v)),
        "Producer.flush": ("timeout", lambda v: producer.flush(v)),
        "SimpleConsumer.await_duration": (
            "await_duration",
            lambda v: ferrymq.SimpleConsumer(ep, "g", subscriptions=sub, await_duration=v),
        ),
        "PushConsumer.shutdown_timeout": (
            "shutdown_timeout",
            lambda v: ferrymq.PushConsumer(
                ep, "g", subscriptions=sub, listener=lambda m: None, shutdown_timeout=v
            ),
        ),
        "AsyncPublisher.wait_timeout": (
            "wait_timeout",
            lambda v: ferrymq.AsyncPublisher(producer, wait_timeout=v),
        ),
        "AsyncPublisher.poll_time": (
            "poll_time",
            lambda v: ferrymq.AsyncPublisher(producer, poll_time=v),
        ),
        "AsyncPublisher.hold_pause_time": (
            "hold_pause_time",
            lambda v: ferrymq.AsyncPublisher(producer, hold_pause_time=v),
        ),
        "RetryConfig.deadline": (
            "retry.deadline",
            lambda v: ferrymq.AsyncPublisher(producer, retry=ferrymq.RetryConfig(deadline=v)),
        ),
        "RetryConfig.backoff": (
            "retry.backoff",
            lambda v: ferrymq.AsyncPublisher(producer, retry=ferrymq.RetryConfig(backoff=(v,))),
        ),
        "EmbeddedBroker.max_delay": ("max_delay", lambda v: EmbeddedBroker(max_delay=v)),
        "EmbeddedBroker.max_invisible": (
            "max_invisible",
            lambda v: EmbeddedBroker(max_invisible=v),
        ),
        "EmbeddedBroker.set_latency": ("seconds", lambda v: broker.set_latency(0, v)),
        "EmbeddedBroker.create_group": (
            "retry_backoff",
            lambda v: broker.create_group("dur-g", retry_backoff=[v]),
        ),
    }


ROCKETMQ = [
    "Message.delivery_time",
    "Producer.request_timeout",
    "Producer.heartbeat_interval",
    "Producer.route_refresh_interval",
    "Producer.settings_sync_interval",
    "SimpleConsumer.route_refresh_interval",
    "SimpleConsumer.settings_sync_interval",
    "PushConsumer.route_refresh_interval",
    "PushConsumer.settings_sync_interval",
    "Producer.poll",
    "Producer.flush",
    "SimpleConsumer.await_duration",
    "PushConsumer.shutdown_timeout",
    "AsyncPublisher.wait_timeout",
    "AsyncPublisher.poll_time",
    "AsyncPublisher.hold_pause_time",
    "RetryConfig.deadline",
    "RetryConfig.backoff",
    "EmbeddedBroker.max_delay",
    "EmbeddedBroker.max_invisible",
    "EmbeddedBroker.set_latency",
    "EmbeddedBroker.create_group",
]


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("case", ROCKETMQ)
def test_rocketmq_durations_refuse_bad_values(
    broker: EmbeddedBroker, producer: ferrymq.Producer, case: str, value: object
) -> None:
    field, call = _rocketmq_cases(broker, producer)[case]
    refused(lambda: call(value), field)


def _jmq_cases(b: EmbeddedBroker, c: ferrymq.JmqConsumer) -> dict[str, Any]:
    ep = b.jmq_endpoint

    def producer(**kw: object) -> object:
        return ferrymq.JmqProducer(ep, app=APP, token=TOKEN, **kw)

    def consumer(**kw: object) -> object:
        return ferrymq.JmqConsumer(ep, "dur-jmq", app=APP, token=TOKEN, **kw)

    def simple_receive(v: object) -> object:
        with ferrymq.SimpleConsumer(
            ep, APP, subscriptions={"dur-jmq": "*"}, token=TOKEN, await_duration=0.1
        ) as s:
            return s.receive(1, invisible_duration=v)

    cases: dict[str, Any] = {
        f"JmqProducer.{f}": (f, lambda v, f=f: producer(**{f: v}))
        for f in (
            "send_timeout",
            "request_timeout",
            "transaction_timeout",
            "feedback_interval",
            "metadata_refresh",
        )
    }
    cases.update(
        {
            f"JmqConsumer.{f}": (f, lambda v, f=f: consumer(**{f: v}))
            for f in ("ack_timeout", "long_poll", "session_timeout", "request_timeout")
        }
    )
    cases["JmqConsumer.receive.wait"] = ("wait", lambda v: c.receive(1, v))
    cases["JmqConsumer.receive.ack_timeout"] = (
        "ack_timeout",
        lambda v: c.receive(1, 0.1, ack_timeout=v),
    )
    cases["SimpleConsumer(jmq).receive.invisible_duration"] = ("invisible_duration", simple_receive)
    cases["SimpleConsumer(jmq).await_duration"] = (
        "await_duration",
        lambda v: ferrymq.SimpleConsumer(
            ep, APP, subscriptions={"dur-jmq": "*"}, token=TOKEN, await_duration=v
        ),
    )
    cases["PushConsumer(jmq).shutdown_timeout"] = (
        "shutdown_timeout",
        lambda v: ferrymq.PushConsumer(
            ep,
            APP,
            subscriptions={"dur-jmq": "*"},
            listener=lambda m: None,
            token=TOKEN,
            shutdown_timeout=v,
        ),
    )
    cases["JmqServer.set_latency"] = ("seconds", lambda v: b.jmq.set_latency(v))
    facade = ferrymq.Producer(ep, app=APP, token=TOKEN)
    cases["Producer(jmq).request_timeout"] = (
        "request_timeout",
        lambda v: ferrymq.Producer(ep, app=APP, token=TOKEN, request_timeout=v),
    )
    cases["Producer(jmq).poll"] = ("timeout", lambda v: facade.poll(v))
    cases["Producer(jmq).flush"] = ("timeout", lambda v: facade.flush(v))
    return cases


JMQ = [
    "JmqProducer.send_timeout",
    "JmqProducer.request_timeout",
    "JmqProducer.transaction_timeout",
    "JmqProducer.feedback_interval",
    "JmqProducer.metadata_refresh",
    "JmqConsumer.ack_timeout",
    "JmqConsumer.long_poll",
    "JmqConsumer.session_timeout",
    "JmqConsumer.request_timeout",
    "JmqConsumer.receive.wait",
    "JmqConsumer.receive.ack_timeout",
    "SimpleConsumer(jmq).receive.invisible_duration",
    "SimpleConsumer(jmq).await_duration",
    "PushConsumer(jmq).shutdown_timeout",
    "JmqServer.set_latency",
    "Producer(jmq).request_timeout",
    "Producer(jmq).poll",
    "Producer(jmq).flush",
]


@pytest.mark.parametrize("value", BAD, ids=BAD_IDS)
@pytest.mark.parametrize("case", JMQ)
def test_jmq_durations_refuse_bad_values(
    jmq_broker: EmbeddedBroker, jmq_consumer: ferrymq.JmqConsumer, case: str, value: object
) -> None:
    field, call = _jmq_cases(jmq_broker, jmq_consumer)[case]
    refused(lambda: call(value), field)


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
