"""A raw RocketMQ 5 gRPC driver for conformance tests: `grpcio` plus the generated
``apache.rocketmq.v2`` stubs shipped in the official ``rocketmq-python-client`` package
(``rocketmq.grpc_protocol``). No client logic at all: every request is built by hand, every answer
is returned as the server sent it, so tests can pin what a server says and compare two servers
(the embedded broker and a real Apache RocketMQ proxy) request for request.
"""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

Code = pb.Code
_ids = itertools.count()


def code_name(code: int) -> str:
    """The name of a status code (``"OK"``, ``"TOPIC_NOT_FOUND"``, …)."""
    try:
        return str(pb.Code.Name(code))
    except ValueError:
        return str(code)


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def seconds(d: duration_pb2.Duration) -> float:
    return float(d.ToNanoseconds()) / 1e9


def message_id() -> str:
    """A message id in the client format (34 hex characters, version byte 01)."""
    return ("01" + uuid.uuid4().hex + uuid.uuid4().hex)[:34].upper()


def endpoints_of(target: str) -> pb.Endpoints:
    host, _, port = target.rpartition(":")
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])


def message(
    topic: str,
    body: bytes = b"body",
    *,
    kind: int = pb.NORMAL,
    tag: str | None = None,
    keys: Sequence[str] = (),
    group: str | None = None,
    delivery_at_ms: int | None = None,
    properties: dict[str, str] | None = None,
    msg_id: str | None = None,
) -> pb.Message:
    """A wire message as a producer would send it."""
    sp = pb.SystemProperties(
        message_id=msg_id or message_id(),
        message_type=kind,
        body_encoding=pb.IDENTITY,
        born_host=socket.gethostname(),
        keys=list(keys),
    )
    sp.born_timestamp.CopyFrom(timestamp_pb2.Timestamp(seconds=int(time.time())))
    if tag is not None:
        sp.tag = tag
    if group is not None:
        sp.message_group = group
    if delivery_at_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(delivery_at_ms)
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=sp,
        user_properties=properties or {},
    )


def until_none(requests: queue.Queue[Any]) -> Iterator[Any]:
    """The items put on ``requests`` until ``None``: a request stream fed from a queue."""
    while True:
        item = requests.get()
        if item is None:
            return
        yield item


class Telemetry:
    """An open Telemetry stream. The stream stays open until :meth:`close` (the real proxy ends
    a half-closed stream without answering the settings). A thread puts every reply on
    ``replies``, then the error that ended the stream if any, then ``None``."""

    def __init__(
        self, call: Any, requests: queue.Queue[Any], replies: queue.Queue[Any] | None = None
    ) -> None:
        self._call = call
        self._requests = requests
        self._replies: queue.Queue[Any] = queue.Queue() if replies is None else replies
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for reply in self._call:
                self._replies.put(reply)
        except grpc.RpcError as exc:
            self._replies.put(exc)
        self._replies.put(None)

    def send(self, command: spb.TelemetryCommand) -> None:
        self._requests.put(command)

    def next(self, timeout: float = 10.0) -> spb.TelemetryCommand | None:
        """The next command from the server, ``None`` when the stream ended."""
        reply = self._replies.get(timeout=timeout)
        if isinstance(reply, grpc.RpcError):
            raise reply
        return reply  # type: ignore[no-any-return]

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class Wire:
    """One client identity on one gRPC channel."""

    def __init__(self, target: str, *, client_id: str | None = None) -> None:
        self.target = target
        self.client_id = client_id or (
            f"{socket.gethostname()}@{os.getpid()}@{next(_ids)}@{uuid.uuid4().hex[:10]}"
        )
        #: Sent as ``x-mq-client-version`` (servers branch on it, e.g. for ILLEGAL_POLLING_TIME).
        self.client_version = "5.0.0"
        self.channel = grpc.insecure_channel(target)
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self._telemetry: list[Telemetry] = []

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for t in self._telemetry:
            t.close()
        self.channel.close()

    def metadata(self, *, client_id: bool = True) -> list[tuple[str, str]]:
        md = [
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", self.client_version),
            ("x-mq-request-id", str(uuid.uuid4())),
            ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())),
        ]
        if client_id:
            md.append(("x-mq-client-id", self.client_id))
        return md

    # -- unary calls ---------------------------------------------------------------------

    def query_route(self, topic: str, *, client_id: bool = True) -> spb.QueryRouteResponse:
        req = spb.QueryRouteRequest(
            topic=pb.Resource(name=topic), endpoints=endpoints_of(self.target)
        )
        return self.stub.QueryRoute(req, metadata=self.metadata(client_id=client_id), timeout=10)

    def heartbeat(self, group: str | None, client_type: int) -> spb.HeartbeatResponse:
        req = spb.HeartbeatRequest(client_type=client_type)
        if group:
            req.group.name = group
        return self.stub.Heartbeat(req, metadata=self.metadata(), timeout=10)

    def send(self, *messages: pb.Message, timeout: float = 10) -> spb.SendMessageResponse:
        req = spb.SendMessageRequest(messages=list(messages))
        return self.stub.SendMessage(req, metadata=self.metadata(), timeout=timeout)

    def query_assignment(self, topic: str, group: str) -> spb.QueryAssignmentResponse:
        req = spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic),
            group=pb.Resource(name=group),
            endpoints=endpoints_of(self.target),
        )
        return self.stub.QueryAssignment(req, metadata=self.metadata(), timeout=10)

    def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible: float | None = 30.0,
        long_polling: float | None = 5.0,
        timeout: float = 30.0,
        auto_renew: bool = False,
        tag: str = "*",
        queue_id: int = -1,
    ) -> list[spb.ReceiveMessageResponse]:
        """One ReceiveMessage call; every element of the response stream, in order."""
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic),
                id=queue_id,
                permission=pb.READ_WRITE,
                broker=pb.Broker(name="", endpoints=endpoints_of(self.target)),
            ),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag),
            batch_size=batch,
            auto_renew=auto_renew,
        )
        if invisible is not None:
            req.invisible_duration.CopyFrom(duration(invisible))
        if long_polling is not None:
            req.long_polling_timeout.CopyFrom(duration(long_polling))
        return list(self.stub.ReceiveMessage(req, metadata=self.metadata(), timeout=timeout))

    def receive_messages(
        self, group: str, topic: str, want: int, *, rounds: int = 10, **kwargs: Any
    ) -> list[pb.Message]:
        """Receive until ``want`` messages arrived or ``rounds`` calls returned nothing new."""
        got: list[pb.Message] = []
        for _ in range(rounds):
            for r in self.receive(group, topic, **kwargs):
                if r.WhichOneof("content") == "message":
                    got.append(r.message)
            if len(got) >= want:
                break
        return got

    def ack(self, group: str, topic: str, *messages: pb.Message) -> spb.AckMessageResponse:
        req = spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[
                spb.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle,
                )
                for m in messages
            ],
        )
        return self.stub.AckMessage(req, metadata=self.metadata(), timeout=10)

    def change_invisible(
        self, group: str, topic: str, msg: pb.Message, invisible: float
    ) -> spb.ChangeInvisibleDurationResponse:
        req = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=msg.system_properties.receipt_handle,
            invisible_duration=duration(invisible),
            message_id=msg.system_properties.message_id,
        )
        return self.stub.ChangeInvisibleDuration(req, metadata=self.metadata(), timeout=10)

    # -- telemetry -----------------------------------------------------------------------

    def telemetry(self) -> Telemetry:
        requests: queue.Queue[Any] = queue.Queue()
        call = self.stub.Telemetry(until_none(requests), metadata=self.metadata())
        t = Telemetry(call, requests)
        self._telemetry.append(t)
        return t

    def settings(self, settings: pb.Settings) -> tuple[Telemetry, spb.TelemetryCommand | None]:
        """Open Telemetry, send ``settings``; returns the stream (left open) and the first reply."""
        t = self.telemetry()
        t.send(spb.TelemetryCommand(settings=settings))
        return t, t.next(timeout=15)

    def user_agent(self) -> pb.UA:
        return pb.UA(
            language=pb.PYTHON, version="5.0.0", platform="linux", hostname=socket.gethostname()
        )

    def producer_settings(self, *topics: str) -> pb.Settings:
        return pb.Settings(
            client_type=pb.PRODUCER,
            access_point=endpoints_of(self.target),
            request_timeout=duration(3),
            publishing=pb.Publishing(
                topics=[pb.Resource(name=t) for t in topics], validate_message_type=True
            ),
            user_agent=self.user_agent(),
        )

    def consumer_settings(
        self,
        group: str,
        *topics: str,
        client_type: int = pb.SIMPLE_CONSUMER,
        long_polling: float = 10.0,
    ) -> pb.Settings:
        return pb.Settings(
            client_type=client_type,
            access_point=endpoints_of(self.target),
            request_timeout=duration(3),
            subscription=pb.Subscription(
                group=pb.Resource(name=group),
                subscriptions=[
                    pb.SubscriptionEntry(
                        topic=pb.Resource(name=t),
                        expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    )
                    for t in topics
                ],
                long_polling_timeout=duration(long_polling),
            ),
            user_agent=self.user_agent(),
        )
