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
* A push consumer's listener calls run in a CONSUMER span ``process {topic}``, one per batch
  the consumer hands its listener (the messaging conventions allow a process span over several
  messages, linked to each one's creation context; a span per message cost several times what
  a trivial listener costs). While the hook is set, the consumption threads gather fuller
  batches: when messages arrive fast, up to 2 ms of arrivals (about 1 ms of listener calls)
  instead of one receive's.
  The span links to each distinct creation context of the batch, as the conventions ask of
  consumer spans; when the batch carries exactly one (a single message, or a batch produced
  in one span), that is also its parent, so the trace continues across the broker. Otherwise
  the span is a child of nothing (a new trace). A one-message batch has
  ``messaging.message.id``, a larger one ``messaging.batch.message_count``. An ``async def``
  listener's calls run one span each (each is its own task).
* ``SimpleConsumer.receive`` runs in a CONSUMER span ``receive {topic}`` (or ``receive``
  with several topics) with a link to each received message's creation context.

Received trace contexts are read with the W3C ``TraceContextTextMapPropagator`` (each distinct
one once: the last 1024 are remembered); invalid ones are ignored. Spans are started with
``start_span`` and made current by hand, with their attributes and names made once per topic,
which costs a third of ``start_as_current_span`` (and is what it does: an exception in the
call is recorded on the span, whose status is then ERROR).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import _native

__all__ = ["Tracing"]

_PROPAGATOR = TraceContextTextMapPropagator()
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"  # W3C names, as headers and properties
_FAILURE = _native.ConsumeResult.FAILURE
_CACHED = 1024  # distinct received contexts, and topics, remembered
_contexts: dict[tuple[str, str | None], Context | None] = {}


def _parse(parent: str, state: str | None) -> Context | None:
    key = (parent, state)
    try:
        return _contexts[key]
    except KeyError:
        pass
    carrier = {"traceparent": parent}
    if state:
        carrier["tracestate"] = state
    ctx: Context | None = _PROPAGATOR.extract(carrier, context=Context())
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        ctx = None
    if len(_contexts) >= _CACHED:
        _contexts.clear()
    _contexts[key] = ctx
    return ctx


def creation_context(message: Any) -> Context | None:
    """The creation context a message carries (a valid W3C one), else None."""
    parent = message.trace_context
    if not parent:
        return None
    return _parse(parent, message.trace_state)


def _link(ctx: Context | None) -> list[Link]:
    if ctx is None:
        return []
    return [Link(trace.get_current_span(ctx).get_span_context())]


def _carrier(span_context: Any) -> tuple[str, str | None] | None:
    """``(traceparent, tracestate)`` of a span context, as the W3C propagator writes them;
    None for an invalid one."""
    if not span_context.is_valid:
        return None
    parent = "00-%032x-%016x-%02x" % (  # noqa: UP031 (the fastest of the three ways here)
        span_context.trace_id,
        span_context.span_id,
        span_context.trace_flags,
    )
    state = span_context.trace_state
    return parent, (state.to_header() or None) if state else None


def _with_context(message: Any, carrier: tuple[str, str | None] | None) -> Any:
    if carrier is None or message.trace_context is not None:
        return message
    return message.with_trace_context(*carrier)


class _Current:
    """A started span made current until :meth:`end` (what ``start_as_current_span`` does,
    without its generator-based context manager)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.token = otel_context.attach(trace.set_span_in_context(span))

    def end(self, error: BaseException | None = None) -> None:
        otel_context.detach(self.token)
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        self.span.end()


class Tracing:
    """The span hooks of one ``TracerProvider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer("ferrymq", _native.__version__)
        # topic -> (span name, attributes): made once per topic (the SDK copies attributes)
        self._send: dict[str, tuple[str, dict[str, Any]]] = {}
        # (id of the consumer's attributes, topic) -> (attributes dict kept alive, name, attrs)
        self._process: dict[tuple[int, str], tuple[Any, str, dict[str, Any]]] = {}

    # -- producers ---------------------------------------------------------------------------

    def _send_span(self, message: Any) -> Any:
        topic = message.topic
        made = self._send.get(topic)
        if made is None:
            if len(self._send) >= _CACHED:
                self._send.clear()
            made = self._send[topic] = (
                f"send {topic}",
                {
                    "messaging.operation.name": "send",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": topic,
                },
            )
        own = creation_context(message) if message.trace_context is not None else None
        return self._tracer.start_span(
            made[0], kind=SpanKind.PRODUCER, attributes=made[1], links=_link(own)
        )

    def send(self, message: Any, call: Callable[[Any], Any]) -> Any:
        span = self._send_span(message)
        message = _with_context(message, _carrier(span.get_span_context()))
        if not span.is_recording():
            # Sampled out: the message still carries the (unsampled) context, so that the
            # consumer's side follows the decision; nothing else is worth doing for the span.
            return call(message)
        current = _Current(span)
        try:
            receipt = call(message)
            _receipt_attributes(span, receipt)
        except BaseException as e:
            current.end(e)
            raise
        current.end()
        return receipt

    async def send_async(self, message: Any, call: Callable[[Any], Awaitable[Any]]) -> Any:
        span = self._send_span(message)
        message = _with_context(message, _carrier(span.get_span_context()))
        if not span.is_recording():
            return await call(message)
        current = _Current(span)
        try:
            receipt = await call(message)
            _receipt_attributes(span, receipt)
        except BaseException as e:
            current.end(e)
            raise
        current.end()
        return receipt

    def stamp(self, messages: Iterable[Any]) -> list[Any]:
        carrier = _carrier(trace.get_current_span().get_span_context())
        if carrier is None:
            return messages if isinstance(messages, list) else list(messages)
        return [_with_context(m, carrier) for m in messages]

    def stamp_headers(self, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        if headers is not None and TRACEPARENT in headers:
            return headers
        carrier = _carrier(trace.get_current_span().get_span_context())
        if carrier is None:
            return headers
        out = dict(headers) if headers is not None else {}
        out[TRACEPARENT] = carrier[0]
        if carrier[1]:
            out[TRACESTATE] = carrier[1]
        return out

    # -- consumers ---------------------------------------------------------------------------

    def _process_attributes(
        self, attributes: dict[str, object], topic: str
    ) -> tuple[str, dict[str, Any]]:
        key = (id(attributes), topic)
        made = self._process.get(key)
        if made is None or made[0] is not attributes:
            if len(self._process) >= _CACHED:
                self._process.clear()
            attrs: dict[str, Any] = dict(attributes)
            attrs["messaging.operation.name"] = "process"
            attrs["messaging.operation.type"] = "process"
            attrs["messaging.destination.name"] = topic
            made = self._process[key] = (attributes, f"process {topic}", attrs)
        return made[1], made[2]

    def process(self, messages: list[Any], attributes: dict[str, object]) -> Callable[[int], None]:
        """The process span of one batch of listener calls (``_native.set_process_hook``):
        started and made current now; the returned ``end(failed)`` ends it."""
        first = messages[0]
        name, attrs = self._process_attributes(attributes, first.topic)
        if len(messages) == 1:
            attrs = {**attrs, "messaging.message.id": first.message_id}
        else:
            attrs = {**attrs, "messaging.batch.message_count": len(messages)}
        contexts: dict[tuple[str, str | None], Context | None] = {}
        for m in messages:
            parent = m.trace_context
            if parent:
                key = (parent, m.trace_state)
                if key not in contexts:
                    contexts[key] = _parse(*key)
        valid = [c for c in contexts.values() if c is not None]
        parent_ctx = valid[0] if len(valid) == 1 else Context()
        links = [Link(trace.get_current_span(c).get_span_context()) for c in valid]
        span = self._tracer.start_span(
            name, context=parent_ctx, kind=SpanKind.CONSUMER, attributes=attrs, links=links
        )
        current = _Current(span)

        def end(failed: int) -> None:
            if failed:
                _failed(span)
            current.end()

        return end

    def _process_span(self, message: Any, attributes: dict[str, object]) -> Any:
        ctx = creation_context(message)
        name, attrs = self._process_attributes(attributes, message.topic)
        return self._tracer.start_as_current_span(
            name,
            context=ctx if ctx is not None else Context(),
            kind=SpanKind.CONSUMER,
            attributes={**attrs, "messaging.message.id": message.message_id},
            links=_link(ctx),
        )

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
            if span.is_recording():
                _received(span, messages)
            return messages

    async def receive_async(
        self, consumer: Any, call: Callable[[], Awaitable[list[Any]]]
    ) -> list[Any]:
        with self._receive_span(consumer) as span:
            messages = await call()
            if span.is_recording():
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
