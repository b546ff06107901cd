"""Every protocol's receive has the same defaults as ``SimpleConsumer.receive``: up to 16
messages, and a long poll of up to 20 s (the simple consumer's ``await_duration``) for the first
ones. Checked on the signatures users see (facades and native stubs alike) and, for JetStream, on
what a server hands out."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from _nats_server import NatsServer

#: ``SimpleConsumer``'s documented long-polling time (``await_duration``'s default).
SIMPLE_CONSUMER_WAIT = 20.0


def _defaults(method: Callable[..., Any], wait: str | None) -> tuple[Any, Any]:
    params = inspect.signature(method).parameters
    return params["max_messages"].default, (params[wait].default if wait else None)


@pytest.mark.parametrize(
    ("method", "wait"),
    [
        (ferrymq._native.SimpleConsumer.receive, None),
        (ferrymq._native.SimpleConsumer.receive_async, None),
        (ferrymq.PullConsumer.poll, "timeout"),
        (ferrymq.PullConsumer.poll_async, "timeout"),
        (ferrymq._native.OffsetConsumer.poll, None),
        (ferrymq._native.OffsetConsumer.poll_async, None),
    ],
    ids=lambda v: getattr(v, "__qualname__", str(v)),
)
def test_receive_defaults_are_the_simple_consumers(
    method: Callable[..., Any], wait: str | None
) -> None:
    simple_max, _ = _defaults(ferrymq.SimpleConsumer.receive, None)
    max_messages, wait_default = _defaults(method, wait)
    assert max_messages == simple_max == 16
    if wait is not None:
        assert wait_default == SIMPLE_CONSUMER_WAIT


def test_receive_without_arguments_hands_out_the_default_batch(nats_server: NatsServer) -> None:
    tok = uuid.uuid4().hex[:10].upper()
    stream, subject = f"D{tok}", f"d{tok}.x"
    with ferrymq.JetStream(nats_server.url) as js:
        js.create_stream(stream, [f"d{tok}.>"])
        try:
            for i in range(40):
                nats_server.publish(subject, b"m%d" % i)
            with ferrymq.SimpleConsumer(nats_server.url, f"g{tok}", subscriptions=subject) as c:
                # 40 are stored: the call returns at once with the default batch, in order.
                assert [m.body for m in c.receive()] == [b"m%d" % i for i in range(16)]
                assert [m.body for m in c.receive()] == [b"m%d" % i for i in range(16, 32)]
        finally:
            js.delete_stream(stream)
