"""Property-based tests of the public API: adversarial values into every parameter.

Each case names one public call (a constructor or a method on a live client of the embedded
broker, of its JMQ4 port or of the session's nats-server) and the kind of each of its
parameters. For every example, hypothesis picks one parameter and an adversarial value for it
(huge, negative and non-finite numbers, ``2**64``, empty and 1 MiB strings, NUL, lone
surrogates, wrong types, extreme ``timedelta``s) while the others keep valid defaults.

The oracle: the call succeeds, or raises ``ferrymq.FerryError``, ``TypeError`` or
``ValueError``; an ``InvalidArgumentError``, ``TypeError``, plain ``ValueError`` or
``OverflowError`` must name the parameter. A ``PanicException``, ``AttributeError``,
``KeyError``, ``IndexError``, ``SystemError``, ``ferrymq.InternalError`` or a call slower
than ``CALL_LIMIT`` fails the test (the values and the oracle are in ``api_oracle.py``).
Example counts are fixed and derandomized so the module runs in bounded time; the total number
of calls is reported at the end of the module.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ferrymq
from _nats_server import NatsServer
from api_oracle import EVERYTHING, KINDS, MIB, OUTCOMES, TRIED, VIOLATIONS, check, closing, kinds
from ferrymq.testing import EmbeddedBroker

APP, TOKEN = "test_app", "test_token"
#: Examples per case are multiplied by this (FERRYMQ_PROPS_SCALE; 1 keeps the module around
#: half a minute on two cores, raise it for a longer local run).
SCALE = float(os.environ.get("FERRYMQ_PROPS_SCALE", "2"))

pytestmark = pytest.mark.timeout(300)

# -- the live environment -----------------------------------------------------------------------


@dataclass
class Live:
    broker: EmbeddedBroker
    admin: EmbeddedBroker
    nats_url: str
    topic: str
    fifo_topic: str
    group: str
    producer: ferrymq.Producer
    consumer: ferrymq.SimpleConsumer
    view: ferrymq.MessageView
    pull: ferrymq.PullConsumer
    queue: Any
    js: ferrymq.JetStream
    stream: str
    jmq_facade: ferrymq.Producer
    remoting_facade: ferrymq.Producer
    extra: list[Any] = field(default_factory=list)


@pytest.fixture(scope="module")
def live(
    broker: EmbeddedBroker, nats_server: NatsServer, request: pytest.FixtureRequest
) -> Iterator[Live]:
    topic, fifo_topic, group = "props-t", "props-fifo", "props-g"
    broker.create_topic(topic)
    broker.create_topic(fifo_topic, "FIFO")
    broker.create_group(group)
    producer = ferrymq.Producer(broker.endpoints, topics=[topic], request_timeout=3.0).start()
    for i in range(400):
        producer.produce(ferrymq.Message(topic, b"seed %d" % i))
    producer.flush(30)
    consumer = ferrymq.SimpleConsumer(
        broker.endpoints,
        group,
        subscriptions={topic: "*"},
        await_duration=0.2,
        request_timeout=3.0,
    ).start()
    views = consumer.receive(1, invisible_duration=600)
    assert views
    pull = ferrymq.PullConsumer(broker.remoting_endpoint, "props-pull", request_timeout=3.0)
    queue = pull.queues(topic)[0]
    pull.assign([queue])
    js = ferrymq.JetStream(nats_server.url, request_timeout=2.0, connect_timeout=2.0)
    stream = "PROPS"
    js.create_stream(stream, ["props.>"], storage="memory")
    nats_server.publish("props.a", b"x")
    jmq_topic = "props-jmq"
    broker.create_topic(jmq_topic)
    jmq_facade = ferrymq.Producer(
        broker.jmq_endpoint, app=APP, token=TOKEN, request_timeout=3.0
    ).start()
    remoting_facade = ferrymq.Producer(broker.remoting_endpoint, request_timeout=3.0).start()
    admin = EmbeddedBroker(endpoints=2)
    admin.create_topic("admin-t")
    env = Live(
        broker=broker,
        admin=admin,
        nats_url=nats_server.url,
        topic=topic,
        fifo_topic=fifo_topic,
        group=group,
        producer=producer,
        consumer=consumer,
        view=views[0],
        pull=pull,
        queue=queue,
        js=js,
        stream=stream,
        jmq_facade=jmq_facade,
        remoting_facade=remoting_facade,
    )
    try:
        yield env
    finally:
        for obj in [
            jmq_facade,
            remoting_facade,
            js,
            pull,
            consumer,
            producer,
            admin,
            *env.extra,
        ]:
            closing(obj)
        total = sum(TRIED.values())
        lines = [f"api properties: {total} inputs tried over {len(TRIED)} calls"]
        lines += [f"  {name}: {n}" for name, n in sorted(TRIED.items())]
        lines.append("  outcomes: " + ", ".join(f"{k}={v}" for k, v in OUTCOMES.most_common()))
        lines += [f"  VIOLATION {text}" for text in VIOLATIONS.values()]
        # straight to the terminal (not captured), so the count shows in every run
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            for line in ["", *lines]:
                if reporter is not None:
                    reporter.write_line(line)
                else:
                    print(line)


# -- the catalogue ------------------------------------------------------------------------------


def messages_of(live: Live) -> st.SearchStrategy[Any]:
    """Messages with one adversarial argument (or the value itself when that is refused)."""

    def build(arg: str, value: Any) -> Any:
        args: dict[str, Any] = {"topic": live.topic, "body": b"b"}
        args[arg] = value
        try:
            return ferrymq.Message(args.pop("topic"), args.pop("body"), **args)
        except Exception:
            return value

    return st.one_of(
        st.builds(
            build,
            st.sampled_from(["topic", "body", "keys", "tag", "properties", "message_group"]),
            KINDS["str"],
        ),
        EVERYTHING,
    )


@dataclass
class Case:
    name: str
    #: call(live, kwargs) -> result; kwargs hold every parameter below
    call: Callable[[Live, dict[str, Any]], Any]
    #: valid values of the parameters: fixed, or given the live environment
    defaults: dict[str, Any] | Callable[[Live], dict[str, Any]]
    #: parameter -> kind (a key of KINDS, or a function of the live environment)
    kinds: dict[str, Any]
    examples: int = 40
    #: close what a successful call returns
    close_result: bool = False
    #: parameter -> other names its errors may carry (a nested field, a dependent parameter)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def args(self, live: Live) -> dict[str, Any]:
        """A fresh copy of the valid values."""
        d = self.defaults
        return d(live) if callable(d) else copy.deepcopy(d)


#: The live object a ``"Class.method"`` case calls (a dotted attribute path of `Live`).
RECEIVERS = {
    "Producer": "producer",
    "SimpleConsumer": "consumer",
    "PullConsumer": "pull",
    "EmbeddedBroker": "admin",
    "JetStream": "js",
    "JmqServer": "admin.jmq",
}


def method(
    name: str,
    defaults: dict[str, Any] | Callable[[Live], dict[str, Any]],
    kinds: dict[str, Any],
    **kw: Any,
) -> Case:
    """A case calling the method ``name`` ("Class.method") of the live object of that class
    (`RECEIVERS`) with every parameter as a keyword argument."""
    cls, meth = name.split(".")
    receiver = operator.attrgetter(RECEIVERS[cls])
    return Case(name, lambda lv, a: getattr(receiver(lv), meth)(**a), defaults, kinds, **kw)


def _a_message(live: Live) -> dict[str, Any]:
    return {"message": ferrymq.Message(live.topic, b"x")}


def _message_lists(live: Live) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(messages_of(live), max_size=3), EVERYTHING)


def send_cases(
    name: str, producer: Callable[[Live], Any], examples: int = 40, tx_name: str | None = None
) -> list[Case]:
    """``send`` and ``send_batch`` of the producer ``name``: one adversarial message, or a
    list of them; and, named ``tx_name``, a transaction's ``send`` (25 examples)."""
    cases = [
        Case(
            f"{name}.send",
            lambda lv, a: producer(lv).send(a["message"]),
            _a_message,
            {"message": messages_of},
            examples=examples,
        ),
        Case(
            f"{name}.send_batch",
            lambda lv, a: producer(lv).send_batch(a["messages"]),
            lambda lv: {"messages": [ferrymq.Message(lv.topic, b"x")]},
            {"messages": _message_lists},
            examples=examples,
        ),
    ]
    if tx_name is not None:
        cases.append(
            Case(tx_name, _tx_send(producer), _a_message, {"message": messages_of}, examples=25)
        )
    return cases


def _message(live: Live, a: dict[str, Any]) -> Any:
    return ferrymq.Message(a.pop("topic"), a.pop("body"), **a)


def _push(live: Live, a: dict[str, Any]) -> Any:
    c = ferrymq.PushConsumer(live.broker.endpoints, a.pop("group"), **a)
    try:
        c.start()
    finally:
        c.close(timeout=2)


_FACADE_ARGS = ("app", "token", "namespace", "max_attempts", "max_pending", "request_timeout")


def _jmq_producer(live: Live, a: dict[str, Any]) -> Any:
    """``Producer("jmq://")``: its own arguments, and the JMQ4 options through ``jmq_options``."""
    own = {k: a.pop(k) for k in _FACADE_ARGS if k in a}
    return ferrymq.Producer(live.broker.jmq_endpoint, jmq_options=a, **own)


def _publisher(live: Live, a: dict[str, Any]) -> Any:
    p = ferrymq.AsyncPublisher(live.producer, **a)
    p.close(timeout=2)


def _submit(live: Live, a: dict[str, Any]) -> Any:
    p = ferrymq.AsyncPublisher(live.producer, wait_timeout=2)
    try:
        flight = p.submit(a.pop("subject"), **a)
        with contextlib.suppress(ferrymq.FerryError, TimeoutError):
            flight.result(timeout=5)
    finally:
        p.close(timeout=2)


def _stream(live: Live, a: dict[str, Any]) -> Any:
    info = live.js.create_stream(a.pop("name"), a.pop("subjects"), **a)
    live.js.delete_stream(info.name)


def _tx_send(producer: Callable[[Live], ferrymq.Producer]) -> Callable[[Live, dict[str, Any]], Any]:
    """Send the message in a transaction of ``producer`` (rolled back after)."""

    def call(live: Live, a: dict[str, Any]) -> Any:
        tx = producer(live).begin_transaction()
        try:
            return tx.send(a["message"])
        finally:
            with contextlib.suppress(ferrymq.FerryError):
                tx.rollback()

    return call


def _close_publisher(live: Live, a: dict[str, Any]) -> Any:
    ferrymq.AsyncPublisher(live.producer).close(**a)


def _close_push(live: Live, a: dict[str, Any]) -> Any:
    args = dict(D_PUSH)
    ferrymq.PushConsumer(live.broker.endpoints, args.pop("group"), **args).start().close(**a)


def _seek(live: Live, a: dict[str, Any]) -> Any:
    live.pull.assign([live.queue])  # an earlier assign example may have changed it
    return live.pull.seek(**a)


D_PUSH = {
    "group": "props-push",
    "subscriptions": {"props-t": "*"},
    "listener": lambda m: ferrymq.ConsumeResult.SUCCESS,
    "consumption_threads": 2,
    "max_cache_messages": 16,
    "max_cache_bytes": MIB,
    "receive_batch_size": 4,
    "max_concurrent_receives": 1,
    "request_timeout": 2.0,
}
#: The parameters of a JetStream publish (``JetStream.publish`` and ``AsyncPublisher.submit``).
PUBLISH_KINDS = kinds(
    str="message_id expected_stream expected_last_msg_id",
    int="expected_last_sequence expected_last_subject_sequence",
    bytes="body",
    mapping="headers",
)

CASES = [
    Case(
        "Message",
        _message,
        lambda lv: {"topic": lv.topic, "body": b"x"},
        kinds(
            str="topic tag message_group",
            bytes="body",
            strs="keys",
            mapping="properties",
            duration="delivery_time",
            int="priority",
        ),
        examples=150,
    ),
    Case(
        "Producer",
        lambda lv, a: ferrymq.Producer(a.pop("endpoints"), **a),
        lambda lv: {"endpoints": lv.broker.endpoints},
        kinds(
            endpoint="endpoints",
            strs="topics",
            any="credentials tls",
            str="namespace app token",
            duration="request_timeout heartbeat_interval route_refresh_interval",
            int="max_attempts max_pending",
            mapping="jmq_options",
        ),
        examples=80,
        close_result=True,
    ),
    *send_cases("Producer", lambda lv: lv.producer, tx_name="Transaction.send"),
    Case(
        "Producer.produce",
        lambda lv, a: (lv.producer.produce(a["message"], a["on_delivery"]), lv.producer.flush(5)),
        lambda lv: {"message": ferrymq.Message(lv.topic, b"x"), "on_delivery": None},
        {"message": messages_of, "on_delivery": "any"},
    ),
    method("Producer.poll", {}, {"timeout": "wait"}),
    method("Producer.flush", {}, {"timeout": "wait"}),
    method(
        "Producer.recall",
        lambda lv: {"topic": lv.topic, "recall_handle": "h"},
        {"topic": "str", "recall_handle": "str"},
    ),
    Case(
        "SimpleConsumer",
        lambda lv, a: ferrymq.SimpleConsumer(a.pop("endpoints"), a.pop("group"), **a),
        lambda lv: {"endpoints": lv.broker.endpoints, "group": lv.group},
        kinds(
            endpoint="endpoints",
            str="group namespace",
            mapping="subscriptions",
            duration="await_duration request_timeout",
            any="credentials tls",
        ),
        close_result=True,
        aliases={"subscriptions": ("filter",)},
    ),
    method(
        "SimpleConsumer.receive",
        {"max_messages": 1, "invisible_duration": 600},
        {"max_messages": "int", "invisible_duration": "duration"},
    ),
    method("SimpleConsumer.ack", lambda lv: {"message": lv.view}, {"message": "any"}, examples=25),
    method(
        "SimpleConsumer.change_invisible_duration",
        lambda lv: {"message": lv.view, "duration": 600},
        {"message": "any", "duration": "duration"},
    ),
    method(
        "SimpleConsumer.subscribe",
        lambda lv: {"topic": lv.topic, "filter": None},
        {"topic": "str", "filter": "any"},
        examples=25,
    ),
    Case(
        "PushConsumer",
        _push,
        D_PUSH,
        kinds(
            str="group",
            mapping="subscriptions",
            any="listener",
            int="consumption_threads max_cache_messages max_cache_bytes receive_batch_size "
            "max_concurrent_receives",
            bool="fifo_accelerator fifo_pipelining",
            duration="shutdown_timeout request_timeout",
        ),
        examples=60,
    ),
    Case(
        "PullConsumer",
        lambda lv, a: ferrymq.PullConsumer(a.pop("endpoints"), a.pop("group"), **a),
        lambda lv: {"endpoints": lv.broker.remoting_endpoint, "group": "props-pull2"},
        kinds(
            endpoint="endpoints",
            str="group tag_filter auto_offset_reset namespace",
            any="credentials",
            duration="request_timeout",
        ),
        close_result=True,
    ),
    method("PullConsumer.assign", lambda lv: {"queues": [lv.queue]}, {"queues": "list"}),
    Case(
        "PullConsumer.seek",
        _seek,
        lambda lv: {"queue": lv.queue, "offset": 0},
        {"queue": "any", "offset": "int"},
    ),
    method(
        "PullConsumer.poll",
        {"max_messages": 2, "timeout": 0.1},
        {"max_messages": "int", "timeout": "receive_wait"},
    ),
    method(
        "PullConsumer.commit",
        lambda lv: {"offsets": {lv.queue: 0}},
        {
            "offsets": lambda lv: st.one_of(
                st.builds(lambda v: {lv.queue: v}, KINDS["int"]), KINDS["mapping"]
            )
        },
    ),
    method(
        "PullConsumer.offsets_for_times",
        lambda lv: {"timestamps": {lv.queue: 0}},
        {
            "timestamps": lambda lv: st.one_of(
                st.builds(lambda v: {lv.queue: v}, st.one_of(KINDS["int"], KINDS["duration"])),
                KINDS["mapping"],
            )
        },
    ),
    Case(
        "AsyncPublisher",
        _publisher,
        {},
        kinds(
            str="id_prefix",
            int="max_in_flight refill_allowed_at",
            any="retry listener",
            duration="poll_time hold_pause_time wait_timeout",
        ),
    ),
    Case(
        "AsyncPublisher.submit",
        _submit,
        lambda lv: {"subject": ferrymq.Message(lv.topic, b"x")},
        {"subject": messages_of, **PUBLISH_KINDS},
        examples=30,
        # a str subject (a NATS subject) needs a body; a RocketMQ producer wants a Message
        aliases={"subject": ("body",)},
    ),
    Case(
        "JetStream",
        lambda lv, a: ferrymq.JetStream(a.pop("endpoints"), **a),
        lambda lv: {"endpoints": lv.nats_url, "connect_timeout": 2.0, "request_timeout": 2.0},
        kinds(
            endpoint="endpoints",
            str="name user password token",
            wait="connect_timeout",
            duration="request_timeout",
        ),
        examples=30,
        close_result=True,
    ),
    Case(
        "JetStream.create_stream",
        _stream,
        {"name": "PROPS2", "subjects": ["props2.>"], "storage": "memory"},
        kinds(
            str="name storage retention",
            strs="subjects",
            duration="duplicate_window max_age",
            int="max_messages max_bytes replicas",
        ),
        examples=60,
    ),
    method(
        "JetStream.consumer_state",
        {"group": "props-c", "subject": "props.a"},
        {"group": "str", "subject": "str", "stream": "str"},
        examples=25,
    ),
    Case(
        "Producer(jmq://)",
        _jmq_producer,
        {"app": APP, "token": TOKEN},
        kinds(
            str="app token namespace region qos compression client_ip",
            int="max_attempts max_pending compress_threshold max_body",
            duration="request_timeout send_timeout transaction_timeout feedback_interval "
            "metadata_refresh",
            strs="transaction_topics",
        ),
        examples=80,
        close_result=True,
    ),
    Case(
        "SimpleConsumer(jmq).jmq_options",
        lambda lv, a: ferrymq.SimpleConsumer(
            lv.broker.jmq_endpoint, APP, subscriptions="props-jmq", token=TOKEN, jmq_options=a
        ),
        {},
        kinds(
            str="mode region client_ip",
            duration="ack_timeout long_poll session_timeout metadata_refresh",
        ),
        close_result=True,
    ),
    Case(
        "EmbeddedBroker",
        lambda lv, a: EmbeddedBroker(**a),
        {"jmq": False},
        kinds(
            int="endpoints max_body_size max_topic_bytes transaction_check_max auto_create_queues",
            bool="auto_create",
            endpoint="host",
            any="ports",
            str="when_full access_key secret_key",
            duration="long_polling_min long_polling_max min_invisible max_invisible "
            "auto_renew_invisible transaction_check_delay transaction_check_interval max_delay",
        ),
        examples=60,
        close_result=True,
    ),
    method(
        "EmbeddedBroker.create_topic",
        {"name": "admin-t2", "message_type": "NORMAL", "queues": 2},
        {"name": "str", "message_type": "str", "queues": "int"},
    ),
    method(
        "EmbeddedBroker.create_group",
        {"name": "admin-g"},
        kinds(str="name", bool="fifo", int="max_delivery_attempts", durations="retry_backoff"),
    ),
    Case(
        "EmbeddedBroker.update_settings",
        lambda lv, a: (
            lv.admin.update_settings(**a),
            lv.admin.update_settings(max_body_size=4 * MIB, producer_max_attempts=3),
        ),
        {"max_body_size": None, "producer_max_attempts": None},
        {"max_body_size": "int", "producer_max_attempts": "int"},
    ),
    method(
        "EmbeddedBroker.set_queue_permission",
        {"topic": "admin-t", "endpoint": 0, "queue": 0, "permission": "rw"},
        {"topic": "str", "endpoint": "int", "queue": "int", "permission": "str"},
    ),
    Case(
        "EmbeddedBroker.set_unavailable",
        lambda lv, a: (lv.admin.set_unavailable(**a), lv.admin.clear_faults()),
        {"endpoint": 1, "mode": None},
        {"endpoint": "int", "mode": "str"},
    ),
    Case(
        "EmbeddedBroker.inject_status",
        lambda lv, a: (lv.admin.inject_status(**a), lv.admin.clear_faults()),
        {"endpoint": 1, "code": 50001},
        kinds(int="endpoint code count", str="rpc message", float="fraction"),
    ),
    Case(
        "EmbeddedBroker.set_latency",
        lambda lv, a: (lv.admin.set_latency(**a), lv.admin.clear_faults()),
        {"endpoint": 1, "seconds": 0.1},
        {"endpoint": "int", "seconds": "duration", "rpc": "str"},
    ),
    method("EmbeddedBroker.clear_faults", {}, {"endpoint": "int"}, examples=20),
    method(
        "EmbeddedBroker.calls",
        {"endpoint": 0, "rpc": "SendMessage"},
        {"endpoint": "int", "rpc": "str"},
        examples=20,
    ),
    method(
        "EmbeddedBroker.messages",
        {"topic": "admin-t", "limit": 10},
        {"topic": "str", "limit": "int"},
        examples=20,
    ),
    method("EmbeddedBroker.clients", {}, {"endpoint": "int"}, examples=20),
    method("EmbeddedBroker.drop_telemetry", {"endpoint": 0}, {"endpoint": "int"}, examples=20),
    *send_cases(
        "Producer(jmq://)",
        lambda lv: lv.jmq_facade,
        examples=25,
        tx_name="Producer(jmq://).transaction.send",
    ),
    *send_cases("Producer(remoting://)", lambda lv: lv.remoting_facade, examples=25),
    Case(
        "Credentials",
        lambda lv, a: ferrymq.Credentials(**a),
        {"access_key": "ak", "secret_key": "sk", "security_token": None},
        {"access_key": "str", "secret_key": "str", "security_token": "str"},
    ),
    Case(
        "TlsConfig",
        lambda lv, a: ferrymq.TlsConfig(**a),
        {},
        {"ca_file": "str", "insecure": "bool", "server_name": "str"},
    ),
    Case(
        "FilterExpression.tag",
        lambda lv, a: ferrymq.FilterExpression.tag(**a),
        {"expression": "a||b"},
        {"expression": "str"},
    ),
    Case(
        "FilterExpression.sql",
        lambda lv, a: ferrymq.FilterExpression.sql(**a),
        {"expression": "a > 1"},
        {"expression": "str"},
    ),
    Case("AsyncPublisher.close", _close_publisher, {}, {"timeout": "wait"}, examples=20),
    Case("PushConsumer.close", _close_push, {}, {"timeout": "wait"}, examples=15),
    method(
        "SimpleConsumer.unsubscribe", {"topic": "not-subscribed"}, {"topic": "str"}, examples=25
    ),
    method("PullConsumer.position", lambda lv: {"queue": lv.queue}, {"queue": "any"}, examples=25),
    method(
        "PullConsumer.end_offsets",
        lambda lv: {"queues": [lv.queue]},
        {"queues": "list"},
        examples=25,
    ),
    method(
        "PullConsumer.committed", lambda lv: {"queues": [lv.queue]}, {"queues": "list"}, examples=25
    ),
    method("JetStream.stream_info", lambda lv: {"name": lv.stream}, {"name": "str"}),
    method(
        "JetStream.delete_consumer",
        lambda lv: {"stream": lv.stream, "name": "nobody"},
        {"stream": "str", "name": "str"},
    ),
    method(
        "JmqServer.create_topic",
        {"name": "jt", "partitions": 2},
        {"name": "str", "partitions": "int", "broadcast": "bool"},
    ),
    method(
        "JmqServer.fail_next",
        {"code": 1, "times": 1},
        {"code": "int", "command": "any", "times": "int"},
    ),
    method(
        "JmqServer.set_latency",
        {"seconds_": 0},
        {"seconds_": "duration"},
        examples=25,
        aliases={"seconds_": ("seconds",)},
    ),
    method(
        "JmqServer.set_health",
        {"node": 0, "point": 1.0},
        {"node": "int", "point": "float"},
        examples=25,
    ),
    method(
        "JmqServer.set_leader",
        {"topic": "jt", "group": 0, "node": 0},
        {"topic": "str", "group": "int", "node": "int"},
        examples=25,
    ),
    method(
        "JmqServer.add_app",
        {"app": "a2", "token": "t2"},
        {"app": "str", "token": "str"},
        examples=25,
    ),
    method("EmbeddedBroker.delete_topic", {"name": "no-such-topic"}, {"name": "str"}, examples=25),
    method(
        "EmbeddedBroker.verify_message",
        {"client_id": "c", "topic": "admin-t", "message_id": "m"},
        {"client_id": "str", "topic": "str", "message_id": "str"},
        examples=25,
        # the default message id is not stored: refused naming it whatever the other values
        aliases={"client_id": ("message_id",), "topic": ("message_id",)},
    ),
    method(
        "EmbeddedBroker.recover_orphaned_transaction",
        {"transaction_id": "x", "client_id": None},
        {"transaction_id": "str", "client_id": "str"},
        examples=25,
        aliases={"client_id": ("transaction_id",)},  # the default transaction does not exist
    ),
    method("EmbeddedBroker.dead_letters", {"group": "g"}, {"group": "str"}, examples=20),
    method("EmbeddedBroker.restart", {"endpoint": 1}, {"endpoint": "int"}, examples=15),
]


def _strategy(live: Live, kind: Any) -> st.SearchStrategy[Any]:
    return KINDS[kind] if isinstance(kind, str) else kind(live)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_adversarial_arguments(live: Live, case: Case) -> None:
    params = sorted(case.kinds)

    @settings(
        max_examples=max(1, round(case.examples * SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        param = data.draw(st.sampled_from(params), label="param")
        value = data.draw(_strategy(live, case.kinds[param]), label=param)
        args = case.args(live)
        args[param] = value
        result = check(
            case.name, param, value, lambda: case.call(live, args), case.aliases.get(param, ())
        )
        if case.close_result and result is not None:
            closing(result)

    run()
