"""The servers a Python benchmark runs against.

:func:`open_server`: ``--server embedded`` (an in-process
:class:`ferrymq.testing.EmbeddedBroker`, the default) or ``--server real`` (a real Apache
RocketMQ 5 — name server + local-mode proxy — run by ``scripts/rocketmq-server``, started if it
is not running and stopped again afterwards unless ``--keep-server``), both as the tests'
``servers.Server`` (``endpoints``, ``setup(topics, groups, fifo_groups=)``); :func:`run_name`
makes names unique on a real server.

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
from servers import EmbeddedServer, RealServer, Server


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


def run_name(server: Server, base: str) -> str:
    """``base``, made unique on a real server (its topics and groups outlive the run)."""
    return base if server.kind == "embedded" else f"{base}-{int(time.time())}"


@contextmanager
def open_server(args: argparse.Namespace, **embedded: Any) -> Iterator[Server]:
    """The server ``--server`` names; ``embedded``: the embedded broker's options."""
    if args.server == "embedded":
        with EmbeddedBroker(**embedded) as broker:
            yield EmbeddedServer(broker)
        return
    real = RealServer()
    started = not real.running()
    if started:
        print("starting the real RocketMQ server (scripts/rocketmq-server start) ...", flush=True)
        real.start()
    try:
        yield real
    finally:
        if started and not args.keep_server:
            real.stop()


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
