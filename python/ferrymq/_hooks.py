"""Where :mod:`ferrymq.telemetry` plugs its spans in while tracing is enabled. Each hook is
``None`` when tracing is off, so that off costs one module attribute read per call (per batch
for listeners). Imports nothing: ``import ferrymq`` must not import OpenTelemetry.

* ``send(message, call)`` / ``send_async(message, call)``: around a producer's single send;
  ``call(message)`` sends the (possibly re-contexted) message;
* ``stamp(messages)``: the high-rate paths (``produce``, ``send_batch``, the publisher) put
  the current span's context on messages that carry none, without a span per message;
* ``stamp_headers(headers)``: the same for the publisher's subject-and-body form: the headers
  (NATS headers, RocketMQ / JMQ4 properties) with ``traceparent`` / ``tracestate`` added
  unless they have a ``traceparent``;
* ``receive(consumer, call)`` / ``receive_async(consumer, call)``: around a simple
  consumer's receive;
* ``process_async(listener, message, attributes)``: an ``async def`` listener's call (a
  plain callable's goes through ``_native.set_process_hook``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

send: Callable[[Any, Callable[[Any], Any]], Any] | None = None
send_async: Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]] | None = None
stamp: Callable[[Iterable[Any]], list[Any]] | None = None
stamp_headers: Callable[[Mapping[str, str] | None], Mapping[str, str] | None] | None = None
receive: Callable[[Any, Callable[[], list[Any]]], list[Any]] | None = None
receive_async: Callable[[Any, Callable[[], Awaitable[list[Any]]]], Awaitable[list[Any]]] | None = (
    None
)
process_async: Callable[[Any, Any, dict[str, object]], Awaitable[object]] | None = None
