"""Readiness probe for scripts/rocketmq-server: a real gRPC QueryRoute against the proxy.

Usage: python grpc_probe.py HOST:PORT TOPIC [TOPIC ...] [--timeout SECONDS] [--quiet] [--ca FILE]

--ca FILE: TLS, verifying the server against that CA certificate (PEM). With
FERRYMQ_PROBE_ACCESS_KEY and FERRYMQ_PROBE_SECRET_KEY in the environment, each request is
signed (the `authorization` header of RocketMQ 5 gRPC: HMAC-SHA1 of `x-mq-date-time`).

Only needs `grpcio`: the request and the few response fields we look at are hand-encoded
protobuf (apache.rocketmq.v2, field numbers from service.proto / definition.proto), so no
generated stubs or protobuf runtime are required.

Exit status: 0 every topic answered Code.OK with at least one queue; 1 otherwise;
3 grpcio is not importable.
"""

import hashlib
import hmac
import os
import sys
import time
import uuid

try:
    import grpc
except ImportError:  # pragma: no cover - reported to the shell script
    sys.stderr.write("grpc_probe: grpcio is not installed\n")
    sys.exit(3)

CODE_OK = 20000
PERMISSIONS = {0: "UNSPECIFIED", 1: "NONE", 2: "READ", 3: "WRITE", 4: "READ_WRITE"}
MESSAGE_TYPES = {0: "UNSPECIFIED", 1: "NORMAL", 2: "FIFO", 3: "DELAY", 4: "TRANSACTION", 5: "LITE"}


def _varint(value):
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_bytes(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _field_varint(number, value):
    return _varint(number << 3) + _varint(value)


def _parse(buf):
    """Yield (field number, wire type, value) for one protobuf message level."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            size, pos = _read_varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _read_varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def query_route_request(topic, host, port):
    resource = _field_bytes(2, topic.encode())  # Resource.name = 2
    address = _field_bytes(1, host.encode()) + _field_varint(2, port)  # Address.host/port
    scheme = 1 if host.replace(".", "").isdigit() else 3  # IPv4 : DOMAIN_NAME
    endpoints = _field_varint(1, scheme) + _field_bytes(2, address)
    return _field_bytes(1, resource) + _field_bytes(2, endpoints)


def describe_route(payload):
    """Return (code, message, [(queue id, permission, broker address, accept types)])."""
    code, message, queues = None, "", []
    for number, _, value in _parse(payload):
        if number == 1:  # QueryRouteResponse.status
            for n, _, v in _parse(value):
                if n == 1:
                    code = v
                elif n == 2:
                    message = v.decode(errors="replace")
        elif number == 2:  # QueryRouteResponse.message_queues
            qid, perm, addr, types = 0, 0, "?", []
            for n, w, v in _parse(value):
                if n == 2:
                    qid = v
                elif n == 3:
                    perm = v
                elif n == 4:  # Broker {name=1, id=2, endpoints=3}
                    for bn, _, bv in _parse(v):
                        if bn == 3:
                            for en, _, ev in _parse(bv):
                                if en == 2:
                                    fields = {an: av for an, _, av in _parse(ev)}
                                    addr = "{}:{}".format(
                                        fields.get(1, b"").decode(), fields.get(2, 0)
                                    )
                elif n == 5:
                    if w == 2:  # packed
                        pos = 0
                        while pos < len(v):
                            t, pos = _read_varint(v, pos)
                            types.append(MESSAGE_TYPES.get(t, str(t)))
                    else:
                        types.append(MESSAGE_TYPES.get(v, str(v)))
            queues.append((qid, PERMISSIONS.get(perm, str(perm)), addr, types))
    return code, message, queues


def signed_metadata():
    """The authorization headers when credentials are in the environment, else none."""
    access_key = os.environ.get("FERRYMQ_PROBE_ACCESS_KEY")
    secret_key = os.environ.get("FERRYMQ_PROBE_SECRET_KEY")
    if not access_key or not secret_key:
        return ()
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signature = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest().upper()
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature}"
    )
    return (("x-mq-date-time", date_time), ("authorization", authorization))


def main(argv):
    timeout = 5.0
    quiet = False
    ca_file = None
    args = []
    it = iter(argv)
    for arg in it:
        if arg == "--timeout":
            timeout = float(next(it))
        elif arg == "--quiet":
            quiet = True
        elif arg == "--ca":
            ca_file = next(it)
        else:
            args.append(arg)
    if len(args) < 2:
        sys.stderr.write(__doc__)
        return 2
    target, topics = args[0], args[1:]
    host, _, port = target.rpartition(":")
    metadata = (
        ("x-mq-language", "PYTHON"),
        ("x-mq-client-id", f"ferrymq-probe@{os.getpid()}@{uuid.uuid4().hex[:8]}"),
        ("x-mq-protocol-version", "v2"),
        ("x-mq-client-version", "ferrymq-probe"),
        ("x-mq-request-id", uuid.uuid4().hex),
    )
    ok = True
    if ca_file is None:
        channel = grpc.insecure_channel(target)
    else:
        with open(ca_file, "rb") as f:
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(f.read()))
    with channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute")
        for topic in topics:
            try:
                payload = call(
                    query_route_request(topic, host, int(port)),
                    metadata=metadata + signed_metadata(),
                    timeout=timeout,
                )
            except grpc.RpcError as exc:
                ok = False
                if not quiet:
                    print(f"{topic}: rpc error {exc.code()} {exc.details()}")
                continue
            code, message, queues = describe_route(payload)
            if code != CODE_OK or not queues:
                ok = False
                if not quiet:
                    print(
                        "{}: code {} {}".format(
                            topic, code, message.splitlines()[0] if message else ""
                        )
                    )
                continue
            if not quiet:
                perms = sorted({q[1] for q in queues})
                addrs = sorted({q[2] for q in queues})
                types = sorted({t for q in queues for t in q[3]})
                print(
                    f"{topic}: OK {len(queues)} queues perm={','.join(perms)} "
                    f"broker={','.join(addrs)} accept={','.join(types)}"
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
