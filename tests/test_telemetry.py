"""``ferrymq.telemetry`` with the real OpenTelemetry Python SDK (in-memory readers and
exporters): the consumers' metrics over every protocol (``backend``), cumulative and delta,
through a periodic exporting reader too; spans that carry a trace id from a producer inside a
user span, through the broker, to the consumer's process span (every protocol, and the
embedded broker and the real RocketMQ through ``server``); ``disable()``; closed clients
dropping out; the extra's import rules."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler
from opentelemetry.trace import SpanKind

import ferrymq
import ferrymq.telemetry as telemetry
from backends import Backend
from ferrymq import Message
from ferrymq._otel_traces import creation_context
from servers import Server
from stats_checks import receive_all
from waiting import wait_for

BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
SYSTEM = {"rocketmq": "rocketmq", "jmq": "jmq", "nats": "nats"}


class InMemoryMetricExporter(MetricExporter):
    """An exporter that keeps what it was given (the SDK has none for metrics)."""

    def __init__(self) -> None:
        super().__init__()
        self.exported: list[MetricsData] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exported.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


class Otel:
    def __init__(self, reader: MetricReader | None = None, sampler: Sampler | None = None) -> None:
        self.reader = reader if reader is not None else InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.spans = InMemorySpanExporter()
        self.tracers = TracerProvider(sampler=sampler)
        self.tracers.add_span_processor(SimpleSpanProcessor(self.spans))
        self.tracer = self.tracers.get_tracer("test")

    def collect(self) -> MetricsData | None:
        assert isinstance(self.reader, InMemoryMetricReader)
        return self.reader.get_metrics_data()

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def close(self) -> None:
        telemetry.disable()
        self.meters.shutdown()
        self.tracers.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    telemetry.enable(o.meters, o.tracers)
    yield o
    o.close()


def points(data: MetricsData | None, name: str, **attrs: Any) -> list[Any]:
    """The data points of ferrymq's metric ``name`` whose attributes include ``attrs``
    (dots spelled as ``__``)."""
    want = {k.replace("__", "."): v for k, v in attrs.items()}
    out: list[Any] = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            if sm.scope.name != "ferrymq":
                continue
            for m in sm.metrics:
                if m.name == name:
                    out.extend(
                        p for p in m.data.data_points if want.items() <= dict(p.attributes).items()
                    )
    return out


def metric(data: MetricsData | None, name: str) -> Any:
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if sm.scope.name == "ferrymq" and m.name == name:
                    return m
    return None


# -- the extra ---------------------------------------------------------------------------------


def test_import_ferrymq_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, ferrymq, ferrymq.telemetry\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_enable_without_the_sdk_names_the_extra() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ferrymq.telemetry\n"
        "try:\n"
        "    ferrymq.telemetry.enable()\n"
        "except ImportError as e:\n"
        "    assert \"pip install 'ferrymq[otel]'\" in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_enable_refuses_a_provider_it_cannot_report_to() -> None:
    with pytest.raises(TypeError, match="meter_provider"):
        telemetry.enable(NoOpMeterProvider(), traces=False)
    with pytest.raises(TypeError, match="tracer_provider"):
        telemetry.enable(metrics=False, tracer_provider=object())
    assert telemetry.enabled() == {"metrics": False, "traces": False}


# -- metrics -----------------------------------------------------------------------------------


def test_simple_consumer_metrics_on_every_protocol(backend: Backend, otel: Otel) -> None:
    sent = backend.send(12)
    with backend.simple_consumer() as c:
        got = receive_all(c, len(sent))
        stats = c.stats()
        client_id = c.client_id
        data = otel.collect()
    assert len(got) == 12
    attrs = {
        "messaging__system": SYSTEM[backend.protocol],
        "messaging__consumer__group__name": backend.group,
        "messaging__destination__name": backend.topic,
    }
    consumed = points(data, "messaging.client.consumed.messages", **attrs)
    assert sum(p.value for p in consumed) == 12
    assert {p.attributes["messaging.operation.name"] for p in consumed} == {"receive"}
    p0 = consumed[0]
    assert p0.attributes["messaging.client.id"] == client_id
    assert p0.attributes["server.port"] > 0
    assert "server.address" in p0.attributes
    m = metric(data, "messaging.client.consumed.messages")
    assert m.unit == "{message}"
    assert m.data.is_monotonic
    assert m.data.aggregation_temporality is AggregationTemporality.CUMULATIVE
    durations = points(data, "messaging.client.operation.duration", **attrs)
    by_op = {p.attributes["messaging.operation.name"]: p for p in durations}
    assert set(by_op) == {"receive", "ack"}
    assert by_op["receive"].attributes["messaging.operation.type"] == "receive"
    assert by_op["ack"].attributes["messaging.operation.type"] == "settle"
    for name, p in by_op.items():
        assert p.count == stats["operations"][name]["calls"]
        assert sum(p.bucket_counts) == p.count
        assert tuple(p.explicit_bounds) == BOUNDS
        assert 0 < p.min <= p.max
        assert p.min * p.count <= p.sum <= p.max * p.count * (1 + 1e-9)
        assert "error.type" not in p.attributes
    assert metric(data, "messaging.client.operation.duration").unit == "s"
    assert points(data, "messaging.process.duration", **attrs) == []


def test_producer_metrics_on_every_protocol(backend: Backend, otel: Otel) -> None:
    attrs = {
        "messaging__system": SYSTEM[backend.protocol],
        "messaging__destination__name": backend.topic,
    }
    with backend.producer() as p:
        for i in range(5):
            p.send(Message(backend.topic, b"s%d" % i))
        p.send_batch([Message(backend.topic, b"b%d" % i) for i in range(4)])
        for i in range(6):
            p.produce(Message(backend.topic, b"p%d" % i))
        assert p.flush(30) == 0
        stats = p.stats()
        data = otel.collect()
    sent = points(data, "messaging.client.sent.messages", **attrs)
    assert sum(pt.value for pt in sent) == 15 == stats["sent"]
    assert {pt.attributes["messaging.operation.name"] for pt in sent} == {"send"}
    durations = points(data, "messaging.client.operation.duration", **attrs)
    assert {pt.attributes["messaging.operation.type"] for pt in durations} == {"send"}
    assert sum(pt.count for pt in durations) == stats["operations"]["send"]["calls"]
    for pt in durations:
        assert sum(pt.bucket_counts) == pt.count
        assert "messaging.consumer.group.name" not in pt.attributes


def test_push_consumer_metrics_on_every_protocol(backend: Backend, otel: Otel) -> None:
    backend.send(15)
    with backend.push_consumer(lambda m: None, consumption_threads=2) as pc:
        wait_for(
            "every message acked and the cache empty",
            lambda: pc.stats()["acked"] == 15 and pc.stats()["cached_messages"] == 0,
        )
        data = otel.collect()
        client_id = pc.client_id
    # The topic is this test's own; the group may not be (a JMQ4 group is the app), and a
    # closed consumer of an earlier test is reported once more to a new reader.
    attrs = {
        "messaging__system": SYSTEM[backend.protocol],
        "messaging__consumer__group__name": backend.group,
        "messaging__destination__name": backend.topic,
    }
    consumed = points(data, "messaging.client.consumed.messages", **attrs)
    assert sum(p.value for p in consumed) == 15
    process = points(data, "messaging.process.duration", **attrs)
    assert sum(p.count for p in process) == 15
    assert {p.attributes["messaging.operation.type"] for p in process} == {"process"}
    assert {p.attributes["messaging.destination.name"] for p in process} == {backend.topic}
    mine = {"messaging__client__id": client_id}
    cached = points(data, "ferrymq.consumer.cached.messages", **mine)
    assert [p.value for p in cached] == [0]
    assert len(points(data, "ferrymq.consumer.cached.bytes", **mine)) == 1
    acks = points(
        data, "messaging.client.operation.duration", messaging__operation__name="ack", **attrs
    )
    assert acks
    assert all(p.attributes["messaging.operation.type"] == "settle" for p in acks)


def test_clients_with_equal_attributes_are_one_stream(backend: Backend, otel: Otel) -> None:
    if backend.protocol == "rocketmq":
        pytest.skip("a RocketMQ client has an id of its own")
    backend.send(6)
    with backend.simple_consumer() as a, backend.simple_consumer() as b:
        assert a.client_id == b.client_id  # JMQ4: the app's; JetStream: the group's
        got = a.receive(3)  # both consumers receive, so both have series
        a.ack(got)
        got += receive_all(b, 6 - len(got))
        assert all(c.stats()["operations"]["receive"]["calls"] for c in (a, b))
        data = otel.collect()
    assert len(got) == 6
    consumed = points(
        data, "messaging.client.consumed.messages", messaging__destination__name=backend.topic
    )
    assert [p.value for p in consumed] == [6]
    receives = points(
        data,
        "messaging.client.operation.duration",
        messaging__destination__name=backend.topic,
        messaging__operation__name="receive",
    )
    assert len(receives) == 1
    calls = [c.stats()["operations"].get("receive", {}).get("calls", 0) for c in (a, b)]
    assert receives[0].count == sum(calls)


def _delta_reader() -> InMemoryMetricReader:
    return InMemoryMetricReader(
        preferred_temporality={
            Counter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA,
        }
    )


def test_delta_temporality_reports_each_interval(
    backend: Backend, unique: Callable[[str], str]
) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the bridge is protocol-agnostic")
    o = Otel(_delta_reader())
    telemetry.enable(o.meters, metrics=True, traces=False)
    try:
        backend.send(5)
        attrs = {"messaging__consumer__group__name": backend.group}
        with backend.simple_consumer() as c:
            assert len(receive_all(c, 5)) == 5
            first = o.collect()
            backend.send(3)
            assert len(receive_all(c, 3)) == 3
            second = o.collect()
            idle = o.collect()
        m = metric(first, "messaging.client.consumed.messages")
        assert m.data.aggregation_temporality is AggregationTemporality.DELTA
        assert (
            sum(p.value for p in points(first, "messaging.client.consumed.messages", **attrs)) == 5
        )
        assert (
            sum(p.value for p in points(second, "messaging.client.consumed.messages", **attrs)) == 3
        )
        assert points(idle, "messaging.client.consumed.messages", **attrs) == []
        acks1 = points(
            first, "messaging.client.operation.duration", messaging__operation__name="ack", **attrs
        )
        acks2 = points(
            second, "messaging.client.operation.duration", messaging__operation__name="ack", **attrs
        )
        assert acks1
        assert acks2
        total = c.stats()["operations"]["ack"]["calls"]
        assert sum(p.count for p in acks1) + sum(p.count for p in acks2) == total
        for p in acks1 + acks2:
            assert sum(p.bucket_counts) == p.count
            assert p.min <= p.max
        (p2,) = acks2
        (p1,) = acks1
        assert p2.start_time_unix_nano >= p1.time_unix_nano
    finally:
        o.close()


def test_a_periodic_exporting_reader_exports_ferrymq_metrics(backend: Backend) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the bridge is protocol-agnostic")
    exporter = InMemoryMetricExporter()
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    o = Otel(reader)
    telemetry.enable(o.meters, traces=False)
    try:
        backend.send(4)
        with backend.simple_consumer() as c:
            assert len(receive_all(c, 4)) == 4
            assert o.meters.force_flush()
        exported = exporter.exported
        attrs = {"messaging__consumer__group__name": backend.group}
        assert (
            sum(
                p.value
                for d in exported
                for p in points(d, "messaging.client.consumed.messages", **attrs)
            )
            == 4
        )
    finally:
        o.close()


def test_disable_stops_and_closed_clients_drop_out(backend: Backend, otel: Otel) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the bridge is protocol-agnostic")
    backend.send(2)
    attrs = {"messaging__consumer__group__name": backend.group}
    c = backend.simple_consumer().start()
    assert len(receive_all(c, 2)) == 2
    assert points(otel.collect(), "messaging.client.consumed.messages", **attrs)
    c.close()
    # Its final figures once, then gone.
    last = points(otel.collect(), "messaging.client.consumed.messages", **attrs)
    assert sum(p.value for p in last) == 2
    assert points(otel.collect(), "messaging.client.consumed.messages", **attrs) == []
    # A client created after enable() is seen; after disable() nothing of ferrymq's is.
    c2 = backend.simple_consumer().start()
    try:
        assert points(otel.collect(), "messaging.client.operation.duration", **attrs) == []
        backend.send(1)
        assert len(receive_all(c2, 1)) == 1
        assert points(otel.collect(), "messaging.client.consumed.messages", **attrs)
        telemetry.disable()
        assert telemetry.enabled() == {"metrics": False, "traces": False}
        data = otel.collect()
        assert metric(data, "messaging.client.consumed.messages") is None
    finally:
        c2.close()


# -- traces ------------------------------------------------------------------------------------


def _trace_round_trip(
    otel: Otel, producer: ferrymq.Producer, consume: Callable[[list[Any]], Any], topic: str
) -> None:
    seen: list[ferrymq.MessageView] = []
    with otel.tracer.start_as_current_span("user") as user:
        producer.send(Message(topic, b"traced"))
    trace_id = user.get_span_context().trace_id
    with consume(seen.append):
        wait_for("the message consumed", lambda: bool(seen), 60)
        wait_for(
            "its process span",
            lambda: any(s.name == f"process {topic}" for s in otel.finished()),
            30,
        )
    spans = otel.finished()
    (send,) = [s for s in spans if s.name == f"send {topic}"]
    assert send.kind is SpanKind.PRODUCER
    assert send.context.trace_id == trace_id
    assert send.parent is not None
    assert send.parent.span_id == user.get_span_context().span_id
    assert send.attributes["messaging.destination.name"] == topic
    process = [s for s in spans if s.name == f"process {topic}"]
    p = process[0]
    assert p.kind is SpanKind.CONSUMER
    assert p.context.trace_id == trace_id
    assert p.parent is not None
    assert p.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in p.links] == [send.context.span_id]
    assert p.attributes["messaging.operation.type"] == "process"
    assert p.attributes["messaging.message.id"] == seen[0].message_id
    # The context on the wire is the send span's.
    assert seen[0].trace_context is not None
    assert f"{send.context.span_id:016x}" in seen[0].trace_context


def test_a_trace_id_travels_to_the_process_span_on_every_protocol(
    backend: Backend, otel: Otel
) -> None:
    with backend.producer() as p:
        _trace_round_trip(otel, p, backend.push_consumer, backend.topic)
    process = next(s for s in otel.finished() if s.name.startswith("process "))
    assert process.attributes["messaging.system"] == SYSTEM[backend.protocol]
    assert process.attributes["messaging.consumer.group.name"] == backend.group


def test_a_trace_id_travels_on_the_embedded_broker_and_the_real_server(
    server: Server, unique: Callable[[str], str], otel: Otel
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])

    def consume(listener: Callable[[Any], Any]) -> ferrymq.PushConsumer:
        return ferrymq.PushConsumer(
            server.endpoints, group, subscriptions=topic, listener=listener
        ).start()

    class Closing:
        def __init__(self, listener: Callable[[Any], Any]) -> None:
            self.c = consume(listener)

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            self.c.close()

    with ferrymq.Producer(server.endpoints, topics=[topic]) as p:
        _trace_round_trip(otel, p, Closing, topic)


def test_the_publisher_carries_the_current_context_on_every_protocol(
    backend: Backend, otel: Otel
) -> None:
    """The managed publisher's messages, given as a subject and a body or as a ``Message``,
    carry the caller's span context, which the consumer's process span continues."""
    seen: list[Any] = []
    with backend.producer() as p, ferrymq.AsyncPublisher(p) as pub:
        with otel.tracer.start_as_current_span("user") as user:
            flights = [
                pub.submit(backend.topic, b"subject and body", headers={"k": "v"}),
                pub.submit(Message(backend.topic, b"message")),
            ]
        for f in flights:
            f.result(30)
    trace_id = f"{user.get_span_context().trace_id:032x}"
    with backend.push_consumer(seen.append):
        wait_for("both messages consumed", lambda: len(seen) >= 2, 60)
        wait_for(
            "their process spans",
            lambda: any(s.name == f"process {backend.topic}" for s in otel.finished()),
            30,
        )
    assert sorted(m.body for m in seen) == [b"message", b"subject and body"]
    for m in seen:
        assert m.trace_context is not None, m
        assert m.trace_context.split("-")[1] == trace_id
    (with_headers,) = [m for m in seen if m.body == b"subject and body"]
    assert with_headers.properties.get("k") == "v"
    process = [s for s in otel.finished() if s.name == f"process {backend.topic}"]
    assert {f"{s.context.trace_id:032x}" for s in process} == {trace_id}


async def test_an_async_listener_runs_in_its_process_span(backend: Backend, otel: Otel) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the async bridge is protocol-agnostic")
    with otel.tracer.start_as_current_span("user") as user, backend.producer() as p:
        await p.send_async(Message(backend.topic, b"a"))
    seen: list[int] = []

    async def listener(m: ferrymq.MessageView) -> None:
        from opentelemetry import trace

        seen.append(trace.get_current_span().get_span_context().trace_id)

    async with backend.push_consumer(listener):
        from waiting import async_wait_for

        await async_wait_for("the listener ran", lambda: bool(seen), 60)
    assert seen[0] == user.get_span_context().trace_id


def test_simple_receive_links_and_batches_carry_the_current_context(
    backend: Backend, otel: Otel
) -> None:
    with otel.tracer.start_as_current_span("batch") as user, backend.producer() as p:
        p.send_batch([Message(backend.topic, b"b%d" % i) for i in range(3)])
    trace_id = user.get_span_context().trace_id
    # No span per message on the batch path.
    assert [s.name for s in otel.finished()] == ["batch"]
    with backend.simple_consumer() as c:
        got = receive_all(c, 3)
    assert len(got) == 3
    assert all(m.trace_context and f"{trace_id:032x}" in m.trace_context for m in got)
    receives = [s for s in otel.finished() if s.name == f"receive {backend.topic}"]
    linked = {link.context.trace_id for s in receives for link in s.links}
    assert linked == {trace_id}
    assert sum(len(s.links) for s in receives) == 3
    assert all(s.kind is SpanKind.CONSUMER for s in receives)


def test_a_message_with_its_own_context_keeps_it() -> None:
    o = Otel()
    telemetry.enable(metrics=False, tracer_provider=o.tracers)
    try:
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        sent: list[Message] = []

        def call(m: Message) -> None:
            sent.append(m)

        from ferrymq import _hooks

        assert _hooks.send is not None
        _hooks.send(Message("t", b"x", trace_context=tp), call)
        assert sent[0].trace_context == tp
        (span,) = o.finished()
        assert [f"{link.context.span_id:016x}" for link in span.links] == ["00f067aa0ba902b7"]
    finally:
        o.close()


def test_invalid_received_contexts_are_ignored() -> None:
    class View:
        trace_context = "not-a-traceparent"
        trace_state = None

    assert creation_context(View()) is None
    View.trace_context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert creation_context(View()) is not None


def _send_one_and_consume_it(backend: Backend) -> Any:
    """Send one message with a producer of ``backend``, and return it as a push consumer got
    it."""
    seen: list[Any] = []
    with backend.producer() as p:
        p.send(Message(backend.topic, b"x"))
    with backend.push_consumer(seen.append):
        wait_for("the message consumed", lambda: bool(seen), 60)
    return seen[0]


def test_a_sampled_out_trace_is_propagated_and_recorded_nowhere(backend: Backend) -> None:
    """A send the user's sampler drops makes no span, yet its message carries the unsampled
    context, so that the consumer's side follows the decision (parent-based sampling)."""
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the send and process hooks are protocol-agnostic")
    o = Otel(sampler=ParentBased(ALWAYS_OFF))
    telemetry.enable(o.meters, o.tracers)
    try:
        got = _send_one_and_consume_it(backend)
        parent = re.fullmatch(
            r"00-[0-9a-f]{32}-[0-9a-f]{16}-([0-9a-f]{2})", got.trace_context or ""
        )
        assert parent is not None, got.trace_context
        assert int(parent[1], 16) & 1 == 0  # not sampled (the SDK may set the "random" flag)
        assert o.finished() == []
    finally:
        o.close()


def test_tracing_off_makes_no_spans(backend: Backend) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough")
    o = Otel()
    telemetry.enable(o.meters, o.tracers)
    telemetry.disable()
    try:
        got = _send_one_and_consume_it(backend)
        assert o.finished() == []
        assert got.trace_context is None
    finally:
        o.close()


def test_a_batch_of_listener_calls_is_one_process_span(backend: Backend, otel: Otel) -> None:
    if backend.protocol != "rocketmq":
        pytest.skip("one protocol is enough: the listener bridge is protocol-agnostic")
    with otel.tracer.start_as_current_span("batch") as user, backend.producer() as p:
        p.send_batch([Message(backend.topic, b"b%d" % i) for i in range(6)])
    user_ctx = user.get_span_context()
    current: list[tuple[int, int]] = []

    def listener(m: ferrymq.MessageView) -> None:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        current.append((ctx.trace_id, ctx.span_id))

    with backend.push_consumer(listener):
        wait_for("the messages consumed", lambda: len(current) >= 6, 60)
        wait_for(
            "their process spans",
            lambda: (
                sum(
                    s.attributes.get("messaging.batch.message_count", 1)  # type: ignore[union-attr,misc]
                    for s in otel.finished()
                    if s.name == f"process {backend.topic}"
                )
                >= 6
            ),
            30,
        )
    spans = [s for s in otel.finished() if s.name == f"process {backend.topic}"]
    # Fewer spans than messages once a receive brought several; every span continues the
    # batch's one trace (its parent) and links to it.
    assert {s.context.trace_id for s in spans} == {user_ctx.trace_id}
    assert all(s.parent is not None and s.parent.span_id == user_ctx.span_id for s in spans)
    assert all([link.context.span_id for link in s.links] == [user_ctx.span_id] for s in spans)
    # Each listener call ran inside one of them.
    assert {span_id for _, span_id in current} <= {s.context.span_id for s in spans}
    for s in spans:
        count = s.attributes.get("messaging.batch.message_count")  # type: ignore[union-attr]
        assert (count is None) == ("messaging.message.id" in s.attributes)  # type: ignore[operator]


def test_a_process_span_over_messages_of_several_traces_links_each() -> None:
    o = Otel()
    telemetry.enable(metrics=False, tracer_provider=o.tracers)
    try:

        class View:
            topic = "t"
            message_id = "id"
            trace_state = None

            def __init__(self, trace_context: str | None) -> None:
                self.trace_context = trace_context

        a = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        b = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
        views = [View(a), View(b), View(a), View(None), View("invalid")]
        from ferrymq import _otel_traces

        tracing = telemetry._tracing
        assert isinstance(tracing, _otel_traces.Tracing)
        end = tracing.process(views, {"messaging.system": "rocketmq"})
        end(1)
        (span,) = o.finished()
        assert span.name == "process t"
        # Two traces: a new one, linked to both.
        assert span.parent is None
        assert {f"{link.context.span_id:016x}" for link in span.links} == {
            "00f067aa0ba902b7",
            "10f067aa0ba902b7",
        }
        assert span.attributes is not None
        assert span.attributes["messaging.batch.message_count"] == 5
        assert span.attributes["messaging.system"] == "rocketmq"
        assert "messaging.message.id" not in span.attributes
        assert span.attributes["error.type"] == "consume_failure"
    finally:
        o.close()


# -- the RocketMQ Java client's metrics ---------------------------------------------------------


def test_rocketmq_clients_export_the_java_clients_metrics(
    server: Server, unique: Callable[[str], str], otel: Otel
) -> None:
    topic, group = unique("t"), unique("g")
    server.setup({topic: "NORMAL"}, [group])
    with ferrymq.Producer(server.endpoints, topics=[topic]) as p:
        for i in range(7):
            p.send(Message(topic, b"m%d" % i))
        producer_id = p.client_id
        sent = otel.collect()
    calls: list[int] = []

    def listener(m: ferrymq.MessageView) -> ferrymq.ConsumeResult:
        calls.append(1)
        # The first call fails: process time has both statuses.
        return ferrymq.ConsumeResult.FAILURE if len(calls) == 1 else ferrymq.ConsumeResult.SUCCESS

    with ferrymq.PushConsumer(server.endpoints, group, subscriptions=topic, listener=listener) as c:
        wait_for("7 acked", lambda: c.stats()["acked"] == 7, timeout=120)
        consumer_id = c.client_id
        data = otel.collect()

    cost = points(sent, "rocketmq_send_cost_time", topic=topic)
    assert [(p.count, dict(p.attributes)) for p in cost] == [
        (7, {"topic": topic, "client_id": producer_id, "invocation_status": "success"})
    ]
    (m,) = [metric(sent, "rocketmq_send_cost_time")]
    assert m.unit == "ms"
    assert list(cost[0].explicit_bounds) == [1, 5, 10, 20, 50, 200, 500]
    assert sum(cost[0].bucket_counts) == 7
    assert 0 < cost[0].min <= cost[0].max

    mine = {"topic": topic, "client_id": consumer_id, "consumer_group": group}
    process = points(data, "rocketmq_process_time", **mine)
    by_status = {p.attributes["invocation_status"]: p.count for p in process}
    assert by_status == {"failure": 1, "success": 7}
    assert list(process[0].explicit_bounds) == [1, 5, 10, 100, 10000, 60000]
    (waited,) = points(data, "rocketmq_await_time", **mine)
    assert waited.count == 8
    assert list(waited.explicit_bounds) == [1, 5, 20, 100, 1000, 5000, 10000]
    assert "invocation_status" not in waited.attributes
    # The broker says when it delivered each receive's messages (a real proxy and the
    # embedded broker alike): every delivery is measured.
    (latency,) = points(data, "rocketmq_delivery_latency", **mine)
    assert latency.count == 8
    assert latency.min >= 0
    cached = points(data, "rocketmq_consumer_cached_messages", **mine)
    assert [p.value for p in cached] == [0]
    assert [p.value for p in points(data, "rocketmq_consumer_cached_bytes", **mine)] == [0]


def test_other_protocols_have_no_rocketmq_metrics(backend: Backend, otel: Otel) -> None:
    if backend.protocol == "rocketmq":
        pytest.skip("the other protocols")
    backend.send(3)
    with backend.push_consumer(lambda m: None) as c:
        wait_for("3 acked", lambda: c.stats()["acked"] == 3)
        data = otel.collect()
    # Other tests' RocketMQ clients may still be reported: look at this test's topic only.
    assert points(data, "messaging.process.duration", messaging__destination__name=backend.topic)
    for name in (
        "rocketmq_send_cost_time",
        "rocketmq_delivery_latency",
        "rocketmq_await_time",
        "rocketmq_process_time",
        "rocketmq_consumer_cached_messages",
    ):
        assert points(data, name, topic=backend.topic) == [], name
