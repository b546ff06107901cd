"""The embedded broker's remoting side, seen from Python: its endpoint and a raw route lookup."""

from __future__ import annotations

import json
import socket
import struct

from ferrymq.testing import EmbeddedBroker

GET_ROUTEINFO_BY_TOPIC = 105


def _call(addr: str, code: int, fields: dict[str, str]) -> tuple[dict[str, object], bytes]:
    """One request with a JSON header; returns the reply's header and body."""
    host, port = addr.rsplit(":", 1)
    header = json.dumps(
        {
            "code": code,
            "language": "PYTHON",
            "version": 479,
            "opaque": 1,
            "flag": 0,
            "extFields": fields,
        }
    ).encode()
    frame = struct.pack(">iI", 4 + len(header), len(header)) + header
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "connection closed before the reply"
            data += chunk
    length, word = struct.unpack(">iI", data[:8])
    assert word >> 24 == 0  # JSON header
    hlen = word & 0xFFFFFF
    return json.loads(data[8 : 8 + hlen]), data[8 + hlen : 4 + length]


def test_remoting_endpoint_and_route_lookup() -> None:
    with EmbeddedBroker(endpoints=2) as b:
        b.create_topic("rt", queues=4)
        endpoint = b.remoting_endpoint
        assert endpoint.startswith("remoting://127.0.0.1:")
        addr = endpoint.removeprefix("remoting://")
        assert b.remoting_addresses[0] == addr
        assert len(b.remoting_addresses) == 2
        assert not set(b.remoting_addresses) & set(b.addresses)
        header, body = _call(addr, GET_ROUTEINFO_BY_TOPIC, {"topic": "rt"})
        assert header["code"] == 0
        assert header["opaque"] == 1
        route = json.loads(body)
        assert [d["brokerAddrs"]["0"] for d in route["brokerDatas"]] == b.remoting_addresses
        assert [q["readQueueNums"] for q in route["queueDatas"]] == [2, 2]
        header, _ = _call(addr, GET_ROUTEINFO_BY_TOPIC, {"topic": "missing"})
        assert header["code"] == 17
