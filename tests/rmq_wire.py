"""The raw RocketMQ 5 gRPC driver of the tests: `grpcio` plus the generated ``apache.rocketmq.v2``
stubs shipped in the official ``rocketmq-python-client`` package (``rocketmq.grpc_protocol``).
No client logic at all: every call is one RPC built by hand, every answer is returned as the
server sent it, so tests can pin what a server says and compare two servers (the embedded broker
and a real Apache RocketMQ proxy) request for request.
"""

from __future__ import annotations

import hmac
import itertools
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from hashlib import sha1
from typing import Any

import grpc
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

Code = pb.Code
OK = pb.Code.OK
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


def res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


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
    kind: int | None = None,
    tag: str | None = None,
    keys: Sequence[str] = (),
    group: str | None = None,
    delivery: float | None = None,
    queue_id: int = 0,
    properties: dict[str, str] | None = None,
    msg_id: str | None = None,
) -> pb.Message:
    """A wire message as a producer would send it. ``kind`` defaults to what the properties say
    (FIFO with a ``group``, DELAY with a ``delivery`` time in epoch seconds, else NORMAL)."""
    if kind is None:
        kind = pb.FIFO if group is not None else pb.DELAY if delivery is not None else pb.NORMAL
    sp = pb.SystemProperties(
        message_id=message_id() if msg_id is None else msg_id,
        message_type=kind,
        body_encoding=pb.IDENTITY,
        born_host=socket.gethostname(),
        keys=list(keys),
        queue_id=queue_id,
    )
    sp.born_timestamp.FromSeconds(int(time.time()))
    if tag is not None:
        sp.tag = tag
    if group is not None:
        sp.message_group = group
    if delivery is not None:
        sp.delivery_timestamp.FromNanoseconds(int(delivery * 1e9))
    return pb.Message(
        topic=res(topic), body=body, system_properties=sp, user_properties=properties or {}
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
    a half-closed stream without answering the settings). A thread puts every reply on a queue,
    then the error that ended the stream if any, then ``None``."""

    def __init__(self, call: Any, requests: queue.Queue[Any]) -> None:
        self._call = call
        self._requests = requests
        self._replies: queue.Queue[Any] = queue.Queue()
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
        """The next command from the server, ``None`` when the stream ended; raises the error
        that ended the stream."""
        reply = self._replies.get(timeout=timeout)
        if isinstance(reply, grpc.RpcError):
            raise reply
        return reply  # type: ignore[no-any-return]

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class Wire:
    """One client identity on one gRPC connection of its own. ``client_id`` and
    ``client_version`` are sent with every call unless set to ``None``; with ``access_key`` and
    ``secret_key`` every call is signed."""

    def __init__(
        self,
        target: str,
        client_id: str | None = None,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.target = target
        self.client_id: str | None = client_id or (
            f"{socket.gethostname()}@{os.getpid()}@{next(_ids)}@{uuid.uuid4().hex[:10]}"
        )
        #: Sent as ``x-mq-client-version`` (servers branch on it, e.g. for ILLEGAL_POLLING_TIME).
        self.client_version: str | None = "5.0.0"
        self.access_key = access_key
        self.secret_key = secret_key
        # A connection of its own: grpcio otherwise shares connections between channels to the
        # same address, and a new client after a fault could inherit a connection the fault cut.
        self.channel = grpc.insecure_channel(
            target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
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

    def metadata(self) -> list[tuple[str, str]]:
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        md = [
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-request-id", str(uuid.uuid4())),
            ("x-mq-date-time", date),
        ]
        if self.client_version is not None:
            md.append(("x-mq-client-version", self.client_version))
        if self.client_id is not None:
            md.append(("x-mq-client-id", self.client_id))
        if self.access_key is not None and self.secret_key is not None:
            sig = hmac.new(self.secret_key.encode(), date.encode(), sha1).hexdigest()
            md.append(
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential={self.access_key}, "
                    f"SignedHeaders=x-mq-date-time, Signature={sig}",
                )
            )
        return md

    # -- telemetry -----------------------------------------------------------------------

    @property
    def stream(self) -> Telemetry:
        """The Telemetry stream opened last."""
        return self._telemetry[-1]

    def telemetry(self) -> Telemetry:
        requests: queue.Queue[Any] = queue.Queue()
        call = self.stub.Telemetry(until_none(requests), metadata=self.metadata())
        t = Telemetry(call, requests)
        self._telemetry.append(t)
        return t

    def settings(self, settings: pb.Settings) -> spb.TelemetryCommand | None:
        """Open Telemetry (left open, :attr:`stream`), send ``settings``; the first reply."""
        t = self.telemetry()
        t.send(spb.TelemetryCommand(settings=settings))
        return t.next(timeout=15)

    def producer(self, *topics: str) -> spb.TelemetryCommand | None:
        """Sends producer settings for ``topics``; the first reply."""
        return self.settings(
            pb.Settings(
                client_type=pb.PRODUCER,
                access_point=endpoints_of(self.target),
                request_timeout=duration(3),
                publishing=pb.Publishing(
                    topics=[res(t) for t in topics], validate_message_type=True
                ),
                user_agent=self.user_agent(),
            )
        )

    def consumer(
        self,
        group: str,
        *topics: str,
        client_type: int = pb.SIMPLE_CONSUMER,
        long_polling: float = 10.0,
    ) -> spb.TelemetryCommand | None:
        """Sends consumer settings for ``group`` subscribed to ``topics``; the first reply."""
        return self.settings(
            pb.Settings(
                client_type=client_type,
                access_point=endpoints_of(self.target),
                request_timeout=duration(3),
                subscription=pb.Subscription(
                    group=res(group),
                    subscriptions=[
                        pb.SubscriptionEntry(
                            topic=res(t),
                            expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                        )
                        for t in topics
                    ],
                    long_polling_timeout=duration(long_polling),
                ),
                user_agent=self.user_agent(),
            )
        )

    def user_agent(self) -> pb.UA:
        return pb.UA(
            language=pb.PYTHON, version="5.0.0", platform="linux", hostname=socket.gethostname()
        )

    # -- unary calls ---------------------------------------------------------------------

    def query_route(self, topic: str, *, timeout: float | None = 10) -> spb.QueryRouteResponse:
        req = spb.QueryRouteRequest(topic=res(topic), endpoints=endpoints_of(self.target))
        return self.stub.QueryRoute(req, metadata=self.metadata(), timeout=timeout)

    def heartbeat(
        self, group: str | None = None, client_type: int = pb.SIMPLE_CONSUMER
    ) -> spb.HeartbeatResponse:
        req = spb.HeartbeatRequest(client_type=client_type)
        if group is not None:
            req.group.name = group
        return self.stub.Heartbeat(req, metadata=self.metadata(), timeout=10)

    def send(self, *messages: pb.Message, timeout: float = 10) -> spb.SendMessageResponse:
        req = spb.SendMessageRequest(messages=list(messages))
        return self.stub.SendMessage(req, metadata=self.metadata(), timeout=timeout)

    def query_assignment(self, topic: str, group: str) -> spb.QueryAssignmentResponse:
        req = spb.QueryAssignmentRequest(
            topic=res(topic), group=res(group), endpoints=endpoints_of(self.target)
        )
        return self.stub.QueryAssignment(req, metadata=self.metadata(), timeout=10)

    def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible: float | None = 30.0,
        long_polling: float | None = 1.0,
        timeout: float = 30.0,
        auto_renew: bool = False,
        filter_expression: pb.FilterExpression | None = None,
        broker: str = "",
        queue_id: int = -1,
    ) -> list[spb.ReceiveMessageResponse]:
        """One ReceiveMessage call; every element of the response stream, in order. The filter
        defaults to every tag."""
        req = spb.ReceiveMessageRequest(
            group=res(group),
            message_queue=pb.MessageQueue(
                topic=res(topic),
                id=queue_id,
                permission=pb.READ_WRITE,
                broker=pb.Broker(name=broker, endpoints=endpoints_of(self.target)),
            ),
            filter_expression=filter_expression or pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=batch,
            auto_renew=auto_renew,
        )
        if invisible is not None:
            req.invisible_duration.CopyFrom(duration(invisible))
        if long_polling is not None:
            req.long_polling_timeout.CopyFrom(duration(long_polling))
        return list(self.stub.ReceiveMessage(req, metadata=self.metadata(), timeout=timeout))

    def receive_once(
        self, group: str, topic: str, **kwargs: Any
    ) -> tuple[pb.Status | None, list[pb.Message]]:
        """One ReceiveMessage call (arguments of :meth:`receive`): its one status and messages."""
        status, got = None, []
        for r in self.receive(group, topic, **kwargs):
            if r.HasField("status"):
                assert status is None, "exactly one status per receive"
                status = r.status
            elif r.HasField("message"):
                got.append(r.message)
        return status, got

    def receive_messages(
        self, group: str, topic: str, want: int, *, rounds: int = 10, **kwargs: Any
    ) -> list[pb.Message]:
        """Receive until ``want`` messages arrived or ``rounds`` calls returned nothing new."""
        got: list[pb.Message] = []
        for _ in range(rounds):
            got += self.receive_once(group, topic, **kwargs)[1]
            if len(got) >= want:
                break
        return got

    def ack(
        self, group: str, topic: str, *messages: pb.Message, handles: Sequence[str] = ()
    ) -> spb.AckMessageResponse:
        """Acknowledges ``messages``, then made-up entries with the receipt ``handles``."""
        entries = [
            spb.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in messages
        ]
        entries += [spb.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles]
        req = spb.AckMessageRequest(group=res(group), topic=res(topic), entries=entries)
        return self.stub.AckMessage(req, metadata=self.metadata(), timeout=10)

    def change_invisible(
        self, group: str, topic: str, msg: pb.Message | str, invisible: float
    ) -> spb.ChangeInvisibleDurationResponse:
        """For a received message, or a bare receipt handle (with a made-up message id)."""
        handle, mid = (
            (msg, "x")
            if isinstance(msg, str)
            else (msg.system_properties.receipt_handle, msg.system_properties.message_id)
        )
        req = spb.ChangeInvisibleDurationRequest(
            group=res(group),
            topic=res(topic),
            receipt_handle=handle,
            invisible_duration=duration(invisible),
            message_id=mid,
        )
        return self.stub.ChangeInvisibleDuration(req, metadata=self.metadata(), timeout=10)

    def forward_dlq(
        self, group: str, topic: str, m: pb.Message
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        sp = m.system_properties
        req = spb.ForwardMessageToDeadLetterQueueRequest(
            group=res(group),
            topic=res(topic),
            receipt_handle=sp.receipt_handle,
            message_id=sp.message_id,
            delivery_attempt=sp.delivery_attempt,
            max_delivery_attempts=16,
        )
        return self.stub.ForwardMessageToDeadLetterQueue(req, metadata=self.metadata(), timeout=10)

    def end_transaction(
        self,
        topic: str,
        msg_id: str,
        transaction_id: str,
        resolution: int,
        source: int = pb.SOURCE_CLIENT,
    ) -> spb.EndTransactionResponse:
        req = spb.EndTransactionRequest(
            topic=res(topic),
            message_id=msg_id,
            transaction_id=transaction_id,
            resolution=resolution,
            source=source,
        )
        return self.stub.EndTransaction(req, metadata=self.metadata(), timeout=10)

    def recall(self, topic: str, handle: str) -> spb.RecallMessageResponse:
        req = spb.RecallMessageRequest(topic=res(topic), recall_handle=handle)
        return self.stub.RecallMessage(req, metadata=self.metadata(), timeout=10)

    def terminate(self, group: str | None = None) -> spb.NotifyClientTerminationResponse:
        req = spb.NotifyClientTerminationRequest()
        if group is not None:
            req.group.CopyFrom(res(group))
        return self.stub.NotifyClientTermination(req, metadata=self.metadata(), timeout=10)

    # -- pull and offsets ----------------------------------------------------------------

    @staticmethod
    def queue(topic: str, queue_id: int, broker: str = "broker-0") -> pb.MessageQueue:
        return pb.MessageQueue(topic=res(topic), id=queue_id, broker=pb.Broker(name=broker))

    def pull(
        self,
        group: str,
        mq: pb.MessageQueue,
        offset: int,
        *,
        batch: int = 32,
        long_polling: float = 0,
        filter_expression: pb.FilterExpression | None = None,
    ) -> tuple[pb.Status | None, list[pb.Message], int | None]:
        """One PullMessage call: its status, messages and next offset."""
        req = spb.PullMessageRequest(
            group=res(group),
            message_queue=mq,
            offset=offset,
            batch_size=batch,
            long_polling_timeout=duration(long_polling),
        )
        if filter_expression is not None:
            req.filter_expression.CopyFrom(filter_expression)
        status, got, nxt = None, [], None
        for r in self.stub.PullMessage(req, metadata=self.metadata(), timeout=10):
            if r.HasField("status"):
                status = r.status
            elif r.HasField("message"):
                got.append(r.message)
            elif r.HasField("next_offset"):
                nxt = r.next_offset
        return status, got, nxt

    def query_offset(
        self, mq: pb.MessageQueue, policy: int, timestamp: float | None = None
    ) -> spb.QueryOffsetResponse:
        req = spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy)
        if timestamp is not None:
            req.timestamp.FromNanoseconds(int(timestamp * 1e9))
        return self.stub.QueryOffset(req, metadata=self.metadata(), timeout=10)

    def get_offset(self, group: str, mq: pb.MessageQueue) -> spb.GetOffsetResponse:
        req = spb.GetOffsetRequest(group=res(group), message_queue=mq)
        return self.stub.GetOffset(req, metadata=self.metadata(), timeout=10)

    def update_offset(
        self, group: str, mq: pb.MessageQueue, offset: int
    ) -> spb.UpdateOffsetResponse:
        req = spb.UpdateOffsetRequest(group=res(group), message_queue=mq, offset=offset)
        return self.stub.UpdateOffset(req, metadata=self.metadata(), timeout=10)
