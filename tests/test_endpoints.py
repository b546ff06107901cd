"""One resolver for endpoint strings: every class and the Spark source read a scheme the same
way, and bad input is refused with an error naming the parameter."""

from __future__ import annotations

from typing import Any

import pytest

import ferrymq
from ferrymq import InvalidArgumentError
from ferrymq._endpoints import protocol_of
from ferrymq.spark._options import backend_of


@pytest.mark.parametrize(
    ("endpoints", "protocol"),
    [
        ("127.0.0.1:8081", "rocketmq"),
        ("127.0.0.1:8081;127.0.0.1:8082", "rocketmq"),
        (["127.0.0.1:8081", "127.0.0.1:8082"], "rocketmq"),
        ("rocketmq://h:1", "rocketmq"),
        ("ROCKETMQS://h:1", "rocketmq"),
        ("https://h:1", "rocketmq"),
        ("remoting://127.0.0.1:9876;127.0.0.1:9877", "remoting"),
        ("jmq://h:50088", "jmq"),
        (("jmq://h:50088",), "jmq"),
        ("nats://h:4222", "nats"),
    ],
)
def test_every_scheme_names_one_protocol(endpoints: Any, protocol: str) -> None:
    assert protocol_of(endpoints) == protocol
    if isinstance(endpoints, str):
        assert backend_of(endpoints) == protocol  # the Spark source agrees


@pytest.mark.parametrize(
    ("endpoints", "why"),
    [
        (b"127.0.0.1:1", "not bytes"),
        ({"a": 1}, "not dict"),
        (5, "not int"),
        ([], "names no endpoint"),
        ([1], "must be a str"),
        (["  "], "empty"),
        ("foo://h:1", "unsupported scheme 'foo'"),
        # no NATS client here speaks tls:// (TLS is negotiated on nats://)
        ("tls://h:4222", "unsupported scheme 'tls'"),
        (["h:1", "jmq://h:2"], "mixes protocols"),
    ],
)
def test_bad_endpoints_are_refused_naming_the_parameter(endpoints: Any, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match="endpoints") as e:
        protocol_of(endpoints)
    assert why in str(e.value)
    with pytest.raises(InvalidArgumentError, match="endpoints"):
        ferrymq.Producer(endpoints)


def test_each_class_says_which_class_serves_another_protocol() -> None:
    with pytest.raises(InvalidArgumentError, match="PullConsumer"):
        ferrymq.SimpleConsumer("remoting://127.0.0.1:9876", "g", subscriptions={"t": "*"})
    with pytest.raises(InvalidArgumentError, match="PullConsumer"):
        ferrymq.PushConsumer(
            "remoting://127.0.0.1:9876", "g", subscriptions={"t": "*"}, listener=lambda m: None
        )
    with pytest.raises(InvalidArgumentError, match="remoting://"):
        ferrymq.PullConsumer("127.0.0.1:8081", "g")
