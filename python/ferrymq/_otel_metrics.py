"""ferrymq's metrics in the user's OpenTelemetry SDK ``MeterProvider``: ferrymq as a *metric
producer* (see :mod:`ferrymq.telemetry` for why). Imported only by
:func:`ferrymq.telemetry.enable`; imports the OpenTelemetry SDK.

Each metric reader of the provider gets its collect callable wrapped (the SDK sets it on the
reader when the provider is built): a collection first runs the SDK's own, then appends one
``ScopeMetrics`` (scope ``ferrymq``) built from every live client's ``metrics_snapshot()``,
with the SDK's public data classes. The cost is per series per collection, never per message.

What is exported (the messaging semantic conventions' names; attributes ``messaging.system``,
``messaging.client.id``, ``messaging.consumer.group.name``, ``server.address``,
``server.port`` per client, and ``messaging.operation.name``, ``messaging.operation.type``,
``messaging.destination.name``, ``error.type`` per series; ``otel.metric.overflow`` on an
overflow series):

* ``messaging.client.operation.duration`` (histogram, s): every operation but ``process``;
* ``messaging.process.duration`` (histogram, s): the push consumer's listener calls;
* ``messaging.client.sent.messages`` (counter): messages of ``send`` operations;
* ``messaging.client.consumed.messages`` (counter): messages of ``receive`` operations (the
  conventions count a delivery once: at its receive, not again at its processing);
* ``ferrymq.consumer.cached.messages`` / ``ferrymq.consumer.cached.bytes`` (gauges): the push
  consumer's cache of received, unsettled messages.

RocketMQ clients also export the Java client's metrics under its names, units (ms), buckets
and attributes (``topic``, ``client_id``, ``consumer_group``, ``invocation_status``):
``rocketmq_send_cost_time``, ``rocketmq_delivery_latency``, ``rocketmq_await_time``,
``rocketmq_process_time`` (histograms) and ``rocketmq_consumer_cached_messages`` /
``rocketmq_consumer_cached_bytes`` (gauges per topic), for dashboards made for that client.

``messaging.client.id`` keeps two clients with otherwise equal attributes apart where the
protocol gives each client an id of its own (RocketMQ). Where it does not (a JMQ4 client's id
is its app's, a JetStream consumer's its group's), clients whose attributes are all equal are
one stream, and their points are added together (two points with one attribute set would be
one stream to a backend anyway). A closed client is reported once more, then left out: a
cumulative stream it shared with live clients then falls back by its figures, which a backend
reads as a reset.

Temporality follows each reader's preference for counters and histograms: cumulative series
start when the client was created; delta series are the differences from the reader's
previous collection (a reader keeps the last figures it saw of each series). A delta point's
``min`` and ``max`` are exact when the interval set a new extreme of the client's life, and
otherwise the tightest bounds its buckets give (the core keeps no per-interval extremes).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import Counter as _SdkCounter
from opentelemetry.sdk.metrics import Histogram as _SdkHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from . import _native, _registry

__all__ = ["MetricsBridge"]

_log = logging.getLogger("ferrymq.telemetry")

#: The conventions' explicit bucket boundaries of the duration histograms (s); the native
#: snapshot's 15 counts are per bucket of these, then above the last.
BOUNDS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)

_SCOPE = InstrumentationScope("ferrymq", _native.__version__)

_Collect = Callable[..., Any]
#: A series within one client: operation, destination, error type, overflow.
_SeriesKey = tuple[str, str | None, str | None, bool]


def _temporality(reader: MetricReader, kind: type) -> AggregationTemporality:
    """The reader's preferred temporality of the SDK instrument class ``kind``."""
    for cls, t in reader._instrument_class_temporality.items():
        if isinstance(cls, type) and issubclass(cls, kind):
            return t
    return AggregationTemporality.CUMULATIVE


def _client_attributes(snap: dict[str, Any]) -> dict[str, Any]:
    a: dict[str, Any] = {
        "messaging.system": snap["system"],
        "messaging.client.id": snap["client_id"],
    }
    if snap["group"] is not None:
        a["messaging.consumer.group.name"] = snap["group"]
    if snap["server_address"] is not None:
        a["server.address"] = snap["server_address"]
    if snap["server_port"] is not None:
        a["server.port"] = snap["server_port"]
    return a


def _series_attributes(base: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    a = dict(base)
    a["messaging.operation.name"] = s["operation"]
    a["messaging.operation.type"] = s["type"]
    if s["destination"] is not None:
        a["messaging.destination.name"] = s["destination"]
    if s["error_type"] is not None:
        a["error.type"] = s["error_type"]
    if s["overflow"]:
        a["otel.metric.overflow"] = True
    return a


def _rocketmq_attributes(snap: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """The Java client's attributes of one of its histograms' series."""
    a: dict[str, Any] = {"topic": s["topic"], "client_id": snap["client_id"]}
    if s["consumer"] and snap["group"] is not None:
        a["consumer_group"] = snap["group"]
    if s["status"] is not None:
        a["invocation_status"] = s["status"]
    return a


def _delta_extremes(
    s: dict[str, Any], prev: dict[str, Any], buckets: list[int], bounds: Sequence[float]
) -> tuple[float, float]:
    """``min`` and ``max`` of a delta interval (see the module documentation)."""
    nonzero = [i for i, n in enumerate(buckets) if n]
    lo_i, hi_i = nonzero[0], nonzero[-1]
    lo = bounds[lo_i - 1] if lo_i > 0 else 0.0
    hi = bounds[hi_i] if hi_i < len(bounds) else float(s["max"])
    mn = float(s["min"]) if s["min"] < prev["min"] else max(lo, float(s["min"]))
    mx = float(s["max"]) if s["max"] > prev["max"] else min(hi, float(s["max"]))
    return mn, max(mn, mx)


def _merge_histograms(pts: Sequence[HistogramDataPoint]) -> list[HistogramDataPoint]:
    """One point per attribute set: clients whose attributes are all equal (two JMQ4 consumers
    of one app, whose client id is the app's) form one stream, as the SDK's own instruments
    would aggregate them."""
    out: dict[frozenset[tuple[str, Any]], HistogramDataPoint] = {}
    for p in pts:
        key = frozenset(p.attributes.items()) if p.attributes else frozenset()
        q = out.get(key)
        out[key] = (
            p
            if q is None
            else HistogramDataPoint(
                attributes=q.attributes,
                start_time_unix_nano=min(q.start_time_unix_nano, p.start_time_unix_nano),
                time_unix_nano=max(q.time_unix_nano, p.time_unix_nano),
                count=q.count + p.count,
                sum=q.sum + p.sum,
                bucket_counts=[
                    a + b for a, b in zip(q.bucket_counts, p.bucket_counts, strict=True)
                ],
                explicit_bounds=q.explicit_bounds,
                min=min(q.min, p.min),
                max=max(q.max, p.max),
            )
        )
    return list(out.values())


def _merge_numbers(pts: Sequence[NumberDataPoint]) -> list[NumberDataPoint]:
    """One point per attribute set, the values added (counters, and the cache gauges: what
    consumers sharing every attribute hold together)."""
    out: dict[frozenset[tuple[str, Any]], NumberDataPoint] = {}
    for p in pts:
        key = frozenset(p.attributes.items()) if p.attributes else frozenset()
        q = out.get(key)
        out[key] = (
            p
            if q is None
            else NumberDataPoint(
                q.attributes,
                min(q.start_time_unix_nano, p.start_time_unix_nano),
                max(q.time_unix_nano, p.time_unix_nano),
                q.value + p.value,
            )
        )
    return list(out.values())


class _ReaderState:
    """What one reader remembers between its collections (delta temporality, closed clients)."""

    def __init__(self) -> None:
        self.last_time: int | None = None
        #: Client → its series' figures at the previous collection.
        self.previous: weakref.WeakKeyDictionary[Any, dict[_SeriesKey, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )
        #: Closed clients whose final figures this reader reported.
        self.finished: weakref.WeakSet[Any] = weakref.WeakSet()


class _Points:
    def __init__(self) -> None:
        self.duration: list[HistogramDataPoint] = []
        self.process: list[HistogramDataPoint] = []
        self.sent: list[NumberDataPoint] = []
        self.consumed: list[NumberDataPoint] = []
        self.cached_messages: list[NumberDataPoint] = []
        self.cached_bytes: list[NumberDataPoint] = []
        #: The Java client's histograms by name, and its cache gauges.
        self.rocketmq: dict[str, list[HistogramDataPoint]] = {}
        self.rocketmq_cached_messages: list[NumberDataPoint] = []
        self.rocketmq_cached_bytes: list[NumberDataPoint] = []


class MetricsBridge:
    """The wrapped collects of one ``MeterProvider``'s readers."""

    def __init__(self, provider: MeterProvider) -> None:
        readers = getattr(provider, "_metric_readers", None)
        if readers is None:
            raise TypeError(
                "meter_provider: this OpenTelemetry SDK MeterProvider has no metric readers "
                "that ferrymq can find (unsupported SDK version?)"
            )
        self._provider = provider
        config = getattr(provider, "_sdk_config", None)
        resource = getattr(config, "resource", None)
        self._resource: Resource = resource if resource is not None else Resource.create({})
        self._lock = threading.Lock()
        self._wrapped: list[tuple[MetricReader, _Collect, _Collect]] = []
        for reader in readers:
            original = reader._collect
            if original is None:
                continue
            state = _ReaderState()

            def collect(
                r: MetricReader,
                timeout_millis: float = 10_000,
                *,
                _original: _Collect = original,
                _state: _ReaderState = state,
            ) -> MetricsData | None:
                return self._collect(r, _original, _state, timeout_millis)

            reader._set_collect_callback(collect)
            self._wrapped.append((reader, original, collect))

    @property
    def provider(self) -> MeterProvider:
        return self._provider

    def close(self) -> None:
        """Give every reader its own collect back."""
        for reader, original, wrapper in self._wrapped:
            if reader._collect is wrapper:
                reader._set_collect_callback(original)
        self._wrapped.clear()

    # -- one collection ------------------------------------------------------------------

    def _collect(
        self,
        reader: MetricReader,
        original: _Collect,
        state: _ReaderState,
        timeout_millis: float,
    ) -> MetricsData | None:
        data: MetricsData | None = original(reader, timeout_millis=timeout_millis)
        try:
            with self._lock:
                metrics = self._metrics(reader, state)
        except Exception:  # never break the user's collection
            _log.exception("ferrymq metrics left out of this collection")
            return data
        if not metrics:
            return data
        scope = ScopeMetrics(scope=_SCOPE, metrics=metrics, schema_url="")
        if data is None or not data.resource_metrics:
            return MetricsData(
                resource_metrics=[
                    ResourceMetrics(resource=self._resource, scope_metrics=[scope], schema_url="")
                ]
            )
        first, *rest = data.resource_metrics
        merged = ResourceMetrics(
            resource=first.resource,
            scope_metrics=[*first.scope_metrics, scope],
            schema_url=first.schema_url,
        )
        return MetricsData(resource_metrics=[merged, *rest])

    def _metrics(self, reader: MetricReader, state: _ReaderState) -> list[Metric]:
        now = time.time_ns()
        hist_t = _temporality(reader, _SdkHistogram)
        sum_t = _temporality(reader, _SdkCounter)
        points = _Points()
        for client, created in _registry.clients():
            if client in state.finished:
                continue
            snapshot = getattr(client._impl, "metrics_snapshot", None)
            snap = snapshot() if snapshot is not None else None
            if snap is None:
                continue
            if snap["closed"]:
                state.finished.add(client)
            previous = state.previous.get(client, {})
            current: dict[_SeriesKey, dict[str, Any]] = {}
            base = _client_attributes(snap)
            since = state.last_time if state.last_time is not None else created
            for s in snap["series"]:
                key: _SeriesKey = (s["operation"], s["destination"], s["error_type"], s["overflow"])
                current[key] = s
                attrs = _series_attributes(base, s)
                self._series(
                    points, s, previous.get(key), attrs, created, since, now, hist_t, sum_t
                )
            for s in snap.get("rocketmq", ()):
                key = (s["name"], s["topic"], s["status"], True)
                current[key] = s
                attrs = _rocketmq_attributes(snap, s)
                prev = previous.get(key)
                point = _histogram_point(s, prev, attrs, s["bounds"], created, since, now, hist_t)
                if point is not None:
                    points.rocketmq.setdefault(s["name"], []).append(point)
            state.previous[client] = current
            for name, value in snap["gauges"].items():
                target = getattr(points, name, None)
                if target is not None:
                    target.append(NumberDataPoint(base, created, now, value))
            for topic, (messages, size) in snap.get("cached_by_topic", {}).items():
                attrs = {"topic": topic, "client_id": snap["client_id"]}
                if snap["group"] is not None:
                    attrs["consumer_group"] = snap["group"]
                points.rocketmq_cached_messages.append(
                    NumberDataPoint(attrs, created, now, messages)
                )
                points.rocketmq_cached_bytes.append(NumberDataPoint(attrs, created, now, size))
        state.last_time = now
        return self._assemble(points, hist_t, sum_t)

    @staticmethod
    def _series(
        points: _Points,
        s: dict[str, Any],
        prev: dict[str, Any] | None,
        attrs: dict[str, Any],
        created: int,
        since: int,
        now: int,
        hist_t: AggregationTemporality,
        sum_t: AggregationTemporality,
    ) -> None:
        point = _histogram_point(s, prev, attrs, BOUNDS, created, since, now, hist_t)
        if point is not None:
            (points.process if s["operation"] == "process" else points.duration).append(point)
        target = {"send": points.sent, "receive": points.consumed}.get(s["operation"])
        if target is None:
            return
        value, calls, start = s["messages"], s["calls"], created
        if sum_t is AggregationTemporality.DELTA:
            start = since
            if prev is not None:
                value -= prev["messages"]
                calls -= prev["calls"]
        if calls > 0 or sum_t is AggregationTemporality.CUMULATIVE:
            target.append(NumberDataPoint(attrs, start, now, value))

    @staticmethod
    def _assemble(
        p: _Points, hist_t: AggregationTemporality, sum_t: AggregationTemporality
    ) -> list[Metric]:
        out: list[Metric] = []

        def hist(name: str, desc: str, pts: Sequence[HistogramDataPoint], unit: str = "s") -> None:
            if pts:
                out.append(Metric(name, desc, unit, Histogram(_merge_histograms(pts), hist_t)))

        def counter(name: str, desc: str, pts: Sequence[NumberDataPoint]) -> None:
            if pts:
                out.append(Metric(name, desc, "{message}", Sum(_merge_numbers(pts), sum_t, True)))

        def gauge(name: str, desc: str, unit: str, pts: Sequence[NumberDataPoint]) -> None:
            if pts:
                out.append(Metric(name, desc, unit, Gauge(_merge_numbers(pts))))

        hist(
            "messaging.client.operation.duration",
            "Duration of messaging operation initiated by a producer or consumer client.",
            p.duration,
        )
        hist("messaging.process.duration", "Duration of processing operation.", p.process)
        counter(
            "messaging.client.sent.messages",
            "Number of messages producer attempted to send to the broker.",
            p.sent,
        )
        counter(
            "messaging.client.consumed.messages",
            "Number of messages that were delivered to the application.",
            p.consumed,
        )
        gauge(
            "ferrymq.consumer.cached.messages",
            "Messages a push consumer received and has not settled yet.",
            "{message}",
            p.cached_messages,
        )
        gauge(
            "ferrymq.consumer.cached.bytes",
            "Body bytes of the messages a push consumer received and has not settled yet.",
            "By",
            p.cached_bytes,
        )
        for name, desc in _ROCKETMQ_HISTOGRAMS.items():
            hist(name, desc, p.rocketmq.get(name, ()), "ms")
        gauge(
            "rocketmq_consumer_cached_messages",
            "Messages cached by the push consumer, per topic (the RocketMQ Java client's).",
            "1",
            p.rocketmq_cached_messages,
        )
        gauge(
            "rocketmq_consumer_cached_bytes",
            "Bytes cached by the push consumer, per topic (the RocketMQ Java client's).",
            "By",
            p.rocketmq_cached_bytes,
        )
        return out


#: The RocketMQ Java client's histograms and what they measure.
_ROCKETMQ_HISTOGRAMS = {
    "rocketmq_send_cost_time": "Time of each send, per message (the RocketMQ Java client's).",
    "rocketmq_delivery_latency": (
        "From the broker's delivery to the end of the receive (the RocketMQ Java client's)."
    ),
    "rocketmq_await_time": (
        "From a message's receive to its listener call (the RocketMQ Java client's)."
    ),
    "rocketmq_process_time": "Time of each listener call (the RocketMQ Java client's).",
}


def _histogram_point(
    s: dict[str, Any],
    prev: dict[str, Any] | None,
    attrs: dict[str, Any],
    bounds: Sequence[float],
    created: int,
    since: int,
    now: int,
    hist_t: AggregationTemporality,
) -> HistogramDataPoint | None:
    """The point of one histogram series (``None`` when a delta interval saw nothing)."""
    buckets = list(s["buckets"])
    count, total = s["count"], s["sum"]
    mn, mx = float(s["min"]), float(s["max"])
    start = created
    if hist_t is AggregationTemporality.DELTA:
        start = since
        if prev is not None:
            buckets = [a - b for a, b in zip(buckets, prev["buckets"], strict=True)]
            count -= prev["count"]
            total -= prev["sum"]
            if count > 0:
                mn, mx = _delta_extremes(s, prev, buckets, bounds)
    if count <= 0:
        return None
    return HistogramDataPoint(
        attributes=attrs,
        start_time_unix_nano=start,
        time_unix_nano=now,
        count=count,
        sum=max(total, 0.0),
        bucket_counts=buckets,
        explicit_bounds=list(bounds),
        min=mn,
        max=mx,
    )
