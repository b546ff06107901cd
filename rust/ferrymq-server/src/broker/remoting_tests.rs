//! End-to-end tests of the broker's remoting side: a small client built on the codec speaks
//! the protocol over real loopback sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tests::{fast, message, req, res, Client};
use super::*;
use crate::proto;
use crate::remoting::codec::{decode_frame, RemotingCommand, DEFAULT_MAX_FRAME};
use crate::remoting::codes::{request as rq, response as rs};
use crate::remoting::stored::StoredMessage;

/// A remoting connection to one listener.
struct Remote {
    sock: TcpStream,
    buf: BytesMut,
    opaque: i32,
}

impl Remote {
    async fn connect(addr: SocketAddr) -> Remote {
        Remote {
            sock: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            opaque: 0,
        }
    }

    async fn write(&mut self, mut cmd: RemotingCommand, binary: bool) -> i32 {
        self.opaque += 1;
        cmd.opaque = self.opaque;
        let mut out = BytesMut::new();
        if binary {
            cmd.encode_binary(&mut out);
        } else {
            cmd.encode(&mut out);
        }
        self.sock.write_all(&out).await.unwrap();
        self.opaque
    }

    /// The next frame, or `None` when the server closed the connection.
    async fn read(&mut self) -> Option<RemotingCommand> {
        loop {
            if let Some(c) = decode_frame(&mut self.buf, DEFAULT_MAX_FRAME).unwrap() {
                return Some(c);
            }
            match self.sock.read_buf(&mut self.buf).await {
                Ok(n) if n > 0 => {}
                _ => return None,
            }
        }
    }

    async fn call(&mut self, cmd: RemotingCommand) -> RemotingCommand {
        let opaque = self.write(cmd, false).await;
        let r = tokio::time::timeout(Duration::from_secs(10), self.read())
            .await
            .expect("reply in time")
            .expect("connection open");
        assert!(r.is_response());
        assert_eq!(r.opaque, opaque);
        r
    }
}

fn cmd(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
    let mut c = RemotingCommand::request(code);
    for (k, v) in fields {
        c.set_ext(*k, *v);
    }
    c
}

fn pull_cmd(topic: &str, queue: i32, offset: u64, sys_flag: i32, sub: &str) -> RemotingCommand {
    cmd(
        rq::PULL_MESSAGE,
        &[
            ("consumerGroup", "g"),
            ("topic", topic),
            ("queueId", &queue.to_string()),
            ("queueOffset", &offset.to_string()),
            ("maxMsgNums", "1000"),
            ("sysFlag", &sys_flag.to_string()),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "3000"),
            ("subscription", sub),
            ("subVersion", "0"),
            ("expressionType", "TAG"),
        ],
    )
}

fn offset_cmd(code: i32, topic: &str, queue: i32) -> RemotingCommand {
    cmd(code, &[("topic", topic), ("queueId", &queue.to_string())])
}

fn ext_i64(c: &RemotingCommand, k: &str) -> i64 {
    c.ext_i64(k).unwrap()
}

/// One message of a batch body: (body, properties).
fn batch_body(msgs: &[(&[u8], String)]) -> Bytes {
    let mut out = Vec::new();
    for (body, props) in msgs {
        let total = 22 + body.len() + props.len();
        out.extend_from_slice(&(total as i32).to_be_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&(props.len() as i16).to_be_bytes());
        out.extend_from_slice(props.as_bytes());
    }
    Bytes::from(out)
}

fn props(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}\u{2}"))
        .collect()
}

/// The records of a pull body, read by the ferrymq remoting client's decoder (magic, CRC and
/// lengths checked).
fn decode_records(body: Bytes) -> Vec<StoredMessage> {
    crate::remoting::stored::decode_stored(&body).unwrap()
}

/// Check one stored record (§7, magic V1, both hosts IPv4) at the reference's fixed offsets:
/// queue 0, flag 0, `offset`, sysFlag 0, the born time of the single send, `body`, topic `t`,
/// the store host, and properties holding the broker-given `UNIQ_KEY`. Independent of the
/// client's decoder, so a misreading shared by the broker's encoder and that decoder fails here.
fn check_stored_v1(rec: &[u8], offset: i64, body: &[u8], store_host: &str, uniq_key: &str) {
    let i32_at = |at: usize| i32::from_be_bytes(rec[at..at + 4].try_into().unwrap());
    let i64_at = |at: usize| i64::from_be_bytes(rec[at..at + 8].try_into().unwrap());
    let host_at = |at: usize| {
        let ip = std::net::Ipv4Addr::new(rec[at], rec[at + 1], rec[at + 2], rec[at + 3]);
        format!("{ip}:{}", i32_at(at + 4))
    };
    assert_eq!(usize::try_from(i32_at(0)).unwrap(), rec.len(), "TOTALSIZE");
    assert_eq!(i32_at(4), 0xDAA3_20A7_u32 as i32, "MAGICCODE V1");
    let crc = crc32fast::hash(body) & 0x7FFF_FFFF;
    assert_eq!(i32_at(8), i32::try_from(crc).unwrap(), "BODYCRC");
    assert_eq!((i32_at(12), i32_at(16)), (0, 0), "QUEUEID, FLAG");
    assert_eq!(i64_at(20), offset, "QUEUEOFFSET");
    assert!(i64_at(28) >= 0, "PHYSICALOFFSET");
    assert_eq!(i32_at(36), 0, "SYSFLAG");
    assert_eq!(i64_at(40), 1_700_000_000_001, "BORNTIMESTAMP");
    assert!(host_at(48).starts_with("127.0.0.1:"), "BORNHOST");
    assert!(i64_at(56) > 1_700_000_000_001, "STORETIMESTAMP");
    assert_eq!(host_at(64), store_host, "STOREHOST");
    assert_eq!(
        (i32_at(72), i64_at(76)),
        (0, 0),
        "RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET"
    );
    let body_len = usize::try_from(i32_at(84)).unwrap();
    assert_eq!(&rec[88..88 + body_len], body, "BODY");
    let at = 88 + body_len;
    assert_eq!(
        &rec[at..at + 2],
        &[1, b't'],
        "TOPICLENGTH (one byte in V1), TOPIC"
    );
    let props_len = usize::from(u16::from_be_bytes([rec[at + 2], rec[at + 3]]));
    assert_eq!(
        at + 4 + props_len,
        rec.len(),
        "PROPERTIESLENGTH ends the record"
    );
    let props = std::str::from_utf8(&rec[at + 4..]).unwrap();
    assert!(
        props.ends_with('\u{2}'),
        "each property ends with \\u0002: {props:?}"
    );
    for (k, v) in [
        ("TAGS", "solo"),
        ("__SHARDINGKEY", "grp"),
        ("UNIQ_KEY", uniq_key),
    ] {
        assert!(
            props.contains(&format!("{k}\u{1}{v}\u{2}")),
            "{k} in {props:?}"
        );
    }
}

/// A broker started with `config`, topic `t` with `queues` queues, and a connection to its
/// first remoting listener.
async fn started(config: BrokerConfig, queues: usize) -> (Broker, Remote) {
    let broker = Broker::start(config).await.unwrap();
    broker.create_topic("t", "NORMAL", queues).unwrap();
    let r = Remote::connect(broker.remoting_addresses()[0]).await;
    (broker, r)
}

async fn one_endpoint() -> (Broker, Remote) {
    started(fast(), 2).await
}

/// One endpoint whose broker checks signatures with access key `ak`, secret `sk`.
async fn signing() -> (Broker, Remote) {
    let config = BrokerConfig {
        credentials: Some(Credentials {
            access_key: "ak".into(),
            secret_key: "sk".into(),
        }),
        ..fast()
    };
    started(config, 1).await
}

/// Send `n` messages with tags `tag-<i % 2>` to queue 0 of `t` over remoting.
async fn send_batch(r: &mut Remote, n: usize) -> RemotingCommand {
    let bodies: Vec<Vec<u8>> = (0..n).map(|i| format!("body-{i}").into_bytes()).collect();
    let msgs: Vec<(&[u8], String)> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                b.as_slice(),
                props(&[
                    ("KEYS", &format!("k{i} x{i}")),
                    ("TAGS", &format!("tag-{}", i % 2)),
                    ("UNIQ_KEY", &format!("ID{i:04}")),
                    ("WAIT", "true"),
                    ("color", &format!("c{i}")),
                ]),
            )
        })
        .collect();
    let extra = [("i", ""), ("j", "0"), ("k", "false"), ("n", "broker-0")];
    r.call(batch_cmd("1700000000000", &extra, &msgs)).await
}

/// A SEND_BATCH_MESSAGE of `msgs` to queue 0 of `t` from group `pg`, born at `born` (ms), with
/// the `extra` header fields.
fn batch_cmd(born: &str, extra: &[(&str, &str)], msgs: &[(&[u8], String)]) -> RemotingCommand {
    let mut fields = vec![
        ("a", "pg"),
        ("b", "t"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "0"),
        ("f", "0"),
        ("g", born),
        ("h", "0"),
        ("m", "true"),
    ];
    fields.extend_from_slice(extra);
    cmd(rq::SEND_BATCH_MESSAGE, &fields).with_body(batch_body(msgs))
}

#[tokio::test]
async fn remoting_route_lists_every_endpoint() {
    let broker = Broker::start(BrokerConfig {
        endpoints: 2,
        ..fast()
    })
    .await
    .unwrap();
    broker.create_topic("t", "NORMAL", 3).unwrap();
    broker.set_queue_permission("t", 1, 0, "READ").unwrap();
    let addrs = broker.remoting_addresses();
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0], broker.addresses()[0]);
    assert_eq!(
        broker.remoting_access_point(),
        format!("remoting://{}", addrs[0])
    );
    // Any listener is a name server for every topic.
    let mut r = Remote::connect(addrs[1]).await;
    let reply = r
        .call(cmd(rq::GET_ROUTEINFO_BY_TOPIC, &[("topic", "t")]))
        .await;
    assert_eq!(reply.code, rs::SUCCESS);
    assert_eq!(reply.language, 0);
    let route: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    let brokers = route["brokerDatas"].as_array().unwrap();
    assert_eq!(brokers.len(), 2);
    for (i, b) in brokers.iter().enumerate() {
        assert_eq!(b["brokerName"], format!("broker-{i}"));
        assert_eq!(b["cluster"], "DefaultCluster");
        assert_eq!(b["brokerAddrs"]["0"], addrs[i].to_string());
    }
    let queues = route["queueDatas"].as_array().unwrap();
    assert_eq!(queues[0]["readQueueNums"], 2);
    assert_eq!(queues[0]["writeQueueNums"], 2);
    assert_eq!(queues[0]["perm"], 6);
    assert_eq!(queues[1]["readQueueNums"], 1);
    assert_eq!(queues[1]["perm"], 4);
    assert_eq!(queues[1]["topicSysFlag"], 0);
    // Old clients get integer keys.
    let mut old = cmd(rq::GET_ROUTEINFO_BY_TOPIC, &[("topic", "t")]);
    old.version = 317;
    let reply = r.call(old).await;
    assert!(std::str::from_utf8(&reply.body)
        .unwrap()
        .contains("\"brokerAddrs\":{0:"));
    let reply = r
        .call(cmd(rq::GET_ROUTEINFO_BY_TOPIC, &[("topic", "nope")]))
        .await;
    assert_eq!(reply.code, rs::TOPIC_NOT_EXIST);
    // Created over remoting: its queues live on the called endpoint only.
    let reply = r
        .call(cmd(
            rq::UPDATE_AND_CREATE_TOPIC,
            &[
                ("topic", "made"),
                ("defaultTopic", "TBW102"),
                ("readQueueNums", "3"),
                ("writeQueueNums", "3"),
                ("perm", "6"),
                ("topicFilterType", "SINGLE_TAG"),
                ("topicSysFlag", "0"),
                ("order", "false"),
            ],
        ))
        .await;
    assert_eq!(reply.code, rs::SUCCESS);
    let reply = r
        .call(cmd(rq::GET_ROUTEINFO_BY_TOPIC, &[("topic", "made")]))
        .await;
    let route: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(route["brokerDatas"].as_array().unwrap().len(), 1);
    assert_eq!(route["brokerDatas"][0]["brokerName"], "broker-1");
    assert_eq!(route["queueDatas"][0]["writeQueueNums"], 3);
    // Shutdown closes the listeners.
    broker.shutdown().await;
    assert!(r.read().await.is_none());
    assert!(TcpStream::connect(addrs[0]).await.is_err());
}

#[tokio::test]
async fn remoting_batch_send_then_pull_intact_and_grpc_sees_it() {
    let (broker, mut r) = one_endpoint().await;
    let reply = send_batch(&mut r, 3).await;
    assert_eq!(reply.code, rs::SUCCESS, "{:?}", reply.remark);
    assert_eq!(ext_i64(&reply, "queueOffset"), 0);
    assert_eq!(ext_i64(&reply, "queueId"), 0);
    let ids: Vec<String> = reply
        .ext("msgId")
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(reply.ext("MSG_REGION"), Some("DefaultRegion"));
    assert_eq!(reply.ext("TRACE_ON"), Some("true"));
    // A single message without UNIQ_KEY, binary header: the broker gives it an id.
    let single = cmd(
        rq::SEND_MESSAGE,
        &[
            ("producerGroup", "pg"),
            ("topic", "t"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "0"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000001"),
            ("flag", "0"),
            (
                "properties",
                &props(&[("TAGS", "solo"), ("__SHARDINGKEY", "grp")]),
            ),
        ],
    )
    .with_body(&b"single"[..]);
    let opaque = r.write(single, true).await;
    let reply = r.read().await.unwrap();
    assert_eq!((reply.opaque, reply.code), (opaque, rs::SUCCESS));
    assert_eq!(ext_i64(&reply, "queueOffset"), 3);
    let solo_id = reply.ext("transactionId").unwrap().to_string();
    assert!(!solo_id.is_empty());

    let reply = r.call(pull_cmd("t", 0, 0, 4, "*")).await;
    assert_eq!(reply.code, rs::SUCCESS);
    assert_eq!(reply.remark.as_deref(), Some("FOUND"));
    assert_eq!(ext_i64(&reply, "nextBeginOffset"), 4);
    assert_eq!(ext_i64(&reply, "minOffset"), 0);
    assert_eq!(ext_i64(&reply, "maxOffset"), 4);
    assert_eq!(ext_i64(&reply, "suggestWhichBrokerId"), 0);
    let recs = decode_records(reply.body.clone());
    assert_eq!(recs.len(), 4);
    let store_host = format!("127.0.0.1:{}", broker.remoting_addresses()[0].port());
    for (i, rec) in recs.iter().take(3).enumerate() {
        assert_eq!(rec.queue_offset, i as i64);
        assert_eq!(rec.queue_id, 0);
        assert_eq!(rec.topic, "t");
        assert_eq!(rec.sys_flag, 0);
        assert_eq!(rec.born_timestamp_ms, 1_700_000_000_000);
        assert!(rec.store_timestamp_ms > rec.born_timestamp_ms);
        assert_eq!(rec.store_host, store_host);
        assert_eq!(&rec.body[..], format!("body-{i}").as_bytes());
        assert_eq!(rec.property("KEYS").unwrap(), format!("k{i} x{i}"));
        assert_eq!(rec.property("TAGS").unwrap(), format!("tag-{}", i % 2));
        assert_eq!(rec.property("UNIQ_KEY").unwrap(), format!("ID{i:04}"));
        assert_eq!(rec.property("color").unwrap(), format!("c{i}"));
        assert_eq!(rec.property("CLUSTER").unwrap(), "DefaultCluster");
    }
    // The send reply's offset ids name the records' store host and commit-log position.
    for (rec, id) in recs.iter().zip(&ids) {
        let mut raw = vec![127, 0, 0, 1];
        raw.extend_from_slice(&i32::from(broker.remoting_addresses()[0].port()).to_be_bytes());
        raw.extend_from_slice(&rec.physical_offset.to_be_bytes());
        let hex: String = raw.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(&hex, id);
    }
    assert_eq!(recs[3].property("UNIQ_KEY").unwrap(), solo_id);
    assert_eq!(recs[3].property("__SHARDINGKEY").unwrap(), "grp");
    assert_eq!(recs[3].property("TAGS").unwrap(), "solo");
    // The same record read field by field at the offsets of the reference's stored format
    // (§7, both hosts IPv4), independently of the client's decoder.
    // Records follow each other by TOTALSIZE: the fourth is the single send.
    let mut at = 0;
    for _ in 0..3 {
        let total = i32::from_be_bytes(reply.body[at..at + 4].try_into().unwrap());
        at += usize::try_from(total).unwrap();
    }
    check_stored_v1(&reply.body[at..], 3, b"single", &store_host, &solo_id);

    // A gRPC consumer reads the same messages, mapped onto its fields.
    let mut c = Client::connect(broker.addresses()[0], "grpc-1").await;
    let mut s = c
        .rpc
        .pull_message(req(
            "grpc-1",
            proto::PullMessageRequest {
                group: res("g"),
                message_queue: Some(proto::MessageQueue {
                    topic: res("t"),
                    id: 0,
                    ..Default::default()
                }),
                offset: 0,
                batch_size: 10,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut got = vec![];
    while let Some(m) = s.message().await.unwrap() {
        if let Some(proto::pull_message_response::Content::Message(m)) = m.content {
            got.push(m);
        }
    }
    assert_eq!(got.len(), 4);
    let sp = got[1].system_properties.as_ref().unwrap();
    assert_eq!(sp.message_id, "ID0001");
    assert_eq!(sp.tag.as_deref(), Some("tag-1"));
    assert_eq!(sp.keys, vec!["k1", "x1"]);
    assert_eq!(got[1].user_properties["color"], "c1");
    assert!(!got[1].user_properties.contains_key("WAIT"));
    let sp = got[3].system_properties.as_ref().unwrap();
    assert_eq!(sp.message_group.as_deref(), Some("grp"));

    // And a gRPC-sent message is pullable over remoting.
    let mut m = message("t", b"from-grpc");
    let sp = m.system_properties.as_mut().unwrap();
    sp.queue_id = 1;
    sp.tag = Some("g-tag".into());
    m.user_properties.insert("p".into(), "v".into());
    let id = sp.message_id.clone();
    let sent = c.send(vec![m]).await;
    assert_eq!(sent.status.unwrap().code, crate::status::OK);
    let reply = r.call(pull_cmd("t", 1, 0, 4, "g-tag")).await;
    assert_eq!(reply.code, rs::SUCCESS);
    let recs = decode_records(reply.body);
    assert_eq!(recs.len(), 1);
    assert_eq!(&recs[0].body[..], b"from-grpc");
    assert_eq!(recs[0].property("UNIQ_KEY").unwrap(), id);
    assert_eq!(recs[0].property("p").unwrap(), "v");
}

#[tokio::test]
async fn remoting_min_max_and_search_offsets() {
    let (_broker, mut r) = one_endpoint().await;
    let reply = r.call(offset_cmd(rq::GET_MAX_OFFSET, "t", 0)).await;
    assert_eq!((reply.code, ext_i64(&reply, "offset")), (rs::SUCCESS, 0));
    send_batch(&mut r, 2).await;
    let before = store::now_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    send_batch(&mut r, 2).await;
    let reply = r.call(offset_cmd(rq::GET_MAX_OFFSET, "t", 0)).await;
    assert_eq!(ext_i64(&reply, "offset"), 4);
    let reply = r.call(offset_cmd(rq::GET_MIN_OFFSET, "t", 0)).await;
    assert_eq!(ext_i64(&reply, "offset"), 0);
    // Unknown topics and queues: 0, not an error.
    let reply = r.call(offset_cmd(rq::GET_MAX_OFFSET, "nope", 0)).await;
    assert_eq!((reply.code, ext_i64(&reply, "offset")), (rs::SUCCESS, 0));
    let reply = r.call(offset_cmd(rq::GET_MAX_OFFSET, "t", 9)).await;
    assert_eq!((reply.code, ext_i64(&reply, "offset")), (rs::SUCCESS, 0));
    let search = |ts: i64, boundary: &str| {
        offset_cmd(rq::SEARCH_OFFSET_BY_TIMESTAMP, "t", 0)
            .with_ext("timestamp", ts)
            .with_ext("boundaryType", boundary)
    };
    let at = |c: RemotingCommand| ext_i64(&c, "offset");
    assert_eq!(at(r.call(search(before + 1, "LOWER")).await), 2);
    assert_eq!(at(r.call(search(before + 1, "UPPER")).await), 1);
    assert_eq!(at(r.call(search(0, "LOWER")).await), 0);
    assert_eq!(at(r.call(search(i64::MAX, "LOWER")).await), 4);
    assert_eq!(at(r.call(search(i64::MAX, "UPPER")).await), 3);
    // A missing field is the server's SYSTEM_ERROR.
    let reply = r.call(cmd(rq::GET_MAX_OFFSET, &[("topic", "t")])).await;
    assert_eq!(reply.code, rs::SYSTEM_ERROR);
}

#[tokio::test]
async fn remoting_pull_result_codes() {
    let (_broker, mut r) = one_endpoint().await;
    // A pull of queue 0 of `t` from `offset` with `filter`: (code, nextBeginOffset, remark).
    async fn pulled(r: &mut Remote, offset: u64, filter: &str) -> (i32, i64, Option<String>) {
        let reply = r.call(pull_cmd("t", 0, offset, 4, filter)).await;
        let next = ext_i64(&reply, "nextBeginOffset");
        (reply.code, next, reply.remark)
    }
    // Empty queue: 19 at 0, 21 (next 0) elsewhere.
    let (code, next, _) = pulled(&mut r, 0, "*").await;
    assert_eq!((code, next), (rs::PULL_NOT_FOUND, 0));
    let (code, next, _) = pulled(&mut r, 5, "*").await;
    assert_eq!((code, next), (rs::PULL_OFFSET_MOVED, 0));
    send_batch(&mut r, 4).await;
    // At max: 19; above max: 21 with next = max.
    let (code, next, _) = pulled(&mut r, 4, "*").await;
    assert_eq!((code, next), (rs::PULL_NOT_FOUND, 4));
    let above = pulled(&mut r, 9, "*").await;
    let badly = Some("OFFSET_OVERFLOW_BADLY".to_string());
    assert_eq!(above, (rs::PULL_OFFSET_MOVED, 4, badly));
    // Everything filtered out: 20, next past the scanned range.
    let (code, next, _) = pulled(&mut r, 0, "other").await;
    assert_eq!((code, next), (rs::PULL_RETRY_IMMEDIATELY, 4));
    // Tag filter: only matches, next past the scanned range.
    let reply = r.call(pull_cmd("t", 0, 0, 4, "tag-1 || zzz")).await;
    assert_eq!(reply.code, rs::SUCCESS);
    let recs = decode_records(reply.body.clone());
    let offsets: Vec<i64> = recs.iter().map(|r| r.queue_offset).collect();
    assert_eq!(offsets, vec![1, 3]);
    assert_eq!(ext_i64(&reply, "nextBeginOffset"), 4);
    // 32 at most per pull.
    send_batch(&mut r, 40).await;
    let reply = r.call(pull_cmd("t", 0, 0, 4, "*")).await;
    assert_eq!(decode_records(reply.body.clone()).len(), 32);
    assert_eq!(ext_i64(&reply, "nextBeginOffset"), 32);
    // Bad queue id, unknown topic, no subscription.
    for (topic, queue, sys_flag, code) in [
        ("t", 7, 4, rs::INVALID_PARAMETER),
        ("nope", 0, 4, rs::TOPIC_NOT_EXIST),
        ("t", 0, 0, rs::SUBSCRIPTION_NOT_EXIST),
    ] {
        let reply = r.call(pull_cmd(topic, queue, 0, sys_flag, "*")).await;
        assert_eq!(reply.code, code, "{topic} queue {queue} sysFlag {sys_flag}");
    }
}

#[tokio::test]
async fn remoting_long_poll_is_woken_by_a_grpc_send() {
    let (broker, mut r) = one_endpoint().await;
    let opaque = r.write(pull_cmd("t", 0, 0, 6, "*"), false).await;
    let started = Instant::now();
    let addr = broker.addresses()[0];
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut c = Client::connect(addr, "grpc-2").await;
        let mut m = message("t", b"wake");
        m.system_properties.as_mut().unwrap().queue_id = 0;
        c.send(vec![m]).await;
    });
    let reply = r.read().await.unwrap();
    assert_eq!((reply.opaque, reply.code), (opaque, rs::SUCCESS));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(&decode_records(reply.body)[0].body[..], b"wake");
    // Nothing comes: 19 once the suspend time is over.
    let mut poll = pull_cmd("t", 0, 1, 6, "*");
    poll.set_ext("suspendTimeoutMillis", 200);
    let started = Instant::now();
    let reply = r.call(poll).await;
    assert_eq!(reply.code, rs::PULL_NOT_FOUND);
    assert!(started.elapsed() >= Duration::from_millis(180));
}

#[tokio::test]
async fn remoting_commit_and_query_offset() {
    let (broker, mut r) = one_endpoint().await;
    // Group `cg` on queue 1 of `t`, and one more field.
    let on_q1 = |code: i32, key: &str, value: &str| {
        let fields = [("consumerGroup", "cg"), ("topic", "t"), ("queueId", "1")];
        cmd(code, &fields).with_ext(key, value)
    };
    let query = |zero: &str| on_q1(rq::QUERY_CONSUMER_OFFSET, "setZeroIfNotFound", zero);
    let update = |to: i64| on_q1(rq::UPDATE_CONSUMER_OFFSET, "commitOffset", &to.to_string());
    assert_eq!(r.call(query("false")).await.code, rs::QUERY_NOT_FOUND);
    let reply = r.call(query("true")).await;
    assert_eq!((reply.code, ext_i64(&reply, "offset")), (rs::SUCCESS, 0));
    // The group must exist: a heartbeat creates it.
    assert_eq!(
        r.call(update(3)).await.code,
        rs::SUBSCRIPTION_GROUP_NOT_EXIST
    );
    let hb = br#"{"clientID":"c1","consumerDataSet":[{"groupName":"cg","subscriptionDataSet":[{"topic":"t","subString":"*"}]}],"producerDataSet":[]}"#;
    let reply = r
        .call(RemotingCommand::request(rq::HEART_BEAT).with_body(&hb[..]))
        .await;
    assert_eq!(reply.code, rs::SUCCESS);
    assert_eq!(r.call(update(3)).await.code, rs::SUCCESS);
    let reply = r.call(query("false")).await;
    assert_eq!((reply.code, ext_i64(&reply, "offset")), (rs::SUCCESS, 3));
    // Oneway: no reply, but committed.
    let mut oneway = update(5);
    oneway.flag = crate::remoting::codec::FLAG_ONEWAY;
    r.write(oneway, false).await;
    let reply = r.call(query("false")).await;
    assert_eq!(ext_i64(&reply, "offset"), 5);
    // The same entry as gRPC's.
    let mut c = Client::connect(broker.addresses()[0], "grpc-3").await;
    let mq = Some(proto::MessageQueue {
        topic: res("t"),
        id: 1,
        ..Default::default()
    });
    let got = c
        .rpc
        .get_offset(req(
            "grpc-3",
            proto::GetOffsetRequest {
                group: res("cg"),
                message_queue: mq.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.offset, 5);
    c.rpc
        .update_offset(req(
            "grpc-3",
            proto::UpdateOffsetRequest {
                group: res("cg"),
                message_queue: mq,
                offset: 0,
            },
        ))
        .await
        .unwrap();
    let reply = r.call(query("false")).await;
    assert_eq!(ext_i64(&reply, "offset"), 0);
}

#[tokio::test]
async fn remoting_unknown_code_and_bad_frames() {
    let (broker, mut r) = one_endpoint().await;
    let reply = r.call(cmd(9999, &[])).await;
    assert_eq!(reply.code, rs::REQUEST_CODE_NOT_SUPPORTED);
    assert_eq!(
        reply.remark.as_deref(),
        Some(" request type 9999 not supported")
    );
    assert!(reply.ext_fields.is_empty());
    // A header that is not JSON closes the connection without a reply.
    let mut bad = Vec::new();
    bad.extend_from_slice(&9i32.to_be_bytes());
    bad.extend_from_slice(&5u32.to_be_bytes());
    bad.extend_from_slice(b"{nope");
    r.sock.write_all(&bad).await.unwrap();
    assert!(r.read().await.is_none());
    // So does a negative length; the listener keeps serving others.
    let mut r = Remote::connect(broker.remoting_addresses()[0]).await;
    r.sock.write_all(&(-5i32).to_be_bytes()).await.unwrap();
    assert!(r.read().await.is_none());
    let mut r = Remote::connect(broker.remoting_addresses()[0]).await;
    assert_eq!(r.call(cmd(rq::HEART_BEAT, &[])).await.code, rs::SUCCESS);
    // A refusing endpoint drops remoting connections too.
    broker
        .set_unavailable(0, Some(Unavailable::Refuse))
        .await
        .unwrap();
    assert!(r.read().await.is_none());
    let mut r = Remote::connect(broker.remoting_addresses()[0]).await;
    r.write(cmd(rq::HEART_BEAT, &[]), false).await;
    assert!(r.read().await.is_none());
    broker.set_unavailable(0, None).await.unwrap();
    let mut r = Remote::connect(broker.remoting_addresses()[0]).await;
    assert_eq!(r.call(cmd(rq::HEART_BEAT, &[])).await.code, rs::SUCCESS);
}

#[tokio::test]
async fn remoting_pull_below_retention_moves_to_the_new_min() {
    let config = BrokerConfig {
        when_full: WhenFull::DropOldest,
        max_body_size: 512,
        // Room for more than one batch of three messages (each about 100 bytes of record),
        // fewer than all nine.
        max_topic_bytes: 4 * (store::MESSAGE_OVERHEAD + 160),
        ..fast()
    };
    let (_broker, mut r) = started(config, 1).await;
    for _ in 0..3 {
        assert_eq!(send_batch(&mut r, 3).await.code, rs::SUCCESS);
    }
    let reply = r.call(offset_cmd(rq::GET_MIN_OFFSET, "t", 0)).await;
    let min = ext_i64(&reply, "offset");
    assert!(min > 0);
    let reply = r.call(pull_cmd("t", 0, 0, 4, "*")).await;
    assert_eq!(reply.code, rs::PULL_OFFSET_MOVED);
    assert_eq!(reply.remark.as_deref(), Some("OFFSET_TOO_SMALL"));
    assert_eq!(ext_i64(&reply, "nextBeginOffset"), min);
    assert_eq!(ext_i64(&reply, "minOffset"), min);
    let reply = r.call(pull_cmd("t", 0, min as u64, 4, "*")).await;
    assert_eq!(reply.code, rs::SUCCESS);
    assert_eq!(decode_records(reply.body)[0].queue_offset, min);
}

#[tokio::test]
async fn remoting_acl_signature_is_checked() {
    let (_broker, mut r) = signing().await;
    // The name server role does not authenticate.
    let reply = r
        .call(cmd(rq::GET_ROUTEINFO_BY_TOPIC, &[("topic", "t")]))
        .await;
    assert_eq!(reply.code, rs::SUCCESS);
    let reply = r.call(offset_cmd(rq::GET_MAX_OFFSET, "t", 0)).await;
    assert_eq!(reply.code, rs::NO_PERMISSION);
    // Signed by the client's signer.
    let sign = |mut c: RemotingCommand, secret: &str| {
        c.set_ext("AccessKey", "ak");
        let sig = crate::remoting::acl::sign(&c.ext_fields, &c.body, secret);
        c.set_ext("Signature", sig);
        c
    };
    let heartbeat = || cmd(rq::HEART_BEAT, &[("zz", "1")]).with_body(&b"{}"[..]);
    assert_eq!(r.call(sign(heartbeat(), "sk")).await.code, rs::SUCCESS);
    assert_eq!(
        r.call(sign(heartbeat(), "wrong")).await.code,
        rs::NO_PERMISSION
    );
    let mut tampered = sign(heartbeat(), "sk");
    tampered.body = Bytes::from_static(b"{ }");
    assert_eq!(r.call(tampered).await.code, rs::NO_PERMISSION);
    // Pulls, served on their own task, are checked too.
    let pull = || pull_cmd("t", 0, 0, 4, "*");
    assert_eq!(r.call(pull()).await.code, rs::NO_PERMISSION);
    assert_eq!(r.call(sign(pull(), "sk")).await.code, rs::PULL_NOT_FOUND);
}

#[tokio::test]
async fn remoting_can_be_turned_off() {
    let broker = Broker::start(BrokerConfig {
        remoting: false,
        ..fast()
    })
    .await
    .unwrap();
    assert!(broker.remoting_addresses().is_empty());
    assert_eq!(broker.remoting_access_point(), "");
}
