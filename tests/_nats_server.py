"""A real nats-server with JetStream for the test session, and a loopback TCP proxy that can
hold back the server's replies (acks) to inject lost or late acks without mocking anything."""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ferrymq

INSTALL_HINT = "nats-server is not installed: run `apt-get install -y nats-server` (Debian 2.9.x)"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nats-server did not listen on 127.0.0.1:{port} within {timeout} s")


@dataclass
class NatsServer:
    url: str
    port: int
    store_dir: str
    version: str
    _producer: ferrymq.Producer | None = field(default=None, init=False, repr=False)
    _publisher: ferrymq.AsyncPublisher | None = field(default=None, init=False, repr=False)

    def publish(self, subject: str, body: bytes, **options: Any) -> ferrymq.PublishAck:
        """Publish with the session's ``AsyncPublisher`` over ``Producer(url)`` and wait for the
        ack: what tests use to seed a stream with chosen message ids (``message_id=``) or
        expectations (``expected_stream=`` …)."""
        if self._publisher is None:
            self._producer = ferrymq.Producer(self.url).start()
            self._publisher = ferrymq.AsyncPublisher(self._producer).start()
        return self._publisher.submit(subject, body, **options).result(30.0)

    def close_publisher(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
        if self._producer is not None:
            self._producer.close()


@contextlib.contextmanager
def run_nats_server() -> Iterator[NatsServer]:
    exe = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if shutil.which("/usr/sbin/nats-server") else None
    )
    if exe is None:
        raise RuntimeError(INSTALL_HINT)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    with tempfile.TemporaryDirectory(prefix="ferrymq-nats-") as store:
        port = free_port()
        proc = subprocess.Popen(
            [exe, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store, "-n", "ferrymq-test"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, proc)
            server = NatsServer(
                url=f"nats://127.0.0.1:{port}",
                port=port,
                store_dir=store,
                version=version.stdout.strip(),
            )
            try:
                yield server
            finally:
                server.close_publisher()
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class HoldingProxy:
    """A loopback TCP proxy. ``hold()`` stops forwarding server-to-client bytes (so acks queue up
    in the kernel, as on a stalled network path); ``release()`` lets them through. Client-to-server
    bytes always flow, so publishes keep reaching the server."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"nats://127.0.0.1:{self.port}"
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._forwarding = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        #: Connections accepted, and connections the client side has closed (EOF read from it).
        self.accepted = 0
        self.client_closed = 0
        self._spawn(self._accept)

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    def hold(self) -> None:
        # Taken while a chunk is being forwarded: once hold() returns, nothing more goes down.
        with self._forwarding:
            self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                server = socket.create_connection(self._upstream, 5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
                self.accepted += 1
            self._spawn(self._pipe, client, server, False)
            self._spawn(self._pipe, server, client, True)

    def _pipe(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        try:
            while not self._closed.is_set():
                if downstream and not self._open.is_set():
                    self._open.wait(0.05)
                    continue
                readable, _, _ = select.select([src], [], [], 0.05)
                if not readable:
                    continue
                if downstream:
                    with self._forwarding:
                        if not self._open.is_set():
                            continue
                        data = src.recv(65536)
                        if data:
                            dst.sendall(data)
                else:
                    data = src.recv(65536)
                    if data:
                        dst.sendall(data)
                if not data:
                    if not downstream:
                        with self._lock:
                            self.client_closed += 1
                    break
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._open.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
        for t in self._threads:
            t.join(2)


def read_stream(js: ferrymq.JetStream, stream: str, expected: int) -> list[ferrymq.MessageView]:
    """Every message stored in ``stream`` (of one subject pattern), read once and acked by a
    fresh consumer group; there must be exactly ``expected``."""
    (subject,) = js.stream_info(stream).subjects
    group = f"read{uuid.uuid4().hex[:10]}"
    got: list[ferrymq.MessageView] = []
    with ferrymq.SimpleConsumer(
        js.endpoints,
        group,
        subscriptions=subject,
        nats_options={"stream": stream},
        await_duration=0.5,
    ) as c:
        while batch := c.receive(500):
            got += batch
            c.ack(batch)
    js.delete_consumer(stream, group)
    assert len(got) == expected, f"{len(got)} of {expected} stored messages read"
    return got
