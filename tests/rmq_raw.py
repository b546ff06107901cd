"""A raw RocketMQ v2 protocol driver for tests: grpcio + the generated stubs shipped by the
official ``rocketmq-python-client`` (``rocketmq.grpc_protocol``). No client logic: every call is
one RPC, so tests can check exact server answers."""

from __future__ import annotations

import hmac
import queue
import time
import uuid
from collections.abc import Sequence
from hashlib import sha1
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rmq_wire import Telemetry, until_none
from rmq_wire import duration as dur

OK = 20000


def res(name: str) -> d.Resource:
    return d.Resource(name=name)


def message(
    topic: str,
    body: bytes = b"x",
    *,
    tag: str | None = None,
    keys: Sequence[str] = (),
    group: str | None = None,
    delivery: float | None = None,
    transaction: bool = False,
    queue_id: int = 0,
    properties: dict[str, str] | None = None,
    message_id: str | None = None,
) -> d.Message:
    m = d.Message(topic=res(topic), body=body)
    sp = m.system_properties
    sp.message_id = message_id if message_id is not None else uuid.uuid4().hex.upper()
    sp.queue_id = queue_id
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(keys)
    if group is not None:
        sp.message_group = group
    if delivery is not None:
        ts = timestamp_pb2.Timestamp()
        ts.FromNanoseconds(int(delivery * 1e9))
        sp.delivery_timestamp.CopyFrom(ts)
    if transaction:
        sp.message_type = d.TRANSACTION
    if properties:
        m.user_properties.update(properties)
    return m


class Raw:
    """One client id on one endpoint."""

    def __init__(
        self,
        address: str,
        client_id: str | None = "raw-client",
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.access_key = access_key
        self.secret_key = secret_key
        # A connection of its own: grpcio otherwise shares connections between channels to the
        # same address, and a new client after a fault could inherit a connection the fault cut.
        self.channel = grpc.insecure_channel(
            address, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = MessagingServiceStub(self.channel)
        self._telemetry_out: queue.Queue[s.TelemetryCommand | None] | None = None
        #: Telemetry replies, then the error that ended the stream if any, then ``None``.
        self.telemetry_in: queue.Queue[Any] = queue.Queue()

    def close(self) -> None:
        if self._telemetry_out is not None:
            self._telemetry_out.put(None)
        self.channel.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def md(self) -> list[tuple[str, str]]:
        out = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2")]
        if self.client_id is not None:
            out.append(("x-mq-client-id", self.client_id))
        if self.access_key is not None and self.secret_key is not None:
            date = time.strftime("%Y%m%dT%H%M%SZ")
            sig = hmac.new(self.secret_key.encode(), date.encode(), sha1).hexdigest()
            out.append(("x-mq-date-time", date))
            out.append(
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential={self.access_key}, "
                    f"SignedHeaders=x-mq-date-time, Signature={sig}",
                )
            )
        return out

    # -- telemetry ---------------------------------------------------------------------

    def telemetry(self, settings: d.Settings) -> Any:
        """Open Telemetry, send ``settings``; returns the first answer (status + echo)."""
        out: queue.Queue[s.TelemetryCommand | None] = queue.Queue()
        self._telemetry_out = out
        out.put(s.TelemetryCommand(settings=settings))
        call = self.stub.Telemetry(until_none(out), metadata=self.md())
        Telemetry(call, out, self.telemetry_in)  # its thread feeds telemetry_in
        return self.telemetry_in.get(timeout=10)

    def send_telemetry(self, cmd: s.TelemetryCommand) -> None:
        assert self._telemetry_out is not None
        self._telemetry_out.put(cmd)

    def producer(self, *topics: str) -> Any:
        return self.telemetry(
            d.Settings(
                client_type=d.PRODUCER,
                publishing=d.Publishing(topics=[res(t) for t in topics]),
                request_timeout=dur(3),
            )
        )

    def consumer(self, group: str, client_type: int = d.SIMPLE_CONSUMER) -> Any:
        return self.telemetry(
            d.Settings(
                client_type=client_type,
                subscription=d.Subscription(group=res(group)),
                request_timeout=dur(3),
            )
        )

    # -- unary RPCs --------------------------------------------------------------------

    def route(self, topic: str, timeout: float | None = None) -> Any:
        req = s.QueryRouteRequest(topic=res(topic))
        return self.stub.QueryRoute(req, metadata=self.md(), timeout=timeout)

    def heartbeat(self, group: str | None = None, client_type: int = d.SIMPLE_CONSUMER) -> Any:
        req = s.HeartbeatRequest(client_type=client_type)
        if group is not None:
            req.group.CopyFrom(res(group))
        return self.stub.Heartbeat(req, metadata=self.md())

    def send(self, *messages: d.Message) -> Any:
        return self.stub.SendMessage(s.SendMessageRequest(messages=messages), metadata=self.md())

    def assignment(self, topic: str, group: str) -> Any:
        return self.stub.QueryAssignment(
            s.QueryAssignmentRequest(topic=res(topic), group=res(group)), metadata=self.md()
        )

    def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible: float | None = 30,
        polling: float | None = 1,
        auto_renew: bool = False,
        broker: str | None = None,
        timeout: float = 10,
        filter_expression: d.FilterExpression | None = None,
    ) -> tuple[Any, list[Any]]:
        mq = d.MessageQueue(topic=res(topic), id=-1)
        if broker is not None:
            mq.broker.name = broker
        req = s.ReceiveMessageRequest(
            group=res(group), message_queue=mq, batch_size=batch, auto_renew=auto_renew
        )
        if invisible is not None:
            req.invisible_duration.CopyFrom(dur(invisible))
        if polling is not None:
            req.long_polling_timeout.CopyFrom(dur(polling))
        if filter_expression is not None:
            req.filter_expression.CopyFrom(filter_expression)
        status = None
        msgs = []
        for r in self.stub.ReceiveMessage(req, metadata=self.md(), timeout=timeout):
            if r.HasField("status"):
                assert status is None, "exactly one status per receive"
                status = r.status
            elif r.HasField("message"):
                msgs.append(r.message)
        return status, msgs

    def ack(self, group: str, topic: str, *msgs: Any, handles: Sequence[str] = ()) -> Any:
        entries = [
            s.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in msgs
        ]
        entries += [s.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles]
        return self.stub.AckMessage(
            s.AckMessageRequest(group=res(group), topic=res(topic), entries=entries),
            metadata=self.md(),
        )

    def change_invisible(self, group: str, topic: str, handle: str, seconds: float) -> Any:
        return self.stub.ChangeInvisibleDuration(
            s.ChangeInvisibleDurationRequest(
                group=res(group),
                topic=res(topic),
                receipt_handle=handle,
                invisible_duration=dur(seconds),
                message_id="x",
            ),
            metadata=self.md(),
        )

    def forward_dlq(self, group: str, topic: str, m: Any) -> Any:
        return self.stub.ForwardMessageToDeadLetterQueue(
            s.ForwardMessageToDeadLetterQueueRequest(
                group=res(group),
                topic=res(topic),
                receipt_handle=m.system_properties.receipt_handle,
                message_id=m.system_properties.message_id,
                delivery_attempt=m.system_properties.delivery_attempt,
                max_delivery_attempts=16,
            ),
            metadata=self.md(),
        )

    def end_transaction(
        self,
        topic: str,
        message_id: str,
        transaction_id: str,
        resolution: int,
        source: int = d.SOURCE_CLIENT,
    ) -> Any:
        return self.stub.EndTransaction(
            s.EndTransactionRequest(
                topic=res(topic),
                message_id=message_id,
                transaction_id=transaction_id,
                resolution=resolution,
                source=source,
            ),
            metadata=self.md(),
        )

    def recall(self, topic: str, handle: str) -> Any:
        return self.stub.RecallMessage(
            s.RecallMessageRequest(topic=res(topic), recall_handle=handle), metadata=self.md()
        )

    def terminate(self, group: str | None = None) -> Any:
        req = s.NotifyClientTerminationRequest()
        if group is not None:
            req.group.CopyFrom(res(group))
        return self.stub.NotifyClientTermination(req, metadata=self.md())

    # -- pull and offsets --------------------------------------------------------------

    @staticmethod
    def queue(topic: str, queue_id: int, broker: str = "broker-0") -> d.MessageQueue:
        return d.MessageQueue(topic=res(topic), id=queue_id, broker=d.Broker(name=broker))

    def pull(
        self,
        group: str,
        mq: d.MessageQueue,
        offset: int,
        *,
        batch: int = 32,
        polling: float = 0,
        filter_expression: d.FilterExpression | None = None,
    ) -> tuple[Any, list[Any], int | None]:
        req = s.PullMessageRequest(
            group=res(group),
            message_queue=mq,
            offset=offset,
            batch_size=batch,
            long_polling_timeout=dur(polling),
        )
        if filter_expression is not None:
            req.filter_expression.CopyFrom(filter_expression)
        status, msgs, nxt = None, [], None
        for r in self.stub.PullMessage(req, metadata=self.md(), timeout=10):
            if r.HasField("status"):
                status = r.status
            elif r.HasField("message"):
                msgs.append(r.message)
            elif r.HasField("next_offset"):
                nxt = r.next_offset
        return status, msgs, nxt

    def query_offset(self, mq: d.MessageQueue, policy: int, timestamp: float | None = None) -> Any:
        req = s.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy)
        if timestamp is not None:
            req.timestamp.FromNanoseconds(int(timestamp * 1e9))
        return self.stub.QueryOffset(req, metadata=self.md())

    def get_offset(self, group: str, mq: d.MessageQueue) -> Any:
        return self.stub.GetOffset(
            s.GetOffsetRequest(group=res(group), message_queue=mq), metadata=self.md()
        )

    def update_offset(self, group: str, mq: d.MessageQueue, offset: int) -> Any:
        return self.stub.UpdateOffset(
            s.UpdateOffsetRequest(group=res(group), message_queue=mq, offset=offset),
            metadata=self.md(),
        )
