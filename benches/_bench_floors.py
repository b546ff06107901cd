"""What this machine allows any client, measured in the same run as the clients: the ceilings
the per-message paths are read against.

* :func:`echo_round_trips` — a bare loopback TCP echo between this process and a child
  process (blocking sockets, ``TCP_NODELAY``, one request of ``size`` bytes answered before the
  next): no protocol, no client, no broker work. A sync send is one such round trip plus the
  client's and the server's work, so no client's sync sends can beat this rate.
* :func:`asyncio_gather_floor` — ``asyncio.gather`` of coroutines that each take a slot of an
  ``asyncio.Semaphore(window)`` and await a future that a helper task completes in batches
  (no client at all): CPython's own cost of that pattern, the ceiling of any client's
  ``await send_async`` written that way on one core.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

from _bench_measure import Span

_ECHO = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
"""


def _recv_exactly(sock: socket.socket, n: int) -> None:
    while n > 0:
        got = len(sock.recv(n))
        if got == 0:
            raise ConnectionError("the echo process closed the connection")
        n -= got


def echo_round_trips(seconds: float, size: int = 300) -> tuple[float, float]:
    """``(round trips/s, this process's CPU microseconds per round trip)`` of a bare loopback
    TCP echo with a child process, over ``seconds`` after 1,000 warm-up round trips."""
    child = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            payload = b"x" * size
            for _ in range(1000):
                sock.sendall(payload)
                _recv_exactly(sock, size)
            done = 0
            span = Span()
            while span.elapsed() < seconds:
                for _ in range(200):
                    sock.sendall(payload)
                    _recv_exactly(sock, size)
                done += 200
            rate, cpu_us, _ = span.rate(done)
            return rate, cpu_us
    finally:
        child.terminate()
        child.wait(10)


def asyncio_gather_floor(calls: int = 30_000, window: int = 1000) -> tuple[float, float]:
    """``(calls/s, CPU microseconds per call)`` of ``asyncio.gather`` over ``calls`` coroutines,
    each awaiting a future under an ``asyncio.Semaphore(window)``; a helper task completes the
    waiting futures once per loop iteration (a client completing its calls in batches)."""

    async def run() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        sem = asyncio.Semaphore(window)
        waiting: list[asyncio.Future[None]] = []
        stop = False

        async def completer() -> None:
            while not stop:
                await asyncio.sleep(0)
                batch, waiting[:] = waiting[:], []
                for f in batch:
                    f.set_result(None)

        async def one() -> None:
            async with sem:
                f: asyncio.Future[None] = loop.create_future()
                waiting.append(f)
                await f

        helper = asyncio.ensure_future(completer())
        span = Span()
        await asyncio.gather(*(one() for _ in range(calls)))
        rate, cpu_us, _ = span.rate(calls)
        stop = True
        await helper
        return rate, cpu_us

    return asyncio.run(run())


if __name__ == "__main__":
    t = time.perf_counter()
    print("echo round trips/s, CPU us each:", echo_round_trips(2.0))
    print("asyncio gather+semaphore calls/s, CPU us each:", asyncio_gather_floor())
    print(f"({time.perf_counter() - t:.1f} s)")
