"""Waiting for a condition in tests: poll until it holds or fail with what was awaited."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``cond`` every 20 ms until it is true; ``AssertionError`` naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


async def async_wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """`wait_for` for coroutines: yields to the event loop between polls."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def first_batch(receive: Callable[[], Sequence[T]], tries: int = 20) -> list[T]:
    """The first non-empty answer of ``receive`` (each call waits by itself), in at most
    ``tries`` calls; empty if every call was."""
    for _ in range(tries):
        got = receive()
        if got:
            return list(got)
    return []


def receive_until(
    consumer: Any, want: int, *, ack: bool = True, invisible: float = 15, timeout: float = 60.0
) -> list[Any]:
    """Messages from a simple consumer (ferrymq's or the official client's: ``receive(count,
    invisible)`` and ``ack(message)``), acked unless ``ack`` is false, until ``want`` arrived or
    ``timeout`` seconds passed (each receive waits by itself). The official client takes
    ``invisible`` in whole seconds only."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.receive(32, invisible):
            got.append(m)
            if ack:
                consumer.ack(m)
    return got


class InThread(Generic[T]):
    """``call`` run on a thread of its own from now on; :meth:`wait` hands its outcome to the
    test thread."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._outcome: list[tuple[T | None, BaseException | None]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome.append((self._call(), None))
        except BaseException as e:  # handed to the test thread
            self._outcome.append((None, e))

    def wait(self, timeout: float = 60.0) -> T:
        """What the call returned, or raises what it raised; ``AssertionError`` if it is still
        running after ``timeout`` seconds."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"{self._call!r} still running after {timeout} s")
        [(value, error)] = self._outcome
        if error is not None:
            raise error
        return value  # type: ignore[return-value]


def in_forked_child(body: Callable[[], str], timeout: float = 60.0) -> str:
    """What ``body()`` returns when run in a forked child of this process ("raised: …" if it
    raised); ``AssertionError`` if the child has not answered within ``timeout`` seconds (it
    is killed: a hang in a forked child is what these tests look for)."""
    import os
    import select
    import signal

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's clean-ups
        try:
            answer = body()
        except BaseException as e:
            answer = f"raised: {e!r}"
        os.write(write_fd, answer.encode())
        os._exit(0)
    os.close(write_fd)
    try:
        answered, _, _ = select.select([read_fd], [], [], timeout)
        if not answered:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the forked child did not answer within {timeout} s")
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
