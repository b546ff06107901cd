"""ferrymq's spans in the user's OpenTelemetry ``TracerProvider``: the hooks
:func:`ferrymq.telemetry.enable` installs in ``ferrymq._hooks`` (and the native listener
bridge). Imported only by it; imports the OpenTelemetry API.

* A single send (``Producer.send`` / ``send_async``) runs in a PRODUCER span ``send {topic}``
  (a child of the current span) whose context the message carries on the wire (its
  ``trace_context`` / ``trace_state``), unless the message already carries one: then that is
  the message's creation context and the span links to it.
* The high-rate paths (``produce``, ``send_batch``, the managed publisher) create no span per
  message: each message without a trace context gets the current span's, so that the
  consumer's span continues the caller's trace.
* A push consumer's listener call runs in a CONSUMER span ``process {topic}``. Its parent is
  the message's creation context (the trace continues across the broker), and it also links
  to it, as the messaging conventions ask of consumer spans (a backend that shows only
  links, or only parents, finds the producer either way). Without a valid context the span is
  a child of nothing (a new trace).
* ``SimpleConsumer.receive`` runs in a CONSUMER span ``receive {topic}`` (or ``receive``
  with several topics) with a link to each received message's creation context.

Received trace contexts are read with the W3C ``TraceContextTextMapPropagator``; invalid ones
are ignored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import _native

__all__ = ["Tracing"]

_PROPAGATOR = TraceContextTextMapPropagator()
_FAILURE = _native.ConsumeResult.FAILURE


def creation_context(message: Any) -> Context | None:
    """The creation context a message carries (a valid W3C one), else None."""
    parent = message.trace_context
    if not parent:
        return None
    carrier = {"traceparent": parent}
    state = message.trace_state
    if state:
        carrier["tracestate"] = state
    ctx = _PROPAGATOR.extract(carrier, context=Context())
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def _link(ctx: Context | None) -> list[Link]:
    if ctx is None:
        return []
    return [Link(trace.get_current_span(ctx).get_span_context())]


def _carrier_of_current() -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def _with_context(message: Any, carrier: dict[str, str]) -> Any:
    parent = carrier.get("traceparent")
    if parent is None or message.trace_context is not None:
        return message
    return message.with_trace_context(parent, carrier.get("tracestate"))


class Tracing:
    """The span hooks of one ``TracerProvider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer("ferrymq", _native.__version__)

    # -- producers ---------------------------------------------------------------------------

    def _send_span(self, message: Any) -> Any:
        own = creation_context(message) if message.trace_context is not None else None
        return self._tracer.start_as_current_span(
            f"send {message.topic}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "messaging.destination.name": message.topic,
            },
            links=_link(own),
        )

    def send(self, message: Any, call: Callable[[Any], Any]) -> Any:
        with self._send_span(message) as span:
            receipt = call(_with_context(message, _carrier_of_current()))
            _receipt_attributes(span, receipt)
            return receipt

    async def send_async(self, message: Any, call: Callable[[Any], Awaitable[Any]]) -> Any:
        with self._send_span(message) as span:
            receipt = await call(_with_context(message, _carrier_of_current()))
            _receipt_attributes(span, receipt)
            return receipt

    def stamp(self, messages: Iterable[Any]) -> list[Any]:
        carrier = _carrier_of_current()
        if "traceparent" not in carrier:
            return list(messages)
        return [_with_context(m, carrier) for m in messages]

    # -- consumers ---------------------------------------------------------------------------

    def _process_span(self, message: Any, attributes: dict[str, object]) -> Any:
        ctx = creation_context(message)
        attrs: dict[str, Any] = dict(attributes)
        attrs.update(
            {
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.destination.name": message.topic,
                "messaging.message.id": message.message_id,
            }
        )
        return self._tracer.start_as_current_span(
            f"process {message.topic}",
            context=ctx if ctx is not None else Context(),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=_link(ctx),
        )

    def process(self, listener: Callable[[Any], Any], message: Any, attributes: Any) -> Any:
        with self._process_span(message, attributes) as span:
            result = listener(message)
            if result is _FAILURE:
                _failed(span)
            return result

    async def process_async(
        self, listener: Callable[[Any], Awaitable[Any]], message: Any, attributes: Any
    ) -> Any:
        with self._process_span(message, attributes) as span:
            result = await listener(message)
            if result is _FAILURE:
                _failed(span)
            return result

    def _receive_span(self, consumer: Any) -> Any:
        topics = sorted(consumer.subscriptions)
        attrs: dict[str, Any] = {
            "messaging.system": consumer.protocol,
            "messaging.operation.name": "receive",
            "messaging.operation.type": "receive",
            "messaging.consumer.group.name": consumer.group,
        }
        name = "receive"
        if len(topics) == 1:
            attrs["messaging.destination.name"] = topics[0]
            name = f"receive {topics[0]}"
        return self._tracer.start_as_current_span(name, kind=SpanKind.CONSUMER, attributes=attrs)

    def receive(self, consumer: Any, call: Callable[[], list[Any]]) -> list[Any]:
        with self._receive_span(consumer) as span:
            messages = call()
            _received(span, messages)
            return messages

    async def receive_async(
        self, consumer: Any, call: Callable[[], Awaitable[list[Any]]]
    ) -> list[Any]:
        with self._receive_span(consumer) as span:
            messages = await call()
            _received(span, messages)
            return messages


def _receipt_attributes(span: Any, receipt: Any) -> None:
    message_id = getattr(receipt, "message_id", None)
    if isinstance(message_id, str):
        span.set_attribute("messaging.message.id", message_id)


def _failed(span: Any) -> None:
    span.set_attribute("error.type", "consume_failure")
    span.set_status(Status(StatusCode.ERROR, "the listener returned FAILURE"))


def _received(span: Any, messages: list[Any]) -> None:
    span.set_attribute("messaging.batch.message_count", len(messages))
    for m in messages:
        ctx = creation_context(m)
        if ctx is not None:
            span.add_link(trace.get_current_span(ctx).get_span_context())
