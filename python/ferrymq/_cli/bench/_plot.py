"""``ferrymq bench --plot FILE``: one PNG read at a glance — throughput of both sides over time
(left) and the latency percentile curves on HDR axes (right) — drawn with matplotlib (the
optional extra ``ferrymq[plot]``) without pyplot's global state."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ferrymq

from ._report import PERCENTILES, duration_text, merged, percentile_curve, plural
from ._run import Outcome

#: From this many 100 ms samples on, the throughput lines are smoothed over 0.5 s.
SMOOTH_FROM = 40
PRODUCER_COLOR = "#1f6fb4"
CONSUMER_COLOR = "#e0701a"


def require_matplotlib(path: str) -> None:
    """Refuse ``--plot`` before the run when matplotlib is missing or FILE's folder is."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise ferrymq.InvalidArgumentError(
            "--plot: needs matplotlib; install it with: pip install 'ferrymq[plot]'"
        ) from None
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise ferrymq.InvalidArgumentError(f"--plot: folder {str(folder)!r} does not exist")


def _rates(
    samples: list[tuple[float, int, int]], which: int, until: float | None
) -> tuple[list[float], list[float]]:
    """Messages per second between consecutive samples of column ``which``, up to the sample
    that saw the side's last message (``until`` seconds after the start)."""
    ts: list[float] = []
    rates: list[float] = []
    prev_t, prev_n = 0.0, 0.0
    for sample in samples:
        t, n = sample[0], sample[which]
        if until is not None and prev_t >= until:
            break
        if t > prev_t:
            ts.append(t)
            rates.append((n - prev_n) / (t - prev_t))
        prev_t, prev_n = t, n
    return ts, rates


def _smooth(values: list[float], width: int = 5) -> list[float]:
    """A centred moving average over ``width`` samples (half a second at 100 ms)."""
    half = width // 2
    out = []
    for i in range(len(values)):
        window = values[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def _si(value: float, _pos: object = None) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _tick_duration(us: float) -> str:
    """A y tick: ``200 µs``, ``1 ms``, ``2.5 s`` (no trailing zeros)."""
    for unit, scale in (("s", 1e6), ("ms", 1e3), ("µs", 1.0), ("ns", 1e-3)):
        if us >= scale:
            return f"{us / scale:.3g} {unit}"
    return f"{us * 1000:.3g} ns"


def _nice(value: float, *, down: bool) -> float:
    """The 1-2-5 step (1, 2, 5, 10, 20, ...) at or below (``down``) or above ``value``."""
    exponent = math.floor(math.log10(value))
    steps = [m * 10.0**e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
    if down:
        return max(v for v in steps if v <= value)
    return min(v for v in steps if v >= value)


def _round3(value: float) -> float:
    """``value`` to three significant digits."""
    return float(f"{value:.3g}")


def _rate_text(side: dict[str, Any]) -> str:
    rate = side["msg_per_s"]
    if rate is None:
        return "no messages"
    return f"{_si(_round3(rate))} msg/s, {side['mb_per_s']:.3g} MB/s"


def _percentile_label(q_x: float) -> str:
    """The tick label of x = 1 / (1 - q): 1 → 0%, 10 → 90%, 100 → 99%, 1000 → 99.9%."""
    if q_x <= 1:
        return "0%"
    nines = round(math.log10(q_x))
    return f"{100 - 100 / 10**nines:.{max(0, nines - 2)}f}%"


def _title(summary: dict[str, Any]) -> tuple[str, str]:
    s = summary
    where = f"{s['protocol']} ({'embedded broker' if s['embedded'] else s['endpoint']})"
    mode = {
        "sync": "sync sends",
        "async": f"async, window {s['window']:,}",
        "batch": f"send_batch of {s['batch']:,}",
        "packed": f"packed send_batch of {s['batch']:,}",
    }[s["mode"]]
    amount = f"{s['count']:,}" if s["count"] is not None else f"{s['duration']:g} s"
    first = f"ferrymq bench  ·  {where}  ·  {mode}  ·  {amount} messages of {s['size']:,} B"
    parts = []
    if s["producer"] is not None:
        parts.append(f"{plural(s['producers'], 'producer')}: {_rate_text(s['producer'])}")
    if s["consumer"] is not None:
        parts.append(f"{plural(s['consumers'], 'consumer')}: {_rate_text(s['consumer'])}")
    if s["interrupted"]:
        parts.append("interrupted")
    elif s["consumer"] is not None and s["producer"] is not None:
        parts.append(
            "all received" if s["complete"] else f"INCOMPLETE: {s['received']:,} of {s['sent']:,}"
        )
    return first, "   ·   ".join(parts)


def plot(path: str, summary: dict[str, Any], outcome: Outcome) -> None:
    """Write the PNG of one run to ``path``."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    fig = Figure(figsize=(13, 5.2), dpi=110, layout="constrained")
    first, second = _title(summary)
    fig.suptitle(f"{first}\n{second}", fontsize=11)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1]})

    # -- throughput over time --------------------------------------------------------------
    sides = [
        ("sent (acked)", 1, PRODUCER_COLOR, summary["producer"]),
        ("received", 2, CONSUMER_COLOR, summary["consumer"]),
    ]
    top = 0.0
    smoothed = len(outcome.samples) >= SMOOTH_FROM
    for label, column, color, side in sides:
        if side is None:
            continue
        ts, rates = _rates(outcome.samples, column, side["seconds"])
        if not ts:
            continue
        line = rates
        if smoothed:
            left.plot(ts, rates, color=color, alpha=0.18, linewidth=0.7)
            line = _smooth(rates)
        average = side["msg_per_s"]
        text = f"{label}: {_si(_round3(average))} msg/s over the run" if average else label
        left.plot(ts, line, color=color, linewidth=2, label=text)
        top = max(top, max(line), average or 0.0)
        if average:
            left.axhline(average, color=color, linestyle="--", linewidth=1)
    left.set_title(
        "Throughput: 100 ms samples"
        + (", 0.5 s moving average (bold), run average (dashed)" if smoothed else ""),
        fontsize=10,
    )
    left.set_xlabel("seconds since the start")
    left.set_ylabel("messages per second")
    left.set_xlim(left=0)
    # Single 100 ms samples may spike far above the average; the bold lines set the scale.
    left.set_ylim(0, top * 1.15 if top > 0 else 1)
    left.yaxis.set_major_formatter(FuncFormatter(_si))
    left.grid(True, alpha=0.3)
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8.5)

    # -- latency by percentile -------------------------------------------------------------
    curves = []
    if summary["producer"] is not None:
        curves.append(
            (summary["producer"]["latency_us"], merged(outcome.producers), PRODUCER_COLOR)
        )
    if summary["consumer"] is not None:
        curves.append(
            (summary["consumer"]["latency_us"], merged(outcome.consumers), CONSUMER_COLOR)
        )
    top_x = 10.0
    low_y, high_y = math.inf, 0.0
    for figures, hist, color in curves:
        xs, ys = percentile_curve(hist)
        if not xs:
            continue
        top_x = max(top_x, xs[-1])
        low_y, high_y = min(low_y, min(ys)), max(high_y, max(ys))
        shown = ", ".join(
            f"{label} {duration_text(figures[label])}" for label, _ in PERCENTILES[::2]
        )
        right.plot(
            xs,
            ys,
            color=color,
            linewidth=2,
            label=f"{figures['measures']}\n{shown}, max {duration_text(figures['max'])}",
        )
        for label, q in PERCENTILES:
            v = figures[label]
            if v is not None and 1 / (1 - q / 100) <= xs[-1]:
                right.plot(1 / (1 - q / 100), v, "o", color=color, markersize=4)
    right.set_xscale("log")
    right.set_yscale("log")
    ticks = [10.0**k for k in range(0, round(math.log10(top_x)) + 1)]
    right.xaxis.set_major_locator(FixedLocator(ticks))
    right.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _percentile_label(x)))
    right.xaxis.set_minor_locator(NullLocator())
    right.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _tick_duration(v)))
    right.yaxis.set_minor_locator(NullLocator())
    right.set_xlim(1, top_x)
    if high_y > 0:
        # From a labelled tick below the fastest to one above the slowest.
        right.set_ylim(_nice(max(low_y, 1e-3), down=True), _nice(high_y * 1.05, down=False))
    right.set_title("Latency by percentile (HDR histogram)", fontsize=10)
    right.set_xlabel("percentile")
    right.set_ylabel("latency (log scale)")
    right.grid(True, which="major", alpha=0.3)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8.5)

    fig.savefig(path, format="png")
