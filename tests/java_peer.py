"""Runs the Java peer (``tests/java/FerryPeer.java``: the official Apache RocketMQ 5 Java client,
unchanged) as subprocesses and reads its JSON lines. Used by ``tests/test_java_peer.py`` and the
benchmarks in ``benches/``.

``scripts/java-peer classpath`` builds the peer once per machine (Maven resolves the client,
javac compiles the program; cached under a hash of the sources) and prints its classpath.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "java-peer"


class JavaPeerError(RuntimeError):
    """The Java peer could not be built, or a run of it failed."""


def body_of(event: dict[str, Any]) -> bytes:
    """The body of a ``msg`` / ``check`` event (base64 on the wire)."""
    return base64.b64decode(event["body"])


class JavaProcess:
    """One running ``FerryPeer`` command: its events, in the order it printed them."""

    def __init__(self, argv: list[str], label: str) -> None:
        self.label = label
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL
        )
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"java-peer {label}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        with self._proc.stdout:
            for line in self._proc.stdout:
                if line.startswith(b"{"):
                    event = json.loads(line)
                    self.events.append(event)
                    self._queue.put(event)
        self._queue.put(None)

    def stderr_tail(self, limit: int = 4000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-limit:]

    def wait_for(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        """The next event of ``kind`` (earlier events of other kinds are kept in ``events``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JavaPeerError(f"{self.label}: no {kind!r} event within {timeout} s")
            try:
                event = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if event is None:
                self._proc.wait()
                raise JavaPeerError(
                    f"{self.label} exited {self._proc.returncode} before a {kind!r} event:\n"
                    f"{self.stderr_tail()}"
                )
            if event["event"] == kind:
                return event

    def finish(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Wait for the process to end; its events. Raises if it failed."""
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise JavaPeerError(f"{self.label} still running after {timeout} s") from None
        self._reader.join(10)
        if rc != 0:
            raise JavaPeerError(f"{self.label} exited {rc}:\n{self.stderr_tail()}")
        return self.events

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self) -> None:
        """Kill the process if it still runs and release its pipes."""
        self.kill()
        self._reader.join(10)
        self._stderr.close()

    @property
    def pid(self) -> int:
        return self._proc.pid


class JavaPeer:
    """The built peer; ``start``/``run`` a command with ``--name value`` options from keyword
    arguments (``check_wait=5`` becomes ``--check-wait 5``)."""

    def __init__(self) -> None:
        if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
            raise JavaPeerError("the Java peer needs Java 17+ (apt-get install openjdk-17-jdk)")
        proc = subprocess.run(
            [str(SCRIPT), "classpath"], capture_output=True, text=True, timeout=600, check=False
        )
        if proc.returncode != 0:
            raise JavaPeerError(f"scripts/java-peer classpath failed:\n{proc.stderr[-4000:]}")
        self.classpath = proc.stdout.strip()
        home = os.environ.get("JAVA_HOME")
        self.java = str(Path(home) / "bin" / "java") if home else "java"
        self.processes: list[JavaProcess] = []

    def argv(self, command: str, **options: object) -> list[str]:
        argv = [self.java, "-cp", self.classpath, "FerryPeer", command]
        for name, value in options.items():
            if value is not None:
                argv += [f"--{name.replace('_', '-')}", str(value)]
        return argv

    def start(self, command: str, **options: object) -> JavaProcess:
        p = JavaProcess(self.argv(command, **options), f"FerryPeer {command}")
        self.processes.append(p)
        return p

    def run(self, command: str, *, timeout: float = 120.0, **options: object) -> JavaProcess:
        p = self.start(command, **options)
        p.finish(timeout)
        return p

    def fresh(self) -> JavaPeer:
        """The same build with its own list of processes (for one test)."""
        other = object.__new__(JavaPeer)
        other.classpath, other.java, other.processes = self.classpath, self.java, []
        return other

    def kill_all(self) -> None:
        for p in self.processes:
            p.close()
        self.processes.clear()
