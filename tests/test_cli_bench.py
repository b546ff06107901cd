"""``ferrymq bench`` run as a real process against real servers (an embedded broker it starts
itself, the session's broker, nats-server), and the latency histogram it records into."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ferrymq
from _nats_server import NatsServer, free_port
from ferrymq._native import LatencyHistogram
from ferrymq.testing import EmbeddedBroker
from waiting import wait_for

LATENCY_KEYS = ("min", "p50", "p90", "p99", "p99.9", "max")


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrymq", "bench", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def bench_json(*args: str, code: int = 0) -> dict[str, Any]:
    done = bench(*args, "--json")
    assert done.returncode == code, done.stderr
    # One JSON object on stdout, nothing else (and no progress bar: not a terminal).
    [line] = done.stdout.splitlines()
    assert done.stderr == ""
    result: dict[str, Any] = json.loads(line)
    return result


def assert_ordered(latency: dict[str, Any], count: int) -> None:
    """Positive percentiles that never decrease: min ≤ p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max."""
    assert latency["count"] == count
    values = [latency[k] for k in LATENCY_KEYS]
    assert all(v > 0 for v in values), latency
    assert values == sorted(values), latency
    assert latency["min"] <= latency["mean"] <= latency["max"]
    assert latency["clamped"] == 0


def assert_every_message(result: dict[str, Any], count: int) -> None:
    assert result["complete"] is True
    assert result["interrupted"] is False
    assert result["sent"] == count
    assert result["received"] == count
    assert result["producer"]["messages"] == count
    assert sum(c["messages"] for c in result["producer"]["clients"]) == count
    assert sum(c["messages"] for c in result["consumer"]["clients"]) == count
    assert result["consumer"]["foreign"] == 0
    assert result["producer"]["msg_per_s"] > 0
    assert result["consumer"]["msg_per_s"] > 0
    # Every message reached its consumer with its send time: one end-to-end latency each.
    assert_ordered(result["consumer"]["latency_us"], count)
    timeline = result["timeline"]
    assert len(timeline["t"]) == len(timeline["sent"]) == len(timeline["received"]) > 0
    assert timeline["sent"] == sorted(timeline["sent"])
    assert timeline["received"][-1] == count


# -- runs on the embedded broker the command starts ---------------------------------------------


def test_the_default_run_counts_every_message_and_orders_its_percentiles() -> None:
    result = bench_json("--count", "3000")
    assert result["embedded"] is True
    assert result["protocol"] == "rocketmq"
    assert result["mode"] == "async"
    assert_every_message(result, 3000)
    # async: one send → ack latency per message.
    assert_ordered(result["producer"]["latency_us"], 3000)
    assert result["producer"]["bytes"] == 3000 * 128
    assert result["consumer"]["bytes"] == 3000 * 128


@pytest.mark.parametrize(
    ("mode", "latencies"),
    [("sync", 600), ("async", 600), ("batch", 12), ("packed", 12)],
)
def test_each_mode_delivers_every_message(mode: str, latencies: int) -> None:
    # 600 messages in batches of 50: one latency per message, or per batch in batch modes.
    result = bench_json(
        "--mode", mode, "--count", "600", "--batch", "50", "--window", "64", "--size", "200"
    )
    assert result["mode"] == mode
    assert_every_message(result, 600)
    assert_ordered(result["producer"]["latency_us"], latencies)
    assert result["consumer"]["bytes"] == 600 * 200


def test_jmq_with_several_producers_and_consumers() -> None:
    result = bench_json(
        "--protocol", "jmq", "--count", "2000", "--producers", "2", "--consumers", "2"
    )
    assert result["protocol"] == "jmq"
    assert result["endpoint"].startswith("jmq://")
    assert_every_message(result, 2000)
    assert [c["messages"] for c in result["producer"]["clients"]] == [1000, 1000]
    assert len(result["consumer"]["clients"]) == 2


def test_the_text_summary_reads_like_nats_bench() -> None:
    done = bench("--count", "1000", "--producers", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Pub stats: " in out
    assert "Sub stats: " in out
    assert " [1] " in out
    assert " [2] " in out
    assert "| stddev " in out
    for head in ("count", "p50", "p90", "p99", "p99.9", "max"):
        assert head in out
    assert "all 1,000 messages received" in out
    # Not a terminal: no progress bar.
    assert done.stderr == ""


def test_plot_writes_a_png(tmp_path: Path) -> None:
    path = tmp_path / "bench.png"
    done = bench("--count", "1500", "--plot", str(path))
    assert done.returncode == 0, done.stderr
    assert f"plot written to {path}" in done.stdout
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1000
    assert height >= 400
    assert len(data) > 30_000  # two panels of lines and text, not an empty canvas


def test_plot_without_matplotlib_is_one_line_and_exit_2(tmp_path: Path) -> None:
    hidden = tmp_path / "hide"
    (hidden / "matplotlib").mkdir(parents=True)
    (hidden / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('No module named matplotlib (hidden by the test)')\n"
    )
    done = bench("--plot", str(tmp_path / "x.png"), env={"PYTHONPATH": str(hidden)})
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("ferrymq bench: error: --plot: needs matplotlib")
    assert "ferrymq[plot]" in line
    assert not (tmp_path / "x.png").exists()


# -- the session's servers ----------------------------------------------------------------------


def test_publish_only_then_consume_only_and_incomplete_exits_3(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic = unique("bench")
    broker.create_topic(topic, "NORMAL", 4)
    target = (broker.endpoints, "--topic", topic)

    sent = bench_json(*target, "--consumers", "0", "--count", "400", "--mode", "packed")
    assert sent["embedded"] is False
    assert sent["consumer"] is None
    assert sent["sent"] == 400
    assert broker.stats()["topics"][topic]["messages"] == 400

    # Consume only, one group: any run's messages count; all 400 are there.
    got = bench_json(*target, "--producers", "0", "--count", "400", "--group", unique("g"))
    assert got["producer"] is None
    assert got["received"] == 400
    assert got["complete"] is True
    assert_ordered(got["consumer"]["latency_us"], 400)

    # Another group asks for more than the topic holds: it gives up after --timeout.
    short = bench_json(
        *target,
        "--producers",
        "0",
        "--count",
        "500",
        "--timeout",
        "2",
        "--group",
        unique("g"),
        code=3,
    )
    assert short["received"] == 400
    assert short["complete"] is False


def test_consumers_short_of_what_was_sent_exit_3(
    make_broker: Callable[..., EmbeddedBroker], unique: Callable[[str], str]
) -> None:
    b = make_broker()
    topic = unique("bench")
    b.create_topic(topic, "NORMAL", 4)
    # Queue 0 takes sends but is never read: its share of the messages never arrives.
    b.set_queue_permission(topic, 0, 0, "WRITE")
    done = bench(b.endpoints, "--topic", topic, "--count", "400", "--timeout", "2")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    [verdict] = [line for line in done.stdout.splitlines() if line.startswith("INCOMPLETE")]
    assert verdict.startswith("INCOMPLETE: ")
    assert verdict.endswith("of 400 messages received (none for 2 s)")
    received = int(verdict.split()[1].replace(",", ""))
    assert 0 < received < 400
    assert b.stats()["topics"][topic]["messages"] == 400


def test_sigint_prints_the_summary_so_far_and_exits_130(
    broker: EmbeddedBroker, unique: Callable[[str], str]
) -> None:
    topic = unique("bench")
    broker.create_topic(topic, "NORMAL", 4)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "ferrymq", "bench", broker.endpoints, "--topic", topic),
            *("--duration", "120", "--mode", "sync", "--json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for("the bench to send", lambda: broker.stats()["topics"][topic]["messages"] >= 50)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["ferrymq bench: interrupted"]
    result = json.loads(out)
    assert result["interrupted"] is True
    assert result["complete"] is False
    # Every acknowledged send is stored; Ctrl-C came long before the 120 s were up.
    assert 50 <= result["sent"] <= broker.stats()["topics"][topic]["messages"]
    assert result["elapsed_s"] < 100
    assert result["producer"]["latency_us"]["count"] == result["sent"]


@pytest.mark.nats
def test_nats_jetstream(
    nats_server: NatsServer, nats_stream: tuple[ferrymq.JetStream, str]
) -> None:
    js, tok = nats_stream
    result = bench_json(
        nats_server.url, "--topic", f"s{tok}.a", "--group", f"g{tok}", "--count", "1500"
    )
    assert result["protocol"] == "nats"
    assert_every_message(result, 1500)
    assert js.stream_info(f"S{tok}").messages == 1500


# -- errors: one line, no traceback, the exit code of the table ----------------------------------


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("ferrymq bench: error: ")
    for word in words:
        assert word in line


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ("bogus://127.0.0.1:1", ["unsupported scheme"]),
        ("127.0.0.1:notaport", ["port must be a number"]),
        ("remoting://127.0.0.1:9876", ["remoting://"]),
    ],
)
def test_a_bad_endpoint_exits_2(endpoint: str, words: list[str]) -> None:
    _one_line_error(bench(endpoint, "--count", "10"), 2, *words)


@pytest.mark.parametrize("scheme", ["", "jmq://", "nats://"])
def test_a_refused_connection_exits_1(scheme: str) -> None:
    done = bench(f"{scheme}127.0.0.1:{free_port()}", "--count", "10", "--token", "t")
    _one_line_error(done, 1, "refused")


def test_a_missing_topic_exits_1(broker: EmbeddedBroker, unique: Callable[[str], str]) -> None:
    done = bench(broker.endpoints, "--topic", unique("missing"), "--count", "10")
    _one_line_error(done, 1, "TOPIC_NOT_FOUND")


@pytest.mark.nats
def test_a_missing_stream_exits_1(nats_server: NatsServer, tok: str) -> None:
    done = bench(nats_server.url, "--topic", f"nostream{tok}.a", "--count", "10")
    _one_line_error(done, 1, "no stream")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--producers", "0", "--consumers", "0"], ["nothing to do"]),
        (["127.0.0.1:8081", "--protocol", "jmq"], ["--protocol"]),
    ],
)
def test_contradicting_options_exit_2(args: list[str], words: list[str]) -> None:
    _one_line_error(bench(*args), 2, *words)


@pytest.mark.parametrize(
    "args",
    [["--size", "8"], ["--count", "5", "--duration", "1"], ["--mode", "fast"], ["--window", "0"]],
)
def test_bad_option_values_exit_2(args: list[str]) -> None:
    done = bench(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ferrymq bench: error: ")


# -- the histogram the bench records into -------------------------------------------------------


def test_the_histogram_takes_a_batch_as_a_list_or_a_buffer() -> None:
    h = LatencyHistogram()
    assert h.count == 0
    assert (h.min, h.max, h.mean, h.percentile(50)) == (None, None, None, None)
    assert h.record_many(list(range(1_000, 101_000, 1_000))) == 100
    assert h.record_many(array("q", [5_000_000])) == 1
    assert h.record_many((7, 3_600_000_000_001)) == 2
    assert h.count == 103
    assert h.clamped == 1
    assert h.min == 7
    assert h.max == 3_600_000_000_000
    p50 = h.percentile(50)
    assert p50 is not None
    assert abs(p50 - 51_000) <= 51
    other = LatencyHistogram()
    other.record_many([1])
    h.merge(other)
    h.merge(h)
    assert h.count == 208
    assert h.min == 1


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ([1, -1], "item 1 is negative"),
        ([1, True], "item 1 is a bool"),
        ([1.5], "item 0 is a float"),
        (["1"], "item 0 is a str"),
        (array("q", [3, -3]), "item 1 is negative"),
        (array("i", [1]), "format"),
        (b"12345678", "format"),
        (5, "not int"),
        ("123", "not str"),
        (None, "not NoneType"),
    ],
)
def test_bad_latency_values_name_the_parameter_and_record_nothing(values: Any, words: str) -> None:
    h = LatencyHistogram()
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^values: ") as e:
        h.record_many(values)
    assert words in str(e.value)
    assert h.count == 0


@pytest.mark.parametrize("q", [-0.5, 100.5, float("nan")])
def test_a_percentile_outside_0_to_100_names_q(q: float) -> None:
    h = LatencyHistogram()
    h.record_many([1])
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^q: "):
        h.percentile(q)


def test_merge_takes_only_a_histogram() -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^other: "):
        LatencyHistogram().merge([1, 2])  # type: ignore[arg-type]
