"""Consumer throughput: ferrymq vs the official ``rocketmq-python-client`` and the official Java
client (``rocketmq-client-java``, run by ``tests/java/FerryPeer.java``), same broker.

The clients consume pre-loaded messages from the same server, with a trivial callback (Python;
Java: a lambda returning SUCCESS), in one run: the embedded broker in its own process
(``ferrymq broker``, the default) or, with ``--server real``, a real Apache RocketMQ 5 proxy
(``scripts/rocketmq-server``; started and stopped by the script if it is not running). Either
way the server runs outside the clients' processes, so their figures are the client's alone.
The official Python client runs in a process of its own too: alive in the benchmark's process,
its threads slowed the ferrymq runs after it by up to three times, even after its shutdown.
For each client the script prints:

* **msg/s**: messages consumed per second of wall time, from the consumer's start until every
  message was consumed (ferrymq: and acknowledged by the broker; the official clients: until
  their last callback, which favours them slightly). The Java client is measured after a
  warm-up: it consumes ``--java-warmup`` more messages first, and its span runs from the end of
  those to its last callback (its JIT needs thousands of calls before the client runs
  compiled; counted from the start, its figures were mostly start-up and JIT work);
* **CPU µs/msg**: CPU time (user + system) the client's process spent per message over the same
  span (Java: its JVM), which is robust on a busy machine where wall-clock rates vary;

and the ratios ferrymq / official Python and ferrymq / Java. Scenarios:

* ``normal``: a NORMAL topic and group, push consumers;
* ``fifo``: a FIFO topic and group, push consumers, once per ``--message-groups`` count
  (default 100 message groups, then one); ferrymq is measured without and with the FIFO
  accelerator (the official clients have none), each in the default ordered mode (a group's
  next message starts once the broker accepted the previous one's ack) and with
  ``fifo_pipelining=True`` (the next messages run while the ack is under way). With one message
  group the accelerator changes nothing and is skipped, and ferrymq consumes
  ``--single-group-messages`` messages;
* ``simple``: a NORMAL topic and group, simple consumers: receive up to 32 messages, ack each,
  repeat; then each client's fastest way to ack a receive: ferrymq's ``ack(list)`` (one
  ``AckMessage`` request for the receive, client ``ferrymq+ack-batch``) and the Java client's
  ``ackAsync`` per message, waiting for them all (``java+ack-async``). The summary compares
  each ferrymq row with the faster Java row.

Usage (build the extension in release mode first: ``maturin develop --release``)::

    python benches/bench_consumer.py [--messages 200000] [--official-messages 5000]
        [--java-messages 50000] [--java-warmup 20000] [--body 100] [--queues 8]
        [--message-groups 100,1] [--single-group-messages 20000]
        [--scenarios normal,fifo,simple] [--no-official] [--no-java] [--server embedded|real]

The official clients are measured on fewer messages because they are slower; rates are
per-second figures either way. The Java peer needs Java 17 and Maven (``scripts/java-peer``).

``--telemetry [--rounds 5] [--messages N] [--simple-messages N]`` measures instead what
:mod:`ferrymq.telemetry` costs: ferrymq's push consumer (``normal``) and simple consumer with
telemetry off, metrics on, and metrics and traces on (``_bench_telemetry.py``), the variants
alternated over the rounds, each run on a topic of its own loaded beforehand; it prints each
variant's median rate and CPU per message and its ratios to off. ``--traced-messages`` loads
the messages with a trace context (sent inside a span), so that each process span has a parent
and a link. ``--telemetry --interleave SECONDS --messages N`` instead runs one push consumer
over a backlog of N with tracing (always-on) switched on and off every SECONDS, and compares
adjacent slices.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ferrymq
from _bench_measure import cpu_seconds, parser, process_cpu_seconds
from _bench_server import add_arguments, broker_process, open_server
from _bench_telemetry import (
    SLICE_ORDER,
    TAGS,
    Measured,
    always_on_tracing,
    plan,
    report,
    slices_report,
    variant,
)
from _bench_telemetry import add_arguments as telemetry_arguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from java_peer import JavaPeer


@dataclass
class Result:
    label: str
    messages: int
    seconds: float
    cpu: float
    server_cpu: float | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.messages * 1e6

    @property
    def server_cpu_us(self) -> str:
        if self.server_cpu is None:
            return ""
        return f", server {self.server_cpu / self.messages * 1e6:.1f} CPU µs/msg"


SERVER_PID: int | None = None


def measure(label: str, n: int, start: Callable[[], None], done: Callable[[], bool]) -> Result:
    c0, t0, s0 = cpu_seconds(), time.perf_counter(), process_cpu_seconds(SERVER_PID)
    start()
    deadline = t0 + 900
    while not done():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{label}: not done within 900 s")
        time.sleep(0.002)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    s1 = process_cpu_seconds(SERVER_PID)
    server = None if s0 is None or s1 is None else s1 - s0
    return Result(label, n, seconds, cpu, server)


def preload(endpoints: str, topic: str, n: int, body: bytes, groups: int) -> None:
    with ferrymq.Producer(endpoints, topics=[topic]) as p:
        if groups:
            # One batch per message group keeps each group's order and its queue (a FIFO batch
            # is sent message after message); the groups load in parallel.
            per_group: list[list[ferrymq.Message]] = [[] for _ in range(groups)]
            for i in range(n):
                g = i % groups
                per_group[g].append(ferrymq.Message(topic, body, message_group=f"mg-{g}"))
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(p.send_batch, [g for g in per_group if g]))
        else:
            # Packed: up to 1024 messages per request (they share a message id, which
            # consumption does not look at).
            msgs = [ferrymq.Message(topic, body) for _ in range(min(n, 4096))]
            sent = 0
            while sent < n:
                k = min(len(msgs), n - sent)
                p.send_batch(msgs[:k], packed=True)
                sent += k


def run_ferrymq(
    label: str,
    endpoints: str,
    topic: str,
    group: str,
    n: int,
    *,
    accelerator: bool,
    pipelining: bool,
    receive_batch_size: int | None,
) -> Result:
    calls = 0

    def listener(m: ferrymq.MessageView) -> None:
        nonlocal calls
        calls += 1

    c = ferrymq.PushConsumer(
        endpoints,
        group,
        subscriptions={topic: "*"},
        listener=listener,
        fifo_accelerator=accelerator,
        fifo_pipelining=pipelining,
        receive_batch_size=receive_batch_size,
    )
    try:
        return measure(label, n, c.start, lambda: c.stats()["acked"] >= n)
    finally:
        c.close()


def run_ferrymq_simple(
    label: str, endpoints: str, topic: str, group: str, n: int, ack: str = "each"
) -> Result:
    """``ack="each"``: one ``ack`` call (one request) per message; ``"batch"``: one ``ack``
    call per receive, which sends its messages' acks in one ``AckMessage`` request."""
    # 5 s: a real proxy raises shorter long polls to its 5 s floor, and ferrymq's call deadline
    # would then be too short for it (ILLEGAL_POLLING_TIME).
    c = ferrymq.SimpleConsumer(endpoints, group, subscriptions={topic: "*"}, await_duration=5)
    got = 0

    def start() -> None:
        nonlocal got
        c.start()
        while got < n:
            batch = c.receive(32, 60)
            if ack == "batch":
                c.ack(batch)
                got += len(batch)
                continue
            for m in batch:
                c.ack(m)
                got += 1

    try:
        return measure(label, n, start, lambda: got >= n)
    finally:
        c.close()


def run_java(
    java: JavaPeer,
    label: str,
    endpoints: str,
    topic: str,
    group: str,
    n: int,
    warmup: int,
    simple: bool,
    ack: str = "each",
) -> Result:
    """The Java client in its own JVM; its msg/s and CPU are measured inside it, over the last
    ``n`` of ``warmup + n`` messages: the JIT compiles the client's consumption path on the
    first ``warmup`` (measured from the consumer's start, a few thousand messages were mostly
    interpreted and JIT work on a busy machine)."""
    s0 = process_cpu_seconds(SERVER_PID)
    p = java.run(
        "bench-simple" if simple else "bench-push",
        endpoints=endpoints,
        topic=topic,
        group=group,
        count=n,
        warmup_msgs=warmup,
        timeout=900,
        **({"ack": ack} if simple else {}),
    )
    s1 = process_cpu_seconds(SERVER_PID)
    (r,) = p.of("bench")
    warm = {k: v for k, v in r.items() if k.startswith(("warmup", "jit"))}
    print(f"  {label}: warm-up {warm}", flush=True)
    # The server's CPU over the whole run, warm-up included: its share of the measured messages.
    server = None if s0 is None or s1 is None else (s1 - s0) * n / (n + warmup)
    return Result(label, n, r["seconds"], r["cpu_seconds"], server)


def shim_official_client() -> None:
    """The official push consumer computes a delivery-latency metric from the
    ``delivery_timestamp`` element of the receive stream and raises when a server omits it,
    dropping the whole received batch. The embedded broker now ends every receive stream with
    that element, as the proxy does (tests/test_conformance.py), so the shim only guards against
    servers that omit it: it skips that metric when the timestamp is missing; consumption is
    unchanged."""
    from rocketmq.v5.client.metrics.client_metrics import ClientMetrics

    original = ClientMetrics.receive_after

    def receive_after(self: Any, consumer_group: Any, messages: Any) -> None:
        if messages and messages[0].transport_delivery_timestamp is None:
            return
        original(self, consumer_group, messages)

    ClientMetrics.receive_after = receive_after  # type: ignore[method-assign]


def run_official(label: str, endpoints: str, topic: str, group: str, n: int) -> Result:
    shim_official_client()
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    lock = threading.Lock()
    calls = 0

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            nonlocal calls
            with lock:
                calls += 1
            return ConsumeResult.SUCCESS

    config = ClientConfiguration(endpoints, Credentials(), request_timeout=5)
    c = PushConsumer(config, group, Listener(), {topic: FilterExpression("*")})
    try:
        return measure(label, n, c.startup, lambda: calls >= n)
    finally:
        c.shutdown()


def run_official_simple(label: str, endpoints: str, topic: str, group: str, n: int) -> Result:
    shim_official_client()
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(endpoints, Credentials(), request_timeout=5)
    c = SimpleConsumer(config, group, {topic: FilterExpression("*")}, 2)
    got = 0

    def start() -> None:
        nonlocal got
        c.startup()
        # Its startup() does not wait for the server to hold its settings; a receive right after
        # it races them and a real proxy fails it (tests/test_broker_official_client.py).
        for attempt in range(100):
            try:
                batch = c.receive(32, 60)
                break
            except Exception:
                if attempt == 99:
                    raise
                time.sleep(0.05)
        while True:
            for m in batch:
                c.ack(m)
                got += 1
            if got >= n:
                return
            batch = c.receive(32, 60)

    try:
        return measure(label, n, start, lambda: got >= n)
    finally:
        c.shutdown()


def official_worker(
    label: str, endpoints: str, topic: str, group: str, n: str, server_pid: str
) -> int:
    """``--official-worker``: one official client run, printed as one JSON line."""
    global SERVER_PID
    SERVER_PID = int(server_pid) or None
    simple = label.startswith("simple")
    run = run_official_simple if simple else run_official
    r = run(label, endpoints, topic, group, int(n))
    print(json.dumps([r.seconds, r.cpu, r.server_cpu]), flush=True)
    return 0


def run_official_apart(
    label: str, endpoints: str, topic: str, group: str, n: int, simple: bool
) -> Result:
    """The official client's run, in a process of its own: alive in the benchmark's process,
    its threads slowed the ferrymq runs after it by up to 3 times, even after ``shutdown()``."""
    argv = [sys.executable, __file__, "--official-worker", label, endpoints, topic, group]
    out = subprocess.run(
        [*argv, str(n), str(SERVER_PID or 0)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        timeout=1200,
    )
    seconds, cpu, server = json.loads(out.stdout.strip().splitlines()[-1])
    return Result(label, n, seconds, cpu, server)


@dataclass
class Step:
    scenario: str
    client: str
    topic: str
    group: str
    messages: int
    fifo: bool
    message_groups: int = 0
    accelerator: bool = False
    pipelining: bool = False
    warmup: int = 0  # messages consumed before the measured ones (Java)
    # simple: "each" (an ack call per message), "batch" (ferrymq: one per receive), "async"
    # (Java: an ackAsync per message, then a wait for all)
    ack: str = "each"


def build_plan(args: argparse.Namespace, java: bool) -> list[Step]:
    plan: list[Step] = []
    for scenario in args.scenarios.split(","):
        names = [scenario]
        if scenario == "fifo":
            names = [f"fifo-{int(g)}g" for g in args.message_groups.split(",")]
        for name in names:
            fifo = scenario == "fifo"
            groups = int(name[5:-1]) if fifo else 0
            if not args.no_official:
                plan.append(
                    Step(name, "official", f"official-{name}", f"official-{name}-g",
                         args.official_messages, fifo, groups)
                )  # fmt: skip
            # simple: each client acks message by message, and in its fastest way besides
            # (Java: an ackAsync per message, then waits for them all; ferrymq: one ack call)
            acks = [("", "each"), ("+ack-async", "async")] if name == "simple" else [("", "each")]
            for suffix, ack in acks if java else []:
                tag = f"java-{name}{suffix.replace('+', '-')}"
                plan.append(
                    Step(name, "java" + suffix, tag, f"{tag}-g", args.java_messages,
                         fifo, groups, warmup=args.java_warmup, ack=ack)
                )  # fmt: skip
            if not fifo:
                acks = [("", "each"), ("+ack-batch", "batch")] if name == "simple" else acks
                for suffix, ack in acks:
                    tag = f"ferrymq-{name}{suffix.replace('+', '-')}"
                    plan.append(
                        Step(name, "ferrymq" + suffix, tag, f"{tag}-g", args.messages, False,
                             ack=ack)
                    )  # fmt: skip
                continue
            n = args.single_group_messages if groups == 1 else args.messages
            for accelerator in [False, True] if groups > 1 else [False]:
                for pipelining in [False, True]:
                    client = "ferrymq" + "+accelerator" * accelerator + "+pipelining" * pipelining
                    tag = f"ferrymq-{name}{'-a' * accelerator}{'-p' * pipelining}"
                    plan.append(
                        Step(name, client, tag, f"{tag}-g", n, True, groups,
                             accelerator=accelerator, pipelining=pipelining)
                    )  # fmt: skip
    return plan


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def telemetry_cost(args: argparse.Namespace, body: bytes) -> int:
    """``--telemetry``: ferrymq's push and simple consumers with telemetry off, metrics on,
    metrics+traces on; a topic and group per run, loaded before it."""
    runs = [
        (r, name, scenario)
        for r, name in plan(args.rounds, args.variants)
        for scenario in ("push", "simple")
    ]

    def names(r: int, name: str, scenario: str) -> tuple[str, str]:
        t = f"tel-{scenario}-{r}-{TAGS[name]}"
        return t, t + "-g"

    topics = [{"name": names(*x)[0], "message_type": "NORMAL", "queues": args.queues} for x in runs]
    groups = [{"name": names(*x)[1], "fifo": False} for x in runs]
    options = {"long_polling_min": 1.0, "max_topic_bytes": 1 << 30, "auto_renew_invisible": 300.0}
    config = {"topics": topics, "groups": groups, "options": options}
    results: dict[str, dict[str, list[Measured]]] = {}
    with broker_process(config) as (proc, endpoints):
        global SERVER_PID
        SERVER_PID = proc.pid
        for r, name, scenario in runs:
            topic, group = names(r, name, scenario)
            n = args.messages if scenario == "push" else args.simple_messages
            if args.traced_messages:
                with ferrymq.Producer(endpoints, topics=[topic]) as p:
                    m = ferrymq.Message(topic, body, trace_context=TRACEPARENT)
                    for _ in range(0, n, 1000):
                        p.send_batch([m] * 1000, packed=True)
            else:
                preload(endpoints, topic, n, body, 0)
            label = f"round {r} {name} {scenario}"
            with variant(name):
                if scenario == "push":
                    res = run_ferrymq(
                        label, endpoints, topic, group, n,
                        accelerator=False, pipelining=False,
                        receive_batch_size=args.receive_batch_size,
                    )  # fmt: skip
                else:
                    res = run_ferrymq_simple(label, endpoints, topic, group, n)
            results.setdefault(scenario, {}).setdefault(name, []).append((res.rate, res.cpu_us))
            print(
                f"  {label:<32} {res.rate:>10,.0f} msg/s {res.cpu_us:>7.2f} CPU us/msg"
                f" ({n:,} messages in {res.seconds:.2f} s{res.server_cpu_us})",
                flush=True,
            )
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    traced = "with" if args.traced_messages else "without"
    report(
        results,
        f"broker in its own process; messages {traced} a trace context; {args.rounds} rounds;"
        f" load average at the end {load}",
    )
    return 0


def interleaved_push(args: argparse.Namespace, body: bytes) -> int:
    """``--telemetry --interleave SECONDS``: one push consumer drains a backlog of
    ``--messages`` while ferrymq's tracing (an always-on sampler) is switched on and off every
    SECONDS, in ABBA order; each traced slice is compared with the untraced one next to it, so
    that the machine's speed, which drifts by 2x over a minute here, is nearly the same for
    both."""
    topic, group = "tel-interleave", "tel-interleave-g"
    options = {"long_polling_min": 1.0, "max_topic_bytes": 1 << 31, "auto_renew_invisible": 300.0}
    config = {
        "topics": [{"name": topic, "message_type": "NORMAL", "queues": args.queues}],
        "groups": [{"name": group, "fifo": False}],
        "options": options,
    }
    n = args.messages
    slices: list[tuple[bool, float, float, float]] = []
    with broker_process(config) as (proc, endpoints), always_on_tracing() as tracers:
        preload(endpoints, topic, n, body, 0)
        c = ferrymq.PushConsumer(
            endpoints,
            group,
            subscriptions={topic: "*"},
            listener=lambda m: None,
            receive_batch_size=args.receive_batch_size,
        )

        def usage() -> tuple[int, float, float]:
            server = process_cpu_seconds(proc.pid) or 0.0
            return c.stats()["acked"], cpu_seconds() + server, time.perf_counter()

        try:
            c.start()
            time.sleep(args.interleave)  # warm-up, not counted
            while True:
                traced = SLICE_ORDER[len(slices) % len(SLICE_ORDER)]
                if traced:
                    ferrymq.telemetry.enable(metrics=False, tracer_provider=tracers)
                else:
                    ferrymq.telemetry.disable()
                m0, c0, t0 = usage()
                time.sleep(args.interleave)
                m1, c1, t1 = usage()
                if m1 >= n:  # the backlog ran out within this slice: not counted
                    break
                slices.append((traced, t1 - t0, m1 - m0, c1 - c0))
        finally:
            ferrymq.telemetry.disable()
            c.close()
    slices_report(
        slices,
        f"push consumer, trivial listener, {len(slices)} slices of {args.interleave} s,"
        " broker in its own process, its CPU counted",
    )
    return 0


def main() -> int:
    ap = parser(__doc__, messages=200_000, official_messages=5_000, java_messages=50_000, queues=8)
    ap.add_argument(
        "--java-warmup",
        type=int,
        default=20_000,
        help="messages the Java consumer consumes before its measured ones (JIT warm-up)",
    )
    ap.add_argument("--body", type=int, default=100, help="body size in bytes")
    ap.add_argument(
        "--message-groups",
        default="100,1",
        help="FIFO scenarios: message groups of each (comma-separated)",
    )
    ap.add_argument(
        "--single-group-messages",
        type=int,
        default=20_000,
        help="ferrymq's messages in a FIFO scenario with one message group",
    )
    ap.add_argument("--scenarios", default="normal,fifo,simple")
    ap.add_argument("--no-official", action="store_true")
    ap.add_argument("--no-java", action="store_true")
    ap.add_argument("--official-worker", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument(
        "--receive-batch-size",
        type=int,
        default=None,
        help="ferrymq's messages per receive (default: the server's, 32; a real proxy caps it "
        "at 32, the embedded broker at 1024)",
    )
    telemetry_arguments(ap)
    ap.add_argument(
        "--simple-messages", type=int, default=30_000, help="--telemetry: simple consumer's"
    )
    ap.add_argument(
        "--interleave",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="--telemetry: instead, one push consumer with tracing switched on and off every"
        " SECONDS (--messages: its backlog)",
    )
    ap.add_argument(
        "--traced-messages",
        action="store_true",
        help="--telemetry: messages carry a trace context",
    )
    add_arguments(ap)
    args = ap.parse_args()
    if args.official_worker:
        return official_worker(*args.official_worker)
    body = b"x" * args.body
    if args.telemetry and args.interleave:
        return interleaved_push(args, body)
    if args.telemetry:
        return telemetry_cost(args, body)
    java = None if args.no_java else JavaPeer()
    plan = build_plan(args, java is not None)
    topics = [
        {"name": st.topic, "message_type": "FIFO" if st.fifo else "NORMAL", "queues": args.queues}
        for st in plan
    ]
    groups = [{"name": st.group, "fifo": st.fifo} for st in plan]
    results: dict[str, dict[str, Result]] = {}
    with contextlib.ExitStack() as stack:
        if args.server == "real":
            # Topics and groups of a real server outlive the run: unique names.
            suffix = f"-{int(time.time())}"
            for st in plan:
                st.topic += suffix
                st.group += suffix
            server = stack.enter_context(open_server(args))
            server.setup(
                {st.topic: "FIFO" if st.fifo else "NORMAL" for st in plan},
                [st.group for st in plan if not st.fifo],
                fifo_groups=[st.group for st in plan if st.fifo],
            )
            endpoints = server.endpoints
        else:
            options = {"long_polling_min": 1.0, "max_topic_bytes": 1 << 30}
            options["auto_renew_invisible"] = 300.0
            config = {"topics": topics, "groups": groups, "options": options}
            proc, endpoints = stack.enter_context(broker_process(config))
            global SERVER_PID
            SERVER_PID = proc.pid
        for st in plan:
            scenario, client, topic, group, n = (
                st.scenario, st.client, st.topic, st.group, st.messages
            )  # fmt: skip
            preload(endpoints, topic, n + st.warmup, body, st.message_groups)
            label = f"{scenario}/{client}"
            simple = scenario == "simple"
            if client.startswith("java"):
                assert java is not None
                r = run_java(java, label, endpoints, topic, group, n, st.warmup, simple, st.ack)
            elif client == "official":
                r = run_official_apart(label, endpoints, topic, group, n, simple)
            elif simple:
                r = run_ferrymq_simple(label, endpoints, topic, group, n, st.ack)
            else:
                r = run_ferrymq(
                    label,
                    endpoints,
                    topic,
                    group,
                    n,
                    accelerator=st.accelerator,
                    pipelining=st.pipelining,
                    receive_batch_size=args.receive_batch_size,
                )
            results.setdefault(scenario, {})[client] = r
            print(
                f"{label:<40} {r.rate:>10,.0f} msg/s  {r.cpu_us:>8.1f} CPU µs/msg  "
                f"({n:,} messages in {r.seconds:.2f} s{r.server_cpu_us})",
                flush=True,
            )

    print(
        f"\nsummary (server: {args.server}; trivial callback; server in its own process; "
        "ratios are ferrymq / other client):"
    )
    for scenario, by_client in results.items():
        # the Java client in its fastest way (simple: ack each or ackAsync)
        javas = [r for c, r in by_client.items() if c.startswith("java")]
        others = {
            "official": by_client.get("official"),
            "java": max(javas, key=lambda r: r.rate) if javas else None,
        }
        for client, r in by_client.items():
            line = f"  {scenario:<9} {client:<31} {r.rate:>10,.0f} msg/s {r.cpu_us:>8.1f} µs/msg"
            if client.startswith("ferrymq"):
                for name, o in others.items():
                    if o is not None:
                        line += (
                            f"   vs {'Python' if name == 'official' else 'Java'}: "
                            f"{r.rate / o.rate:,.1f}x msg/s, {o.cpu_us / r.cpu_us:,.1f}x less CPU"
                        )
            pipelined = by_client.get(client + "+pipelining")
            if pipelined is not None:
                line += f"   ordered/pipelined {r.rate / pipelined.rate:.2f}x msg/s"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
