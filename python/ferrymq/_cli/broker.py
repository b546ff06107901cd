"""``ferrymq broker``: an embedded broker in the foreground, the one-command dev server."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import ferrymq

BROKER_HELP = """\
Run an embedded RocketMQ 5 broker in the foreground until Ctrl-C.

Topics and groups come from --topic / --group or from a --config file (JSON, or TOML on
Python 3.11+):

  {"endpoints": 2, "ports": [8081, 8082], "auto_create": false,
   "topics": [{"name": "orders", "message_type": "FIFO", "queues": 8}],
   "groups": [{"name": "billing", "fifo": true, "max_delivery_attempts": 17}],
   "options": {"long_polling_min": 5, "max_topic_bytes": 268435456}}

"options" takes any keyword of ferrymq.testing.EmbeddedBroker. The first line printed is
"ferrymq broker listening on <endpoints>", the string to give clients (gRPC); the next lines
name the remoting endpoint (name server + brokers) and the JMQ4 endpoint.
"""


def _load_config(path: str) -> dict[str, Any]:
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib

            return dict(tomllib.loads(text))
        raise SystemExit("TOML configs need Python 3.11+; use JSON")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: the config must be a JSON object")
    return data


def _parse_topic(spec: str) -> dict[str, Any]:
    name, _, rest = spec.partition(":")
    message_type, _, queues = rest.partition(":")
    out: dict[str, Any] = {"name": name}
    if message_type:
        out["message_type"] = message_type.upper()
    if queues:
        out["queues"] = int(queues)
    return out


def _parse_group(spec: str) -> dict[str, Any]:
    parts = spec.split(":")
    out: dict[str, Any] = {"name": parts[0]}
    for p in parts[1:]:
        if p.lower() == "fifo":
            out["fifo"] = True
        elif p.isdigit():
            out["max_delivery_attempts"] = int(p)
        else:
            raise SystemExit(f"--group {spec}: expected NAME[:fifo][:ATTEMPTS]")
    return out


def run(args: argparse.Namespace) -> int:
    from ferrymq.testing import EmbeddedBroker

    config: dict[str, Any] = _load_config(args.config) if args.config else {}
    options: dict[str, Any] = dict(config.get("options", {}))
    endpoints = args.endpoints or int(config.get("endpoints", 1))
    ports = config.get("ports")
    if args.port is not None:
        ports = [args.port + i for i in range(endpoints)]
    broker = EmbeddedBroker(
        endpoints=endpoints,
        auto_create=args.auto_create or bool(config.get("auto_create", False)),
        host=args.host or config.get("host", "127.0.0.1"),
        ports=ports,
        **options,
    )
    with broker:
        # Before the first line is printed: whoever waits for that line may stop us right away.
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        topics = list(config.get("topics", [])) + [_parse_topic(t) for t in args.topic]
        for t in topics:
            broker.create_topic(t["name"], t.get("message_type", "NORMAL"), int(t.get("queues", 8)))
        groups = list(config.get("groups", [])) + [_parse_group(g) for g in args.group]
        for g in groups:
            broker.create_group(
                g["name"],
                fifo=bool(g.get("fifo", False)),
                max_delivery_attempts=int(g.get("max_delivery_attempts", 17)),
            )
        print(f"ferrymq broker listening on {broker.endpoints}", flush=True)
        if broker.remoting_endpoint:
            print(f"  remoting (name server + brokers) {broker.remoting_endpoint}", flush=True)
        with contextlib.suppress(ferrymq.InvalidArgumentError):  # started with jmq=False
            print(f"  JMQ4 {broker.jmq_endpoint}", flush=True)
        for t in topics:
            print(f"  topic {t['name']} ({t.get('message_type', 'NORMAL')})", flush=True)
        for g in groups:
            print(f"  group {g['name']}{' (fifo)' if g.get('fifo') else ''}", flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    print("ferrymq broker stopped", flush=True)
    return 0


def add_parser(sub: Any) -> None:
    b = sub.add_parser(
        "broker",
        help="run an embedded RocketMQ 5 broker (also serving remoting and JMQ4)",
        description=BROKER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("--config", help="JSON (or TOML) file with endpoints, topics, groups, options")
    b.add_argument("--endpoints", type=int, help="number of endpoints (default 1)")
    b.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    b.add_argument("--port", type=int, help="port of the first endpoint; the next ones follow")
    b.add_argument("--auto-create", action="store_true", help="create unknown topics and groups")
    b.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:TYPE[:QUEUES]]", help="a topic"
    )
    b.add_argument(
        "--group", action="append", default=[], metavar="NAME[:fifo][:ATTEMPTS]", help="a group"
    )
    b.set_defaults(func=run)
