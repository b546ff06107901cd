"""`_native.OffsetReader`, the one offset-range reader behind the Spark source and `PullConsumer`,
over each protocol it has a constructor for: the same calls, the protocol's own answers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ferrymq
from ferrymq import _native
from ferrymq.testing import EmbeddedBroker

N = 12
APP, TOKEN = "test_app", "test_token"

#: protocol -> (reader, topic) made ready with N messages stored
Setup = tuple[_native.OffsetReader, str]


def _rocketmq_like(
    request: pytest.FixtureRequest, unique: Callable[[str], str], remoting: bool
) -> Iterator[Setup]:
    broker: EmbeddedBroker = request.getfixturevalue("broker")
    topic, group = unique("reader-topic"), unique("reader-group")
    broker.create_topic(topic, "NORMAL", 4)
    broker.create_group(group)
    with ferrymq.Producer(broker.endpoints, topics=[topic]) as p:
        p.send_batch([ferrymq.Message(topic, b"m%d" % i) for i in range(N)])
    if remoting:
        reader = _native.OffsetReader.remoting(broker.remoting_endpoint, group)
    else:
        reader = _native.OffsetReader.rocketmq(broker.endpoints, group, topics=[topic])
    with reader:
        reader.start()
        yield reader, topic


@pytest.fixture(params=["rocketmq", "remoting", "jmq", "nats"])
def ready(request: pytest.FixtureRequest, unique: Callable[[str], str]) -> Iterator[Setup]:
    protocol = request.param
    if protocol in ("rocketmq", "remoting"):
        yield from _rocketmq_like(request, unique, protocol == "remoting")
    elif protocol == "jmq":
        broker: EmbeddedBroker = request.getfixturevalue("jmq_broker")
        topic: str = request.getfixturevalue("jmq_topic")
        with ferrymq.Producer(broker.jmq_endpoint, app=APP, token=TOKEN) as p:
            p.send_batch([ferrymq.Message(topic, b"m%d" % i) for i in range(N)])
        with _native.OffsetReader.jmq(broker.jmq_endpoint, app=APP, token=TOKEN) as reader:
            reader.start()
            yield reader, topic
    else:
        _, tok = request.getfixturevalue("nats_stream")
        server: Any = request.getfixturevalue("nats_server")
        with ferrymq.Producer(server.url) as p:
            p.send_batch([ferrymq.Message(f"s{tok}.a", b"m%d" % i) for i in range(N)])
        with _native.OffsetReader.nats(server.url) as reader:
            reader.start()
            yield reader, f"S{tok}"


def test_every_protocol_reads_what_was_stored(ready: Setup) -> None:
    reader, topic = ready
    partitions = reader.partitions(topic)
    assert partitions
    assert all(isinstance(p, str) for p in partitions)
    bounds = {p: (reader.earliest(topic, p), reader.latest(topic, p)) for p in partitions}
    assert sum(hi - lo for lo, hi in bounds.values()) == N, bounds
    assert dict(reader.snapshot(topic, "latest")) == {p: hi for p, (_, hi) in bounds.items()}
    assert dict(reader.snapshot(topic, "earliest")) == {p: lo for p, (lo, _) in bounds.items()}
    rows = 0
    for p, (lo, hi) in bounds.items():
        if hi == lo:
            continue
        cols = reader.read_range(topic, p, lo, hi)
        assert cols.next_offset == hi
        assert cols.first_offset == lo
        rows += cols.num_rows
        # An exact range: a later start reads fewer rows, up to the same end.
        if hi - lo > 1:
            assert reader.read_range(topic, p, lo + 1, hi).num_rows == cols.num_rows - 1
    assert rows == N


def test_a_bad_snapshot_bound_names_the_parameter(ready: Setup) -> None:
    reader, topic = ready
    with pytest.raises(ferrymq.InvalidArgumentError, match="which"):
        reader.snapshot(topic, "middle")


def test_offset_by_time_where_the_protocol_has_it(ready: Setup) -> None:
    reader, topic = ready
    p = reader.partitions(topic)[0]
    now_ms = int(time.time() * 1000)
    if reader.protocol in ("jmq", "nats"):
        with pytest.raises(ferrymq.FerryError):
            reader.offset_for_time(topic, p, now_ms)
    else:
        # Every stored message is older than an hour from now: the end of the queue.
        assert reader.offset_for_time(topic, p, now_ms + 3_600_000) == reader.latest(topic, p)


def test_closed_reader_refuses_calls(ready: Setup) -> None:
    reader, topic = ready
    reader.close()
    reader.close()
    with pytest.raises(ferrymq.ClientClosedError):
        reader.partitions(topic)
