"""Foundation: version, error tree, panics, runtime helpers, fork safety, logging."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time

import pytest

import ferrymq
from ferrymq import _native, _registry
from waiting import in_forked_child, wait_for


def test_version_and_features() -> None:
    assert ferrymq.__version__ == _native.__version__
    assert ferrymq.__version__.count(".") == 2
    assert "rocketmq-v2" in ferrymq.features()


def test_public_api_is_exported() -> None:
    for name in ferrymq.__all__:
        assert hasattr(ferrymq, name), name


@pytest.mark.parametrize(
    ("kind", "cls", "builtin"),
    [
        ("connection", ferrymq.FerryConnectionError, ConnectionError),
        ("timeout", ferrymq.FerryTimeoutError, TimeoutError),
        ("protocol", ferrymq.ProtocolError, ferrymq.FerryError),
        ("broker", ferrymq.BrokerError, ferrymq.FerryError),
        ("flow_control", ferrymq.FlowControlError, ferrymq.BrokerError),
        ("invalid", ferrymq.InvalidArgumentError, ValueError),
        ("closed", ferrymq.ClientClosedError, ferrymq.FerryError),
        ("internal", ferrymq.InternalError, ferrymq.FerryError),
    ],
)
def test_error_kinds_map_to_the_tree(kind: str, cls: type, builtin: type) -> None:
    with pytest.raises(cls) as info:
        _native.Probe().fail(kind)
    assert isinstance(info.value, ferrymq.FerryError)
    assert isinstance(info.value, builtin)
    assert "injected by Probe.fail" in str(info.value)


def test_broker_status_keeps_code_and_retriable() -> None:
    probe = _native.Probe()
    with pytest.raises(ferrymq.FlowControlError) as info:
        probe.fail("broker", 42900)
    assert info.value.code == 42900
    assert info.value.code_name == "TOO_MANY_REQUESTS"
    assert info.value.protocol == "rocketmq"
    assert info.value.retriable is True

    with pytest.raises(ferrymq.BrokerError) as info2:
        probe.fail("broker", 40013)
    assert type(info2.value) is ferrymq.BrokerError
    assert info2.value.code_name == "INVALID_RECEIPT_HANDLE"
    assert info2.value.retriable is False


def test_panic_becomes_internal_error() -> None:
    with pytest.raises(ferrymq.InternalError, match="probe panic"):
        _native.Probe().panic()
    # The runtime survives the panic.
    assert _native.Probe().sleep(0.001) == 0.001


async def test_async_panic_becomes_internal_error() -> None:
    with pytest.raises(ferrymq.InternalError, match="probe panic"):
        await _native.Probe().panic_async()


async def test_async_call_runs_on_the_runtime() -> None:
    probe = _native.Probe()
    results = await asyncio.gather(*(probe.sleep_async(0.05) for _ in range(50)))
    assert results == [0.05] * 50


async def test_cancelling_an_async_call() -> None:
    task = asyncio.ensure_future(_native.Probe().sleep_async(30))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancelling_an_async_call_aborts_the_rust_future() -> None:
    # A cancelled sleep of 30 s must not keep its Rust future: the probe's count of live
    # sleep futures drops back once the future is aborted.
    probe = _native.Probe()
    before = probe.live_tasks()

    async def cancel_one() -> None:
        task = asyncio.ensure_future(probe.sleep_async(30))
        await asyncio.sleep(0)
        assert probe.live_tasks() == before + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_one())
    wait_for("the cancelled task to end", lambda: probe.live_tasks() <= before, timeout=10)
    assert probe.live_tasks() == before


async def test_many_async_calls_complete_with_their_own_results() -> None:
    # Completions reach the loop in batches; every future still gets its own result or error.
    probe = _native.Probe()
    delays = [(i % 7) / 1000 for i in range(2000)]
    results = await asyncio.gather(*(probe.sleep_async(d) for d in delays))
    assert results == delays
    outcomes = await asyncio.gather(
        *(probe.panic_async() if i % 3 == 0 else probe.sleep_async(0) for i in range(300)),
        return_exceptions=True,
    )
    for i, outcome in enumerate(outcomes):
        if i % 3 == 0:
            assert isinstance(outcome, ferrymq.InternalError)
        else:
            assert outcome == 0


def test_async_calls_on_successive_and_concurrent_event_loops() -> None:
    probe = _native.Probe()

    async def work(n: int) -> list[float]:
        return await asyncio.gather(*(probe.sleep_async(0.001) for _ in range(n)))

    # A new loop per asyncio.run (the previous one closed), on this thread...
    for _ in range(5):
        assert asyncio.run(work(50)) == [0.001] * 50
    # ... and loops running at the same time on several threads.
    results: list[list[float]] = []

    def run() -> None:
        results.append(asyncio.run(work(200)))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [[0.001] * 200] * 4


def test_async_call_outside_an_event_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        _native.Probe().sleep_async(0.01)


def test_blocking_call_releases_the_gil() -> None:
    probe = _native.Probe()
    ticks = 0
    stop = False

    def spin() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    try:
        probe.sleep(0.3)
    finally:
        stop = True
        t.join()
    # A thread needing the GIL made progress while the blocking call waited.
    assert ticks > 20


@pytest.mark.skipif(sys.platform == "win32", reason="signals")
def test_ctrl_c_interrupts_a_blocking_call() -> None:
    probe = _native.Probe()
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        probe.sleep(30)
    assert time.monotonic() - started < 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_safety() -> None:
    parent_probe = _native.Probe()
    parent_probe.sleep(0.001)  # the runtime is running in the parent

    def child() -> str:
        try:
            parent_probe.sleep(0.001)
            return "an object of the parent worked"
        except ferrymq.ClientClosedError as e:
            if "fork" not in str(e):
                return f"the error does not say why: {e}"
        # A new object in the child gets a fresh runtime and works.
        return str(_native.Probe().sleep(0.01))

    assert in_forked_child(child) == "0.01"
    # The parent is unaffected.
    assert parent_probe.sleep(0.001) == 0.001


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_fork_while_another_thread_reads_the_client_registry() -> None:
    # An exporter's thread reads the registry of live clients; a fork at that moment must not
    # leave the child with a lock nobody will release.
    held, release = threading.Event(), threading.Event()

    def exporter() -> None:
        with _registry._lock:
            held.set()
            release.wait(30)

    def child() -> str:
        ferrymq.Producer("127.0.0.1:1")  # a new client registers itself
        return "registered"

    thread = threading.Thread(target=exporter)
    thread.start()
    try:
        held.wait(10)
        assert in_forked_child(child, timeout=30) == "registered"
    finally:
        release.set()
        thread.join()


@pytest.mark.parametrize(
    ("level", "dropped", "kept"),
    [
        (logging.DEBUG, ("trace", "too verbose"), ("debug", "hello from rust")),
        # the filter applies before forwarding
        (logging.WARNING, ("info", "filtered-out info"), ("error", "kept error")),
    ],
)
def test_rust_logs_reach_python_logging(
    caplog: pytest.LogCaptureFixture, level: int, dropped: tuple[str, str], kept: tuple[str, str]
) -> None:
    probe = _native.Probe()
    with caplog.at_level(level, logger="ferrymq"):
        ferrymq.sync_log_level()
        probe.log(*dropped)
        probe.log(*kept)
        wait_for(kept[1], lambda: any(kept[1] in r.getMessage() for r in caplog.records), 5)
    msgs = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("ferrymq.probe", getattr(logging, kept[0].upper()), kept[1]) in msgs
    assert not any(dropped[1] in m for _, _, m in msgs)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_rust_logs_reach_python_logging_in_a_forked_child() -> None:
    probe = _native.Probe()
    ferrymq.sync_log_level()
    probe.log("warn", "the parent's forwarder is running")

    def child() -> str:  # the parent's forwarder thread did not survive the fork
        seen = threading.Event()

        class Seen(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.getMessage() == "hello from the child":
                    seen.set()

        logging.getLogger("ferrymq").addHandler(Seen())
        _native.Probe().log("warn", "hello from the child")
        return "seen" if seen.wait(20) else "not seen"

    assert in_forked_child(child) == "seen"
