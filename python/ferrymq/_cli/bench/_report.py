"""The bench's figures: one summary dict (what ``--json`` prints), its text form (laid out
after ``nats bench``: a stats line per side, one line per client when there are several with
their spread, then a latency table), and the percentile curve the plot draws."""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

import ferrymq
from ferrymq._native import LatencyHistogram

from ._run import SAMPLE_EVERY, Outcome
from ._workers import Tally

#: The percentiles of the summary, as (label, q).
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))

MODE_TEXT = {
    "sync": "send, one message at a time",
    "async": "produce + delivery callbacks, window {window:,}",
    "batch": "send_batch of {batch:,}",
    "packed": "send_batch(packed=True) of {batch:,}",
}


def merged(tallies: list[Tally]) -> LatencyHistogram:
    """One histogram of every tally's latencies."""
    h = LatencyHistogram()
    for t in tallies:
        h.merge(t.latency)
    return h


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


def latency_figures(h: LatencyHistogram) -> dict[str, Any]:
    """count, min, mean, the percentiles and max of ``h``, in microseconds."""
    out: dict[str, Any] = {"count": h.count, "min": _us(h.min), "mean": _us(h.mean)}
    for label, q in PERCENTILES:
        out[label] = _us(h.percentile(q))
    out["max"] = _us(h.max)
    out["clamped"] = h.clamped
    return out


def _rate(messages: int, nbytes: int, seconds: float | None) -> dict[str, Any]:
    if not seconds or seconds <= 0:
        return {"msg_per_s": None, "mb_per_s": None}
    return {
        "msg_per_s": round(messages / seconds, 1),
        "mb_per_s": round(nbytes / seconds / 1e6, 3),
    }


def side(tallies: list[Tally], started: float, what: str) -> dict[str, Any]:
    """One side's figures: totals, the rate from the start to its last message, each client's
    rate, and the latencies."""
    messages = sum(t.messages for t in tallies)
    nbytes = sum(t.bytes for t in tallies)
    lasts = [t.last for t in tallies if t.last is not None]
    seconds = max(lasts) - started if lasts else None
    clients = []
    for t in tallies:
        own = None if t.last is None else t.last - started
        clients.append(
            {
                "messages": t.messages,
                "bytes": t.bytes,
                "seconds": None if own is None else round(own, 6),
                **_rate(t.messages, t.bytes, own),
            }
        )
    return {
        "messages": messages,
        "bytes": nbytes,
        "seconds": None if seconds is None else round(seconds, 6),
        **_rate(messages, nbytes, seconds),
        "clients": clients,
        "latency_us": {"measures": what, **latency_figures(merged(tallies))},
    }


def summarize(settings: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """Every figure of the run, JSON-ready (latencies in microseconds, rates per second)."""
    mode = settings["mode"]
    per = f"per batch of up to {settings['batch']:,}" if mode in ("batch", "packed") else ""
    producer_what = (
        "send_batch call → ack, " + per
        if per
        else "produce → delivery callback, per message"
        if mode == "async"
        else "send call → ack, per message"
    )
    summary: dict[str, Any] = {
        "ferrymq": ferrymq.__version__,
        **settings,
        "elapsed_s": round(outcome.elapsed, 6),
        "complete": outcome.complete,
        "interrupted": outcome.interrupted,
        "sent": sum(t.messages for t in outcome.producers),
        "received": sum(t.messages for t in outcome.consumers),
        "producer": side(outcome.producers, outcome.started, producer_what)
        if outcome.producers
        else None,
        "consumer": None,
        "timeline": {
            "interval_s": SAMPLE_EVERY,
            "t": [round(t, 4) for t, _, _ in outcome.samples],
            "sent": [s for _, s, _ in outcome.samples],
            "received": [r for _, _, r in outcome.samples],
        },
    }
    if outcome.consumers:
        consumer = side(outcome.consumers, outcome.started, "send time in the body → receive")
        consumer["foreign"] = outcome.foreign
        consumer["clock_skewed"] = outcome.skewed
        summary["consumer"] = consumer
    return summary


# -- text ------------------------------------------------------------------------------------


def _fancy() -> bool:
    """Whether stdout can show µ and →."""
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "µ→".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def duration_text(us: float | None, micro: str = "µs") -> str:
    """A latency with three significant digits and a unit that fits it."""
    if us is None:
        return "-"
    for unit, scale in (("s", 1e6), ("ms", 1e3), (micro, 1.0)):
        if us >= scale or unit == micro:
            v = us / scale
            if unit == micro and v < 1:
                return f"{us * 1000:.0f} ns"
            digits = 0 if v >= 100 else 1 if v >= 10 else 2
            return f"{v:.{digits}f} {unit}"
    return "-"  # unreachable


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _stats_line(label: str, s: dict[str, Any]) -> str:
    if s["msg_per_s"] is None:
        return f"{label}: {s['messages']:,} msgs"
    return (
        f"{label}: {s['msg_per_s']:,.0f} msg/s ~ {s['mb_per_s']:,.2f} MB/s "
        f"({s['messages']:,} msgs in {s['seconds']:.3f} s)"
    )


def _client_lines(s: dict[str, Any]) -> list[str]:
    clients = s["clients"]
    if len(clients) < 2:
        return []
    lines = []
    for i, c in enumerate(clients, 1):
        rate = (
            f"{c['msg_per_s']:,.0f} msg/s ~ {c['mb_per_s']:,.2f} MB/s"
            if c["msg_per_s"] is not None
            else "no messages"
        )
        lines.append(f" [{i}] {rate} ({c['messages']:,} msgs)")
    rates = [c["msg_per_s"] or 0.0 for c in clients]
    lines.append(
        f" min {min(rates):,.0f} | avg {statistics.fmean(rates):,.0f} | max {max(rates):,.0f}"
        f" | stddev {statistics.pstdev(rates):,.0f} msg/s"
    )
    return lines


def text(summary: dict[str, Any]) -> str:
    """The summary as a person reads it."""
    fancy = _fancy()
    arrow, micro = ("→", "µs") if fancy else ("->", "us")
    s = summary
    where = (
        f"embedded broker, {s['protocol']} at {s['endpoint']}"
        if s["embedded"]
        else f"{s['protocol']} at {s['endpoint']}"
    )
    amount = f"{s['count']:,} messages" if s["count"] is not None else f"{s['duration']:g} s"
    mode = MODE_TEXT[s["mode"]].format(window=s["window"], batch=s["batch"])
    lines = [
        f"ferrymq bench: {amount} of {s['size']:,} B, topic {s['topic']!r}, {where}",
        f"mode {s['mode']} ({mode}); {plural(s['producers'], 'producer')}, "
        f"{plural(s['consumers'], 'consumer')} (group {s['group']!r}, receives of up to "
        f"{s['batch']:,})",
        "",
    ]
    if s["producer"] is not None:
        lines.append(_stats_line("Pub stats", s["producer"]))
        lines.extend(_client_lines(s["producer"]))
    if s["consumer"] is not None:
        lines.append(_stats_line("Sub stats", s["consumer"]))
        lines.extend(_client_lines(s["consumer"]))
        if s["consumer"]["foreign"]:
            lines.append(f" ({s['consumer']['foreign']:,} other messages on the topic ignored)")
    rows = []
    if s["producer"] is not None:
        rows.append(s["producer"]["latency_us"])
    if s["consumer"] is not None:
        rows.append(s["consumer"]["latency_us"])
    if rows:
        labels = [r["measures"].replace("→", arrow) for r in rows]
        width = max(len(x) for x in labels)
        heads = ["count", "min", *(label for label, _ in PERCENTILES), "max"]
        lines += ["", "Latency (HDR histogram, 3 significant digits)"]
        lines.append(" " * (width + 2) + "".join(f"{h:>10}" for h in heads))
        for label, r in zip(labels, rows, strict=True):
            cells = [f"{r['count']:,}"] + [
                duration_text(r[k], micro) for k in ("min", *(p for p, _ in PERCENTILES), "max")
            ]
            lines.append(f"  {label:<{width}}" + "".join(f"{c:>10}" for c in cells))
    lines.append("")
    lines.append(_verdict(s))
    return "\n".join(lines)


def _verdict(s: dict[str, Any]) -> str:
    if s["interrupted"]:
        return (
            f"interrupted after {s['elapsed_s']:.1f} s: {s['sent']:,} sent, "
            f"{s['received']:,} received"
        )
    if s["consumer"] is None:
        return f"{s['sent']:,} messages sent in {s['elapsed_s']:.2f} s"
    if s["producer"] is None:
        want = f" of {s['count']:,}" if s["count"] is not None else ""
        state = "" if s["complete"] else "INCOMPLETE: "
        return f"{state}{s['received']:,}{want} messages received in {s['elapsed_s']:.2f} s"
    if s["complete"]:
        return f"all {s['sent']:,} messages received in {s['elapsed_s']:.2f} s"
    return (
        f"INCOMPLETE: {s['received']:,} of {s['sent']:,} messages received "
        f"(none for {s['timeout']:g} s)"
    )


def percentile_curve(h: LatencyHistogram, points: int = 240) -> tuple[list[float], list[float]]:
    """The HDR percentile curve of ``h``: x = 1 / (1 - q) (1 = p0, 10 = p90, 100 = p99, ...),
    y = the latency at q in microseconds. It runs to x = 2 * count, past the rank of the last
    value (x = count), so that it ends at the maximum; at most to p99.99999."""
    if h.count == 0:
        return [], []
    top = max(1.0, min(7.0, math.log10(2 * h.count)))
    xs: list[float] = []
    ys: list[float] = []
    for i in range(points + 1):
        x = 10 ** (top * i / points)
        q = 100.0 * (1.0 - 1.0 / x)
        v = h.percentile(min(q, 100.0))
        if v is not None:
            xs.append(x)
            ys.append(v / 1000)
    return xs, ys
