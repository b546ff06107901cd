"""TLS of the RocketMQ client layer: a TLS-terminating TCP proxy (Python ``ssl``, ALPN h2, a
self-signed certificate made with the ``openssl`` command) in front of the embedded broker.

Start-up (telemetry settings + QueryRoute through the access point) crosses the TLS proxy, so
it proves the handshake, ALPN and HTTP/2 over rustls for each TLS option."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ferrymq import FerryConnectionError, FerryTimeoutError, Producer, ProtocolError, TlsConfig
from ferrymq.testing import EmbeddedBroker

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate signed by it, server key)."""
    d = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=ferrymq-test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem",
            "-out", "req.csr", "-subj", "/CN=localhost")  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "req.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "cert.pem", "-days", "1", "-extfile", "ext.cnf")  # fmt: skip
    return d / "ca.pem", d / "cert.pem", d / "key.pem"


@pytest.fixture
def tls_proxy(broker: EmbeddedBroker, certificate: tuple[Path, Path, Path]) -> Iterator[str]:
    """``127.0.0.1:port`` of a TLS proxy forwarding to the broker's first endpoint."""
    host, port = broker.addresses[0].rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certificate[1]), str(certificate[2]))
    ctx.set_alpn_protocols(["h2"])
    loop = asyncio.new_event_loop()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    listen_port = sock.getsockname()[1]

    writers: list[asyncio.StreamWriter] = []

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            w.close()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        writers.append(w)
        br, bw = await asyncio.open_connection(host, int(port))
        writers.append(bw)
        await asyncio.gather(pipe(r, bw), pipe(br, w))

    async def shutdown() -> None:
        server.close()
        for w in writers:
            w.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in writers:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await w.wait_closed()
        await server.wait_closed()

    server = loop.run_until_complete(asyncio.start_server(handle, sock=sock, ssl=ctx))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listen_port}"
    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_tls_with_a_custom_ca(
    broker: EmbeddedBroker,
    tls_proxy: str,
    certificate: tuple[Path, Path, Path],
    unique: Callable[[str], str],
) -> None:
    t = unique("t")
    broker.create_topic(t)
    p = Producer(tls_proxy, tls=TlsConfig(ca_file=str(certificate[0])))
    p.start()
    assert p.settings["from_server"]
    p.close()
    # A CA file path works too.
    Producer(tls_proxy, tls=str(certificate[0])).start().close()


def test_tls_insecure_accepts_a_self_signed_certificate(tls_proxy: str) -> None:
    p = Producer(tls_proxy, tls=TlsConfig(insecure=True)).start()
    assert p.started
    p.close()


def test_tls_with_system_roots_rejects_a_self_signed_certificate(tls_proxy: str) -> None:
    p = Producer(f"rocketmqs://{tls_proxy}", request_timeout=2.0)
    with pytest.raises((FerryConnectionError, FerryTimeoutError)):
        p.start()


def test_plaintext_client_cannot_talk_to_a_tls_port(tls_proxy: str) -> None:
    # Depending on when the TLS server gives up on the plaintext bytes, the client sees a
    # broken connection or an undecodable answer.
    with pytest.raises((FerryConnectionError, FerryTimeoutError, ProtocolError)):
        Producer(tls_proxy, request_timeout=2.0).start()
