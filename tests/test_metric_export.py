"""OTLP export of the RocketMQ Java client's histograms to the collector the broker announces
in the clients' settings (``Settings.metric``), as the Java client does: a collector started
by the test (gRPC ``MetricsService/Export``, decoded with the OTLP protos) receives the
``rocketmq_*`` histograms of a producer and of a push consumer when they close."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

import ferrymq
from ferrymq.testing import EmbeddedBroker
from waiting import wait_for


class Collector:
    """An OTLP/gRPC metrics collector on a free loopback port, keeping every request."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.metrics.v1.MetricsService",
            {"Export": grpc.unary_unary_rpc_method_handler(self._export)},
        )
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _export(self, request: bytes, context: object) -> bytes:
        with self._lock:
            self.requests.append(
                metrics_service_pb2.ExportMetricsServiceRequest.FromString(request)
            )
        return b""  # an empty ExportMetricsServiceResponse

    def points(self, name: str) -> list[tuple[Any, Any]]:
        """``(metric, data point)`` of every histogram point named ``name`` received."""
        with self._lock:
            out = []
            for req in self.requests:
                for rm in req.resource_metrics:
                    for sm in rm.scope_metrics:
                        for m in sm.metrics:
                            if m.name == name:
                                out += [(m, p) for p in m.histogram.data_points]
            return out

    def stop(self) -> None:
        self._server.stop(None)


def attributes(point: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in point.attributes}


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.stop()


def test_clients_export_to_the_collector_the_broker_announces(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str], collector: Collector
) -> None:
    b = make_broker(metric_collector=f"127.0.0.1:{collector.port}")
    topic, group = unique("t"), unique("g")
    b.create_topic(topic, "NORMAL", 2)
    with ferrymq.Producer(b.endpoints, topics=[topic]) as p:
        for i in range(5):
            p.send(ferrymq.Message(topic, b"m%d" % i))
        producer_id = p.client_id
    # close() waited for the last export.
    sends = collector.points("rocketmq_send_cost_time")
    assert sends, collector.requests
    metric, point = sends[-1]
    assert metric.unit == "ms"
    assert metric.histogram.aggregation_temporality == 2  # cumulative, as the Java client's
    assert attributes(point) == {
        "topic": topic,
        "client_id": producer_id,
        "invocation_status": "success",
    }
    assert point.count == 5
    assert sum(point.bucket_counts) == 5
    assert list(point.explicit_bounds) == [1, 5, 10, 20, 50, 200, 500]
    assert 0 < point.min <= point.max
    assert point.start_time_unix_nano < point.time_unix_nano

    with ferrymq.PushConsumer(
        b.endpoints, group, subscriptions=topic, listener=lambda m: None
    ) as c:
        wait_for("5 acked", lambda: c.stats()["acked"] == 5)
        consumer_id = c.client_id
    mine = {"topic": topic, "client_id": consumer_id, "consumer_group": group}
    process = [pt for _, pt in collector.points("rocketmq_process_time")]
    assert [
        pt.count for pt in process if attributes(pt) == {**mine, "invocation_status": "success"}
    ][-1] == 5
    awaited = [pt for _, pt in collector.points("rocketmq_await_time") if attributes(pt) == mine]
    assert awaited[-1].count == 5
    latency = [
        pt for _, pt in collector.points("rocketmq_delivery_latency") if attributes(pt) == mine
    ]
    assert latency[-1].count == 5
    resource = {
        kv.key: kv.value.string_value
        for kv in collector.requests[-1].resource_metrics[0].resource.attributes
    }
    assert resource["telemetry.sdk.name"] == "ferrymq"


def test_no_collector_announced_means_no_export(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str], collector: Collector
) -> None:
    b = make_broker()
    topic = unique("t")
    b.create_topic(topic, "NORMAL", 1)
    with ferrymq.Producer(b.endpoints, topics=[topic]) as p:
        p.send(ferrymq.Message(topic, b"x"))
    assert collector.requests == []


def test_an_unreachable_collector_does_not_hold_the_client_up(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str]
) -> None:
    unused = Collector()
    port = unused.port
    unused.stop()  # nothing listens there now
    b = make_broker(metric_collector=f"127.0.0.1:{port}")
    topic = unique("t")
    b.create_topic(topic, "NORMAL", 1)
    with ferrymq.Producer(b.endpoints, topics=[topic]) as p:
        assert p.send(ferrymq.Message(topic, b"still sent")).message_id


@pytest.mark.parametrize("value", ["nope", "127.0.0.1:0", "127.0.0.1:99999", ":4317"])
def test_a_bad_collector_address_names_the_option(value: str) -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match="metric_collector"):
        EmbeddedBroker(metric_collector=value)
