"""What ferrymq's telemetry costs (``--telemetry`` of ``bench_producer.py`` and
``bench_consumer.py``): the variants, the realistic "on" set-up, and the report.

* ``off``: :mod:`ferrymq.telemetry` not enabled (the first round's ``off`` runs before it was
  ever enabled; later ones after :func:`ferrymq.telemetry.disable`, which puts back the same
  hooks, all ``None``);
* ``metrics``: an SDK ``MeterProvider`` whose ``PeriodicExportingMetricReader`` collects every
  second into an exporter that drops what it gets;
* ``metrics+traces``: that, plus a ``TracerProvider`` (always-on sampler) with a
  ``BatchSpanProcessor`` into an exporter that drops what it gets;
* ``metrics+traces@1%``: the same with the sampler production tracing runs with,
  ``ParentBased(TraceIdRatioBased(0.01))``: 1 % of new traces recorded, a message's trace
  recorded when its sender's was.

Beside them, :func:`sdk_span_cost` measures what the OpenTelemetry SDK itself spends on one
recorded span (start, make current, end, into the same processor), with no ferrymq at all:
the floor of any instrumentation that records a span per operation.

Each variant gets new providers, shut down after it. :func:`plan` alternates the variants over
the rounds (their order rotates each round, so that none always runs first or last);
:func:`report` prints each variant's median rate and CPU per message, and the ratios to
``off`` of the same round (median and range).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ferrymq.telemetry
from _bench_measure import cpu_seconds

VARIANTS = ("off", "metrics", "metrics+traces", "metrics+traces@1%")
#: short names (topic and group names of the consumer benchmark)
TAGS = {"off": "off", "metrics": "m", "metrics+traces": "mt", "metrics+traces@1%": "mt1"}
SAMPLED_RATIO = 0.01
EXPORT_INTERVAL_MS = 1000


def plan(rounds: int, variants: str = ",".join(VARIANTS)) -> list[tuple[int, str]]:
    """``(round, variant)`` in the order to run them: every variant of ``variants`` (names,
    comma-separated) once per round, the order rotated by one each round."""
    names = variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--variants: unknown {sorted(unknown)}, expected some of {VARIANTS}")
    out = []
    for r in range(rounds):
        k = r % len(names)
        out += [(r, v) for v in names[k:] + names[:k]]
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``--telemetry``, ``--rounds``, ``--variants``."""
    ap.add_argument(
        "--telemetry",
        action="store_true",
        help="measure what ferrymq.telemetry costs (off / metrics / metrics+traces) instead",
    )
    ap.add_argument("--rounds", type=int, default=5, help="--telemetry: rounds of each variant")
    ap.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"--telemetry: the variants to run, comma-separated (of {', '.join(VARIANTS)})",
    )


@contextmanager
def variant(name: str) -> Iterator[None]:
    """ferrymq's telemetry as ``name`` says, for the duration of the block."""
    if name == "off":
        yield
        return
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class DropMetrics(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **_: Any) -> Any:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
            pass

    reader = PeriodicExportingMetricReader(DropMetrics(), export_interval_millis=EXPORT_INTERVAL_MS)
    meters = MeterProvider(metric_readers=[reader])
    traces = name.startswith("metrics+traces")
    tracers = None
    if traces:
        sampled = name.endswith("@1%")
        tracers = dropping_tracer_provider(
            ParentBased(TraceIdRatioBased(SAMPLED_RATIO)) if sampled else None
        )
    ferrymq.telemetry.enable(meters, tracers, traces=traces)
    try:
        yield
    finally:
        ferrymq.telemetry.disable()
        meters.shutdown()
        if tracers is not None:
            tracers.shutdown()


def dropping_tracer_provider(sampler: Any = None) -> Any:
    """A ``TracerProvider`` (``sampler``, default always on) with a ``BatchSpanProcessor``
    into an exporter that drops what it gets."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class DropSpans(SpanExporter):
        def export(self, spans: Any) -> Any:
            return SpanExportResult.SUCCESS

    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    tracers = TracerProvider(sampler=sampler if sampler is not None else ALWAYS_ON)
    tracers.add_span_processor(BatchSpanProcessor(DropSpans()))
    return tracers


@contextmanager
def always_on_tracing() -> Iterator[Any]:
    """An always-on :func:`dropping_tracer_provider`, shut down after the block; ferrymq's
    telemetry is not enabled by it."""
    tracers = dropping_tracer_provider()
    try:
        yield tracers
    finally:
        tracers.shutdown()


#: the tracing state of the slices of :func:`slices_report`, in ABBA order (so that a steady
#: drift of the machine's speed weighs on both states alike)
SLICE_ORDER = (False, True, True, False)


def slices_report(slices: list[tuple[bool, float, float, float]], note: str) -> None:
    """Print what tracing costs from ``slices``: ``(traced, seconds, messages, CPU seconds)``
    of consecutive slices of one run, traced and not in :data:`SLICE_ORDER`. Each traced
    slice is compared with the untraced slice next to it (the pairs of the ABBA order)."""
    rates, cpus = [], []
    for i in range(0, len(slices) - 1, 2):
        a, b = slices[i], slices[i + 1]
        on, off = (a, b) if a[0] else (b, a)
        if on[0] == off[0] or not on[2] or not off[2]:
            continue
        rates.append((on[2] / on[1]) / (off[2] / off[1]))
        cpus.append((on[3] / on[2]) / (off[3] / off[2]))
    print(f"\ntracing switched on and off in one run ({note}):")
    for state in (False, True):
        secs = sum(x[1] for x in slices if x[0] == state)
        msgs = sum(x[2] for x in slices if x[0] == state)
        cpu = sum(x[3] for x in slices if x[0] == state)
        if not msgs:
            continue
        print(
            f"  traces {'on ' if state else 'off'}: {msgs / secs:>10,.0f} msg/s"
            f" {cpu / msgs * 1e6:>7.2f} CPU us/msg over {secs:.1f} s"
        )
    if rates:
        print(
            f"  on/off of {len(rates)} adjacent pairs: rate {_spread(rates)},"
            f" CPU per message {_spread(cpus)}"
        )


def sdk_span_cost(spans: int = 20_000, sampled: bool = True) -> float:
    """CPU microseconds the OpenTelemetry SDK spends on one span with no ferrymq: a
    ``TracerProvider`` with a ``BatchSpanProcessor`` into an exporter that drops what it gets;
    each span started with three attributes, made current, ended. ``sampled``: an always-on
    sampler (a recorded span); else one that drops every span (the price of the decision)."""
    from opentelemetry import context, trace
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from opentelemetry.trace import SpanKind

    provider = dropping_tracer_provider(None if sampled else ALWAYS_OFF)
    tracer = provider.get_tracer("floor")
    attributes = {"messaging.operation.name": "send", "messaging.destination.name": "t"}
    t0 = cpu_seconds()
    for _ in range(spans):
        span = tracer.start_span("send t", kind=SpanKind.PRODUCER, attributes=attributes)
        token = context.attach(trace.set_span_in_context(span))
        context.detach(token)
        span.end()
    provider.shutdown()  # the processor's thread exported them all: its CPU counts too
    return (cpu_seconds() - t0) / spans * 1e6


# One measurement: (messages/s, CPU microseconds per message)
Measured = tuple[float, float]


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def report(results: dict[str, dict[str, list[Measured]]], note: str) -> None:
    """``results[scenario][variant]``: one measurement per round, in round order."""
    print(f"\ntelemetry cost ({note}); medians over rounds, ratios to off of the same round:")
    print(
        f"  {'scenario':<16} {'variant':<19} {'msg/s':>10} {'CPU us/msg':>10}"
        f"   {'rate on/off (range)':<22} {'CPU on/off (range)':<22}"
    )
    for scenario, by_variant in results.items():
        off = by_variant.get("off")
        for name in VARIANTS:
            runs = by_variant.get(name)
            if runs is None:
                continue
            line = (
                f"  {scenario:<16} {name:<19} {statistics.median(r[0] for r in runs):>10,.0f}"
                f" {statistics.median(r[1] for r in runs):>10.2f}"
            )
            if name != "off" and off is not None:
                rates = [r[0] / o[0] for r, o in zip(runs, off, strict=True)]
                cpus = [r[1] / o[1] for r, o in zip(runs, off, strict=True)]
                line += f"   {_spread(rates):<22} {_spread(cpus):<22}"
            print(line)
    if not any(name.startswith("metrics+traces") for v in results.values() for name in v):
        return
    for sampled in (True, False):
        floor = sdk_span_cost(sampled=sampled)
        what = "recorded span" if sampled else "sampled-out span"
        print(
            f"  the OpenTelemetry SDK alone (no ferrymq): {floor:.1f} CPU us per {what};"
            " as a share of off's CPU per message:"
            + "".join(
                f" {scenario} {floor / statistics.median(r[1] for r in v['off']):.0%}"
                for scenario, v in results.items()
                if v.get("off")
            )
        )
