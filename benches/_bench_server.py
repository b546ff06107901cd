"""The servers a Python benchmark runs against.

:func:`open_server`: ``--server embedded`` (an in-process
:class:`ferrymq.testing.EmbeddedBroker`, the default) or ``--server real`` (a real Apache
RocketMQ 5 — name server + local-mode proxy — run by ``scripts/rocketmq-server``, started if it
is not running and stopped again afterwards unless ``--keep-server``).

Both are used the same way: ``endpoints``, ``create_topic(name, kind)``,
``create_group(name, fifo=False)``.

:func:`broker_process`: the embedded broker in a process of its own (``python -m ferrymq
broker``), whose CPU time is measured apart from the client's. :func:`nats_server`: a
``nats-server`` with JetStream on a free loopback port (the tests' one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ferrymq.testing import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _nats_server import run_nats_server

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "rocketmq-server"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--server",
        choices=["embedded", "real"],
        default="embedded",
        help="embedded broker (default) or a real Apache RocketMQ 5 (scripts/rocketmq-server)",
    )
    ap.add_argument(
        "--keep-server", action="store_true", help="leave a real server running afterwards"
    )


class BenchServer:
    def __init__(self, kind: str, broker: EmbeddedBroker | None, endpoints: str) -> None:
        self.kind = kind
        self.broker = broker
        self.endpoints = endpoints
        # Real topics and groups outlive the run: make the names unique.
        self.suffix = "" if broker is not None else f"-{int(time.time())}"

    def name(self, base: str) -> str:
        return base + self.suffix

    def create_topic(self, name: str, kind: str = "NORMAL", queues: int = 8) -> None:
        if self.broker is not None:
            self.broker.create_topic(name, kind, queues)
        else:
            _run("create", f"topic:{name}:{kind}")

    def create_group(self, name: str, fifo: bool = False) -> None:
        if self.broker is not None:
            self.broker.create_group(name, fifo=fifo)
        else:
            _run("create", f"group:{name}" + (":fifo" if fifo else ""))

    def create_many(self, topics: dict[str, str], groups: dict[str, bool]) -> None:
        """Create topics (name -> type) and groups (name -> fifo); one admin run if real."""
        if self.broker is not None:
            for t, kind in topics.items():
                self.create_topic(t, kind)
            for g, fifo in groups.items():
                self.create_group(g, fifo)
            return
        specs = [f"topic:{t}:{kind}" for t, kind in topics.items()]
        specs += [f"group:{g}" + (":fifo" if fifo else "") for g, fifo in groups.items()]
        _run("create", *specs)


def _run(*args: str) -> str:
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/rocketmq-server {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc.stdout


@contextmanager
def open_server(args: argparse.Namespace, **embedded: Any) -> Iterator[BenchServer]:
    if args.server == "embedded":
        with EmbeddedBroker(**embedded) as broker:
            yield BenchServer("embedded", broker, broker.endpoints)
        return
    running = subprocess.run([str(SCRIPT), "status"], capture_output=True, check=False)
    started = running.returncode != 0
    if started:
        print("starting the real RocketMQ server (scripts/rocketmq-server start) ...", flush=True)
        _run("start")
    endpoints = os.environ.get("FERRYMQ_ROCKETMQ_ENDPOINTS", "127.0.0.1:8081").split(";")[0]
    try:
        yield BenchServer("real", None, endpoints.removeprefix("http://"))
    finally:
        if started and not args.keep_server:
            _run("stop")


@contextmanager
def broker_process(config: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m ferrymq broker --config`` with ``config`` (topics, groups, options): yields
    the process and its endpoints; terminated on exit."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "broker", "--config", f.name],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        prefix = "ferrymq broker listening on "
        if not line.startswith(prefix):
            raise RuntimeError(f"broker did not start: {line!r}")
        # Keep reading its output so that it never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield proc, line[len(prefix) :].strip()
    finally:
        os.unlink(f.name)
        proc.terminate()
        proc.wait(10)


@contextmanager
def nats_server() -> Iterator[tuple[str, str]]:
    """A ``nats-server -js`` on a free loopback port with a temporary store (the tests'
    launcher): yields its URL and version; exits the benchmark with a message when nats-server
    is not installed."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(run_nats_server())
        except RuntimeError as e:
            sys.exit(str(e))
        yield server.url, server.version
