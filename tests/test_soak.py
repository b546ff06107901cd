"""A bounded soak run (``benches/soak.py``): producer → embedded broker (its own process) → push
consumer, 200k messages of 100 B. The client's resident memory must stay flat after warm-up, and
the broker must hold at most body + 256 bytes per stored message, with its memory bound counting
at least what it holds.

The margins are about memory: the client may grow by a few MiB of allocator and interpreter
noise over the run, not by bytes per message; the broker's growth is allowed 8 MiB besides the
messages for what does not grow with them (runtime, connection buffers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOAK = ROOT / "benches" / "soak.py"
MESSAGES = 200_000
BODY = 100
MIB = 1024 * 1024


def test_bounded_soak_keeps_client_flat_and_broker_compact(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--messages",
            str(MESSAGES),
            "--body",
            str(BODY),
            "--interval",
            "1",
            "--warmup",
            "0.25",
            "--json",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(out.read_text())
    report = proc.stdout
    # Every message went through and is still stored (the bound is far away).
    assert r["stored"] == MESSAGES, report
    # Client: flat after warm-up (150k messages later, less than 8 MiB more, i.e. under 56 B per
    # message; the run measured about +2.5 MiB of allocator noise).
    assert r["client_end_rss"] - r["client_warm_rss"] < 8 * MIB, report
    # Broker: at most body + 256 bytes per stored message, plus 8 MiB for what does not grow with
    # the messages (runtime, connection buffers). The earlier store held about 1 KiB per
    # message, 200 MiB here.
    growth = r["broker_end_rss"] - r["broker_start_rss"]
    assert growth <= MESSAGES * (BODY + 256) + 8 * MIB, report
    # The bound counts what the broker holds: at most body + 256 per message, and at least the
    # growth less those 8 MiB.
    assert r["accounted_per_message"] <= BODY + 256, report
    assert r["accounted"] + 8 * MIB >= growth, report
