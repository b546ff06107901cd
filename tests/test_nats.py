"""The NATS JetStream client (stream and consumer admin) against a real nats-server (2.9,
Debian's package). Publishing (``AsyncPublisher`` over ``Producer("nats://")``) is tested in
test_publisher_nats.py."""

from __future__ import annotations

import uuid

import pytest

import ferrymq
from _nats_server import NatsServer, free_port

pytestmark = pytest.mark.nats


def test_server_is_2_9_with_jetstream(js: ferrymq.JetStream) -> None:
    assert js.server_version.startswith("2.9"), js.server_version
    assert "nats://127.0.0.1" in js.endpoints


def test_endpoints_must_be_nats_urls() -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match="endpoints") as e:
        ferrymq.JetStream("127.0.0.1:4222")
    assert isinstance(e.value, ValueError)
    with pytest.raises(ferrymq.InvalidArgumentError, match="endpoints"):
        ferrymq.JetStream("http://127.0.0.1:4222")


def test_credentials_never_appear_in_errors_or_repr(nats_server: NatsServer) -> None:
    url = f"nats://someone:hunter2@127.0.0.1:{nats_server.port}"
    with ferrymq.JetStream(url) as js:
        assert "hunter2" not in repr(js)
        assert "hunter2" not in js.endpoints


def test_unreachable_server_is_a_connection_error_at_start() -> None:
    port = free_port()
    js = ferrymq.JetStream(f"nats://127.0.0.1:{port}", connect_timeout=1.0)  # no connection yet
    with pytest.raises(ferrymq.FerryConnectionError) as e:
        js.start()
    assert e.value.retriable


def test_lifecycle_start_returns_the_client_and_close_ends_it(nats_server: NatsServer) -> None:
    js = ferrymq.JetStream(nats_server.url)
    assert js.start() is js
    assert js.start() is js  # idempotent: one connection
    assert js.server_version.startswith("2.")
    js.close()
    js.close()
    with pytest.raises(ferrymq.ClientClosedError):
        js.stream_info("ANY")
    with pytest.raises(ferrymq.ClientClosedError):
        js.start()
    never = ferrymq.JetStream(f"nats://127.0.0.1:{free_port()}")
    never.close()  # nothing to close, no connection attempted
    with pytest.raises(ferrymq.ClientClosedError):
        never.start()


def test_first_call_connects_without_start(nats_server: NatsServer) -> None:
    js = ferrymq.JetStream(nats_server.url)
    try:
        assert js.delete_stream(f"NONE{uuid.uuid4().hex[:8].upper()}") is False
    finally:
        js.close()


async def test_async_start_and_context_manager(nats_server: NatsServer) -> None:
    js = ferrymq.JetStream(nats_server.url)
    assert await js.start_async() is js
    await js.close_async()
    async with ferrymq.JetStream(nats_server.url) as js2:
        assert js2.server_version.startswith("2.")


def test_bad_stream_settings_name_the_field(js: ferrymq.JetStream) -> None:
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^name"):
        js.create_stream("bad.name", ["x.y"])
    with pytest.raises(ferrymq.InvalidArgumentError, match=r"^storage"):
        js.create_stream("OK", ["x.y"], storage="tape")


def test_stream_management(js: ferrymq.JetStream, tok: str) -> None:
    name = f"M{tok}"
    info = js.create_stream(name, f"m{tok}.*", storage="memory", duplicate_window=30.0)
    assert (info.name, info.subjects, info.messages) == (name, [f"m{tok}.*"], 0)
    assert info.duplicate_window == 30.0
    # Creating it again with the same settings is fine.
    assert js.create_stream(name, f"m{tok}.*", storage="memory", duplicate_window=30.0).name == name
    with pytest.raises(ferrymq.BrokerError) as e:
        js.create_stream(f"O{tok}", f"m{tok}.*")
    assert e.value.code == 10065  # subjects overlap
    assert js.delete_stream(name) is True
    assert js.delete_stream(name) is False
    with pytest.raises(ferrymq.BrokerError) as e:
        js.stream_info(name)
    assert e.value.code == 10059
