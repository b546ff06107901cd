"""ferrymq's metrics and spans in your OpenTelemetry SDK (``pip install 'ferrymq[otel]'``).

Configure the OpenTelemetry Python SDK as usual (a ``MeterProvider`` with its metric readers,
a ``TracerProvider`` with its span processors), then::

    import ferrymq.telemetry
    ferrymq.telemetry.enable()            # the global providers; or pass them

and every ferrymq client, created before or after, shows up there: the messaging semantic
conventions' metrics (``messaging.client.operation.duration``,
``messaging.process.duration``, ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``) under the instrumentation scope ``ferrymq``, and spans
that carry the W3C trace context from producer to consumer over every protocol. See
``_otel_metrics.py`` and ``_otel_traces.py`` for exactly what is exported.

**Why metrics are not OpenTelemetry instruments.** The clients record in Rust (once per RPC
or batch, no GIL). The SDK's synchronous histograms take one Python call per value (there is
no weighted or pre-aggregated input), which at 100,000 messages a second would cost more than
the 5% ferrymq allows itself. So ferrymq is a *metric producer*: each reader's collection
(periodic export, ``InMemoryMetricReader.get_metrics_data()``, …) appends ferrymq's series,
read once from each client's exact counts and buckets (``metrics_snapshot()``), as the
SDK's own data classes, in the reader's preferred temporality. Nothing is done per message;
when telemetry is off, nothing is done at all.

The SDK has no public hook for producers yet: ferrymq wraps the collect callable the SDK
sets on each reader when the provider is built (``opentelemetry-sdk`` ``>=1.26,<2``, the
versions the ``otel`` extra allows; a ``MeterProvider`` that is not the SDK's is refused).
"""

from __future__ import annotations

import threading
from typing import Any

from . import _hooks, _native

__all__ = ["disable", "enable", "enabled"]

_INSTALL = "pip install 'ferrymq[otel]'"

_lock = threading.Lock()
_metrics: Any = None  # _otel_metrics.MetricsBridge while enabled
_tracing: Any = None  # _otel_traces.Tracing while enabled


def enable(
    meter_provider: Any = None,
    tracer_provider: Any = None,
    *,
    metrics: bool = True,
    traces: bool = True,
) -> None:
    """Report ferrymq's metrics to ``meter_provider`` and its spans to ``tracer_provider``
    (default: the global providers of ``opentelemetry.metrics`` / ``opentelemetry.trace``).

    ``metrics=False`` or ``traces=False`` leaves that part off. ``meter_provider`` must be an
    OpenTelemetry SDK ``MeterProvider`` (the global one too, so set it before); its readers
    collect ferrymq's metrics from now on. Enabling again replaces the previous providers.

    Raises ``ImportError`` (naming ``pip install 'ferrymq[otel]'``) when the OpenTelemetry SDK
    is not installed, and ``TypeError`` for a provider ferrymq cannot report to.
    """
    try:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.metrics import MeterProvider
    except ImportError as e:
        raise ImportError(f"ferrymq.telemetry needs the OpenTelemetry SDK: {_INSTALL}") from e
    from . import _otel_metrics, _otel_traces

    bridge = None
    if metrics:
        provider = (
            meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        )
        if not isinstance(provider, MeterProvider):
            raise TypeError(
                f"meter_provider: ferrymq reports its metrics to an OpenTelemetry SDK "
                f"MeterProvider (opentelemetry.sdk.metrics.MeterProvider), not "
                f"{type(provider).__name__}; set one globally or pass it"
            )
        sdk_provider = provider
    elif meter_provider is not None:
        raise TypeError("meter_provider: given with metrics=False")
    tracing = None
    if traces:
        tp = tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
        if not hasattr(tp, "get_tracer"):
            raise TypeError(
                f"tracer_provider: must be an OpenTelemetry TracerProvider, not {type(tp).__name__}"
            )
        tracing = _otel_traces.Tracing(tp)
    elif tracer_provider is not None:
        raise TypeError("tracer_provider: given with traces=False")
    with _lock:
        _uninstall()
        if metrics:
            bridge = _otel_metrics.MetricsBridge(sdk_provider)
        _install(bridge, tracing)


def disable() -> None:
    """Stop reporting: the readers collect only their own metrics again, and no span is made.
    Idempotent."""
    with _lock:
        _uninstall()


def enabled() -> dict[str, bool]:
    """``{"metrics": …, "traces": …}``: what is on now."""
    return {"metrics": _metrics is not None, "traces": _tracing is not None}


def _install(bridge: Any, tracing: Any) -> None:
    global _metrics, _tracing
    _metrics = bridge
    _tracing = tracing
    if tracing is not None:
        _hooks.send = tracing.send
        _hooks.send_async = tracing.send_async
        _hooks.stamp = tracing.stamp
        _hooks.stamp_headers = tracing.stamp_headers
        _hooks.receive = tracing.receive
        _hooks.receive_async = tracing.receive_async
        _hooks.process_async = tracing.process_async
        _native.set_process_hook(tracing.process)


def _uninstall() -> None:
    global _metrics, _tracing
    if _metrics is not None:
        _metrics.close()
    _metrics = None
    _tracing = None
    _native.set_process_hook(None)
    _hooks.send = None
    _hooks.send_async = None
    _hooks.stamp = None
    _hooks.stamp_headers = None
    _hooks.receive = None
    _hooks.receive_async = None
    _hooks.process_async = None
