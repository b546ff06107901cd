"""TLS and ACL 2.0 authentication on the real Apache RocketMQ 5.3 (``scripts/rocketmq-server
--secure``: TLS enforced on the proxy with a CA generated at start, ACL 2.0 authentication and
authorization on; see :class:`servers.SecureServer` for its users).

Every client verifies the generated CA (``tls=TlsConfig(ca_file=...)``) unless a test says
otherwise. A refused client must fail at once with the server's answer, never retry until a
timeout: the tests give it a request timeout far longer than the answer takes, so a retry loop
would surface as a timeout (or a pytest-timeout failure), not as the asserted ``BrokerError``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

import ferrymq
from ferrymq import BrokerError, Credentials, Message, MessageView, Producer, TlsConfig, _native
from servers import SecureServer
from waiting import wait_for

pytestmark = [pytest.mark.rocketmq_secure, pytest.mark.timeout(120)]

#: The code the real proxy answers for a refused identity and for a missing permission alike
#: (its ResponseBuilder maps both AuthenticationException and AuthorizationException to it).
REFUSED = "UNAUTHORIZED"


@pytest.fixture
def secure(rocketmq_secure_server: SecureServer) -> SecureServer:
    return rocketmq_secure_server


def tls_of(server: SecureServer) -> TlsConfig:
    return TlsConfig(ca_file=server.ca_file)


def test_produce_and_consume_over_tls_with_credentials(
    secure: SecureServer, unique: Callable[[str], str], closing: list[Any]
) -> None:
    topic, simple_group, push_group = unique("t"), unique("g"), unique("g")
    secure.setup({topic: "NORMAL"}, [simple_group, push_group])
    creds = secure.credentials("client")
    producer = Producer(
        secure.endpoints, topics=[topic], credentials=creds, tls=tls_of(secure)
    ).start()
    closing.append(producer)
    assert producer.settings["from_server"]
    sent = {producer.send(Message(topic, b"m-%d" % i, tag="x")).message_id for i in range(5)}

    simple = ferrymq.SimpleConsumer(
        secure.endpoints,
        simple_group,
        subscriptions={topic: "*"},
        await_duration=5,
        credentials=creds,
        tls=tls_of(secure),
    ).start()
    closing.append(simple)
    got: set[str] = set()
    deadline = time.monotonic() + 60
    while got != sent and time.monotonic() < deadline:
        for m in simple.receive(32, 15):
            simple.ack(m)
            got.add(m.message_id)
    assert got == sent

    pushed: set[str] = set()
    lock = threading.Lock()

    def listener(m: MessageView) -> None:
        with lock:
            pushed.add(m.message_id)

    push = ferrymq.PushConsumer(
        secure.endpoints,
        push_group,
        subscriptions={topic: "*"},
        listener=listener,
        credentials=Credentials(*creds),
        tls=tls_of(secure),
    )
    closing.append(push)
    push.start()
    wait_for("the push consumer to receive every message", lambda: pushed >= sent)
    assert pushed == sent


def _wrong_secret(secure: SecureServer) -> tuple[str, str] | None:
    access_key, secret_key = secure.credentials("client")
    return access_key, secret_key[::-1] + "x"


def _unknown_access_key(secure: SecureServer) -> tuple[str, str] | None:
    return "ferry-nobody", secure.credentials("client")[1]


def _no_credentials(secure: SecureServer) -> tuple[str, str] | None:
    return None


#: identity -> (credentials, what the proxy says).
REFUSED_IDENTITIES = {
    "wrong_secret": (_wrong_secret, "check signature failed"),
    "unknown_access_key": (_unknown_access_key, "User:ferry-nobody is not found"),
    "no_credentials": (_no_credentials, "username cannot be null"),
}


def _make_client(kind: str, secure: SecureServer, topic: str, group: str, creds: Any) -> Any:
    common: dict[str, Any] = {
        "credentials": creds,
        "tls": tls_of(secure),
        "request_timeout": 30,
    }
    if kind == "producer":
        return Producer(secure.endpoints, topics=[topic], **common)
    if kind == "simple":
        return ferrymq.SimpleConsumer(secure.endpoints, group, subscriptions={topic: "*"}, **common)
    return ferrymq.PushConsumer(
        secure.endpoints, group, subscriptions={topic: "*"}, listener=lambda m: None, **common
    )


@pytest.mark.parametrize("kind", ["producer", "simple", "push"])
@pytest.mark.parametrize("identity", sorted(REFUSED_IDENTITIES))
def test_a_refused_identity_fails_start_at_once(
    secure: SecureServer,
    closing: list[Any],
    kind: str,
    identity: str,
) -> None:
    # The script's default topic and group: the refusal comes before either is looked at.
    make_credentials, answer = REFUSED_IDENTITIES[identity]
    client = _make_client(kind, secure, "ferry-normal", "ferry-group", make_credentials(secure))
    closing.append(client)
    t0 = time.monotonic()
    with pytest.raises(BrokerError) as info:
        client.start()
    # Far below the 30 s request timeout: answered, not retried until a deadline.
    assert time.monotonic() - t0 < 15, "the refusal was retried"
    assert info.value.code_name == REFUSED, info.value
    assert answer in str(info.value)
    assert not info.value.retriable


def test_a_user_without_permission_on_a_topic_is_refused(
    secure: SecureServer, unique: Callable[[str], str], closing: list[Any]
) -> None:
    # ferry-limited may publish and subscribe to ferry-open-* only.
    allowed, denied = unique("ferry-open"), unique("ferry-closed")
    secure.setup({allowed: "NORMAL", denied: "NORMAL"})
    creds = secure.credentials("limited")
    producer = Producer(
        secure.endpoints, topics=[allowed], credentials=creds, tls=tls_of(secure)
    ).start()
    closing.append(producer)
    assert producer.send(Message(allowed, b"ok")).message_id

    t0 = time.monotonic()
    with pytest.raises(BrokerError) as info:
        producer.send(Message(denied, b"no"))
    assert time.monotonic() - t0 < 15, "the refusal was retried"
    assert info.value.code_name == REFUSED, info.value
    no_permission = f"User:ferry-limited has no permission to access Topic:{denied}"
    assert no_permission in str(info.value)

    # Clients that name the denied topic at start are refused there.
    for other in (
        Producer(secure.endpoints, topics=[denied], credentials=creds, tls=tls_of(secure)),
        ferrymq.SimpleConsumer(
            secure.endpoints,
            "ferry-group",
            subscriptions=denied,
            credentials=creds,
            tls=tls_of(secure),
        ),
    ):
        closing.append(other)
        with pytest.raises(BrokerError) as info:
            other.start()
        assert info.value.code_name == REFUSED, info.value
        assert no_permission in str(info.value)


def test_plaintext_to_the_tls_port_fails_clearly(secure: SecureServer) -> None:
    producer = Producer(
        secure.endpoints, credentials=secure.credentials("client"), request_timeout=5
    )
    with pytest.raises(ferrymq.FerryConnectionError) as info:
        producer.start()
    assert secure.endpoints in str(info.value), info.value
    producer.close()


def test_tls_with_the_system_roots_rejects_the_generated_ca(secure: SecureServer) -> None:
    producer = Producer(
        secure.endpoints, credentials=secure.credentials("client"), tls=True, request_timeout=5
    )
    with pytest.raises(ferrymq.FerryConnectionError) as info:
        producer.start()
    assert "certificate" in str(info.value).lower(), info.value
    producer.close()


# -- secrets stay out of logs, reprs and exception texts ----------------------------------------


def _signatures(secret: str, start: float, end: float) -> set[str]:
    """Every gRPC request signature a client could have made with ``secret`` in [start, end]:
    HMAC-SHA1 of the ``x-mq-date-time`` second, in hex (both cases)."""
    out: set[str] = set()
    for second in range(int(start) - 2, int(end) + 3):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        digest = hmac.new(secret.encode(), stamp.encode(), hashlib.sha1).hexdigest()
        out |= {digest, digest.upper()}
    return out


def _exception_texts(exc: BaseException) -> list[str]:
    return [
        str(exc),
        repr(exc),
        *map(str, exc.args),
        *getattr(exc, "__notes__", []),
        *traceback.format_exception(exc),
    ]


def _flush_rust_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Rust events reach Python logging through a channel, in order: once a marker logged
    now has arrived, every earlier event has too."""
    marker = f"flush-{time.monotonic_ns()}"
    _native.Probe().log("debug", marker)
    wait_for(
        "the Rust log forwarder", lambda: any(r.getMessage() == marker for r in caplog.records)
    )


def test_secrets_never_reach_logs_reprs_or_exceptions(
    secure: SecureServer,
    unique: Callable[[str], str],
    closing: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = unique("ferry-open"), unique("g")
    secure.setup({topic: "NORMAL"}, [group])
    access_key, secret = secure.credentials("limited")
    wrong_secret = secret[::-1] + "x"
    texts: list[str] = []
    t0 = time.time()
    with caplog.at_level(5, logger="ferrymq"):  # below DEBUG: every Rust event too
        ferrymq.sync_log_level()
        right = Credentials(access_key, secret)
        tls = tls_of(secure)
        texts += [repr(right), str(right), repr(tls), str(tls)]

        producer = Producer(secure.endpoints, topics=[topic], credentials=right, tls=tls)
        closing.append(producer)
        texts.append(repr(producer))
        producer.start()
        texts += [repr(producer), repr(producer.settings)]
        sent = producer.send(Message(topic, b"secret-test"))
        simple = ferrymq.SimpleConsumer(
            secure.endpoints,
            group,
            subscriptions={topic: "*"},
            await_duration=5,
            credentials=(access_key, secret),
            tls=tls,
        ).start()
        closing.append(simple)
        texts.append(repr(simple))
        got: list[MessageView] = []
        wait_for("the message", lambda: bool(got.extend(simple.receive(8, 15)) or got))
        assert [m.message_id for m in got] == [sent.message_id]
        simple.ack(got[0])
        texts += [repr(got[0])]
        push = ferrymq.PushConsumer(
            secure.endpoints,
            group,
            subscriptions={topic: "*"},
            listener=lambda m: None,
            credentials=right,
            tls=tls,
        )
        closing.append(push)
        push.start()
        texts.append(repr(push))

        # Refusals: a wrong secret at start, and a topic the user may not publish to.
        for make in (
            lambda: Producer(
                secure.endpoints, topics=[topic], credentials=(access_key, wrong_secret), tls=tls
            ),
            lambda: ferrymq.SimpleConsumer(
                secure.endpoints,
                group,
                subscriptions={topic: "*"},
                credentials=(access_key, wrong_secret),
                tls=tls,
            ),
        ):
            client = make()
            closing.append(client)
            texts.append(repr(client))
            with pytest.raises(BrokerError) as refused:
                client.start()
            texts += _exception_texts(refused.value)
        with pytest.raises(BrokerError) as forbidden:
            producer.send(Message(unique("ferry-closed"), b"no"))
        texts += _exception_texts(forbidden.value)
        # The remoting protocol signs every request with the same secret (see the remoting test
        # below for why it cannot reach this instance's broker).
        remoting = Producer(secure.remoting_endpoint, credentials=right, request_timeout=5)
        closing.append(remoting)
        texts.append(repr(remoting))
        with pytest.raises(ferrymq.FerryError) as remoting_failed:
            remoting.send(Message(topic, b"remoting"))
        texts += _exception_texts(remoting_failed.value)
        _flush_rust_logs(caplog)
    t1 = time.time()
    records = list(caplog.records)
    ferrymq.sync_log_level()
    for r in records:
        texts += [r.name, r.getMessage(), repr(r.args)]
        if r.exc_info and r.exc_info[1] is not None:
            texts += _exception_texts(r.exc_info[1])

    # The scan sees what it should: debug events of the clients, and the access key (which is
    # not secret) in the credentials' repr.
    assert any(r.levelno <= logging.DEBUG and r.name != "ferrymq.probe" for r in records)
    assert not any("were dropped" in r.getMessage() for r in records)
    haystack = "\n".join(texts)
    assert access_key in haystack
    for needle in (secret, wrong_secret):
        assert needle not in haystack
    for signature in _signatures(secret, t0, t1) | _signatures(wrong_secret, t0, t1):
        assert signature not in haystack


def test_plaintext_remoting_to_the_tls_broker_fails_clearly(
    secure: SecureServer, closing: list[Any]
) -> None:
    # The proxy JVM's TLS mode (tls.server.mode=enforcing) is process-wide, so the in-process
    # broker's remoting port enforces TLS too, and ferrymq's remoting client speaks plain TCP:
    # the route comes from the (permissive) name server, the send to the broker fails.
    producer = Producer(
        secure.remoting_endpoint, credentials=secure.credentials("client"), request_timeout=5
    )
    closing.append(producer)
    with pytest.raises(ferrymq.FerryConnectionError):
        producer.send(Message("ferry-normal", b"plain"))
