"""Helpers shared by the stats and telemetry tests: checking a ``stats()`` latency block, and
receiving (and acking) a number of messages with a simple consumer."""

from __future__ import annotations

from typing import Any

import ferrymq


def assert_latencies(op: dict[str, Any], keys: tuple[str, ...] = ("p50", "p90", "p99")) -> None:
    """``op["latency_ms"]`` is there and ordered: min ≤ each percentile ≤ max, min ≤ mean."""
    lat = op["latency_ms"]
    assert lat is not None, op
    values = [lat["min"], *(lat[k] for k in keys), lat["max"]]
    assert values == sorted(values), lat
    assert lat["min"] <= lat["mean"] <= lat["max"]
    assert lat["max"] > 0


def receive_all(c: ferrymq.SimpleConsumer, n: int) -> list[ferrymq.MessageView]:
    """Receive (16 at a time, each batch acked) until ``n`` messages came, in at most 100
    receives; what came."""
    got: list[ferrymq.MessageView] = []
    for _ in range(100):
        if len(got) >= n:
            break
        batch = c.receive(16)
        if batch:
            c.ack(batch)
        got.extend(batch)
    return got
