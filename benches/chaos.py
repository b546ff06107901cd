"""The full chaos run: longer fault schedules on the embedded broker and SIGKILL/restart cycles
of a real Apache RocketMQ proxy, with every message accounted for (see tests/chaos_harness.py
for the definitions). Prints one Markdown table (the one in docs/reliability.md, "Chaos").

    python benches/chaos.py                      # embedded scenarios only
    python benches/chaos.py --real --kills 3     # + a real server of its own, killed 3 times

``--real`` starts (and at the end stops) a RocketMQ of its own with scripts/rocketmq-server on
ports that do not collide with the default instance (gRPC 28081, remoting 28080, name server
29876, broker 30911, state directory /tmp/ferrymq-rocketmq-chaos), so a shared default server is
never touched. Exit status 1 when a message was lost or a FIFO guarantee broken.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from chaos_harness import (  # noqa: E402
    HEADER,
    RealServerKills,
    Result,
    Scenario,
    run,
    run_embedded,
    table_rows,
)
from servers import RealServer  # noqa: E402

REAL_ENV = {
    "FERRYMQ_ROCKETMQ_HOME": "/tmp/ferrymq-rocketmq-chaos",
    "FERRYMQ_ROCKETMQ_ENDPOINTS": "127.0.0.1:28081",
    "FERRYMQ_ROCKETMQ_NAMESRV_PORT": "29876",
    "FERRYMQ_ROCKETMQ_REMOTING_PORT": "28080",
    "FERRYMQ_ROCKETMQ_BROKER_PORT": "30911",
}


def embedded(seconds: float, seed: int, pipelining: bool) -> list[Result]:
    # (name, seed offset, what differs from the default scenario); FIFO ones fail acks.
    fifo: dict[str, Any] = {"fault_gap": (0.1, 0.3), "faults": ("fail_ack", "hang", "latency")}
    accelerated = {**fifo, "faults": ("fail_ack", "hang", "restart"), "fifo_accelerator": True}
    table: list[tuple[str, int, dict[str, Any]]] = [
        ("mixed faults", 0, {}),
        ("connection faults", 3, {"faults": ("refuse", "hang", "latency", "restart")}),
        ("FIFO, failing acks", 1, fifo),
        ("FIFO accelerator, failing acks", 2, accelerated),
    ]
    if pipelining:
        table.append(
            ("FIFO pipelined (opt-in), failing acks", 1, {**fifo, "fifo_pipelining": True})
        )
    return [
        run_embedded(Scenario(name, seconds=seconds, seed=seed + n, **kw)) for name, n, kw in table
    ]


def real(server: RealServer, kills: int, gap: float, seed: int) -> Result:
    server.start()
    suffix = f"{int(time.time())}"
    normal, fifo = f"chaos-normal-{suffix}", f"chaos-fifo-{suffix}"
    groups = {k: f"chaos-{k.replace('_', '-')}-{suffix}" for k in ("push", "simple", "push_fifo")}
    server.setup(
        {normal: "NORMAL", fifo: "FIFO"},
        [groups["push"], groups["simple"]],
        fifo_groups=[groups["push_fifo"]],
    )
    sc = Scenario(
        f"proxy SIGKILL x{kills}",
        seconds=gap,
        drain=180.0,
        seed=seed,
        faults=(),
        rate=100.0,
        listener_failure_rate=0.0,
        simple_await=5.0,
        simple_invisible=15.0,
    )
    kills_fault = RealServerKills(server, kills, gap)
    return run(sc, REAL_ENV["FERRYMQ_ROCKETMQ_ENDPOINTS"], normal, fifo, groups, kills_fault)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="producing time per scenario")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--real", action="store_true", help="also kill/restart a real proxy")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--kill-gap", type=float, default=15.0, help="seconds of service per cycle")
    ap.add_argument("--no-pipelining", action="store_true")
    ap.add_argument("--stop-real", action="store_true", help="stop the real server at the end")
    args = ap.parse_args()
    results = embedded(args.seconds, args.seed, not args.no_pipelining)
    if args.real:
        server = RealServer()
        server.env = {**os.environ, **REAL_ENV}  # a server of its own, apart from the default
        try:
            results.append(real(server, args.kills, args.kill_gap, args.seed))
        finally:
            if args.stop_real:
                server.run("stop", check=False)
    print(HEADER)
    bad = False
    for r in results:
        for line in table_rows(r):
            print(line)
        for name, row in r.rows.items():
            ordered = row["topic"] == "FIFO" and "pipelined" not in r.scenario
            # A real broker killed with SIGKILL forgets acks it had accepted (not durable):
            # its rewinds are documented, not a failure of the client.
            rewinds = row["rewinds"] if r.server == "embedded" else 0
            if row["lost"] or (ordered and (row["reordered"] or rewinds)):
                bad = True
            if row["examples"] or row["lost_ids"]:
                print(f"<!-- {r.scenario} / {name}: {row['examples']} lost {row['lost_ids']} -->")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
