//! Remoting pulls (`PULL_MESSAGE`, `LITE_PULL_MESSAGE`; remoting reference §6) and the stored
//! record format of their bodies (§7).
//!
//! A pull reads one queue of the called endpoint from `queueOffset`, at most 32 matching
//! messages (or 256 KiB, the first message always), and answers with the codes of §6.4:
//! `SUCCESS` with the records, `PULL_NOT_FOUND` at the end of the queue (after waiting up to
//! `suspendTimeoutMillis` for a message when `FLAG_SUSPEND` is set, woken by any append to the
//! topic), `PULL_RETRY_IMMEDIATELY` when everything scanned was filtered out, and
//! `PULL_OFFSET_MOVED` for an offset below the retained minimum or above the maximum.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};

use super::pop::Filter;
use super::remoting_wire::{field, number, refuse, reply, Answer, Conn, CLUSTER, REGION};
use super::store::{readable, Stored};
use crate::proto;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::response as rs;

/// Pull `sysFlag` bit: also commit `commitOffset` for the group.
const FLAG_COMMIT_OFFSET: i32 = 0x1;
/// Pull `sysFlag` bit: wait for messages when there are none.
const FLAG_SUSPEND: i32 = 0x2;
/// Pull `sysFlag` bit: the filter comes with the request.
const FLAG_SUBSCRIPTION: i32 = 0x4;
/// Most messages in one pull answer (`maxTransferCountOnMessageInMemory`).
const MAX_MESSAGES: usize = 32;
/// Most bytes in one pull answer (`maxTransferBytesOnMessageInMemory`).
const MAX_BYTES: usize = 256 * 1024;
/// Most queue entries looked at by one pull (filtered ones included).
const MAX_SCAN: u64 = 64 * 1024;
/// Stored record magic code, version 1 (one-byte topic length).
const MAGIC_V1: u32 = 0xDAA3_20A7;
/// Message `sysFlag` bits.
const SYSFLAG_COMPRESSED: i32 = 0x1;
const SYSFLAG_TRANSACTION_COMMIT: i32 = 0x8;
const SYSFLAG_BORNHOST_V6: i32 = 0x10;
const SYSFLAG_STOREHOST_V6: i32 = 0x20;
/// Largest properties string of a record.
const MAX_PROPERTIES: usize = i16::MAX as usize;

/// Property names of the stored format.
pub(crate) mod prop {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const CLUSTER: &str = "CLUSTER";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_ON: &str = "TRACE_ON";
}

/// What one look at the queue found.
enum Outcome {
    Found(Vec<Arc<Stored>>),
    /// A non-SUCCESS result code and the store status of the remark.
    Status(i32, &'static str),
}

/// Serve a pull.
pub(crate) async fn pull(conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = field(req, "consumerGroup")?;
    let topic_name = field(req, "topic")?;
    let queue_id: i32 = number(req, "queueId")?;
    let offset: i64 = number(req, "queueOffset")?;
    let max_msgs: i64 = number(req, "maxMsgNums")?;
    let sys_flag: i32 = number(req, "sysFlag")?;
    let commit_offset: i64 = number(req, "commitOffset")?;
    let suspend_ms: i64 = number(req, "suspendTimeoutMillis")?;
    let core = &conn.core;
    if core.store.group_or_create(group, &core.config).is_none() {
        return Err(refuse(
            req,
            rs::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group [{group}] does not exist"),
        ));
    }
    let Some(topic) = core.store.topic(topic_name) else {
        return Err(refuse(
            req,
            rs::TOPIC_NOT_EXIST,
            format!("topic[{topic_name}] not exist, apply first please!"),
        ));
    };
    let Some(queue) = topic.queue(conn.ep.index, queue_id).cloned() else {
        return Err(refuse(
            req,
            rs::INVALID_PARAMETER,
            format!(
                "queueId[{queue_id}] is illegal, topic:[{topic_name}] topicConfig.readQueueNums:[{}] consumer:[{}]",
                topic.by_broker[conn.ep.index].len(),
                conn.peer
            ),
        ));
    };
    if !readable(queue.permission()) {
        return Err(refuse(
            req,
            rs::NO_PERMISSION,
            format!("the topic[{topic_name}] pulling message is forbidden"),
        )
        .with_ext("forbiddenType", 3));
    }
    let filter = pull_filter(conn, req, group, topic_name, sys_flag)?;
    if sys_flag & FLAG_COMMIT_OFFSET != 0 && commit_offset >= 0 {
        queue
            .state
            .lock()
            .offsets
            .insert(group.to_string(), commit_offset);
    }
    let max_msgs = usize::try_from(max_msgs)
        .unwrap_or(0)
        .clamp(1, MAX_MESSAGES);
    let hold = Duration::from_millis(u64::try_from(suspend_ms).unwrap_or(0))
        .min(core.config.long_polling_max);
    let deadline = Instant::now() + hold;
    let store_host = conn.local_addr();
    let answer = topic.long_poll(&conn.closed, || {
        let (outcome, next, min, max) = {
            let st = queue.state.lock();
            let (min, max) = (st.base, st.end());
            let (outcome, next) = if max == 0 {
                let code = if offset == 0 {
                    rs::PULL_NOT_FOUND
                } else {
                    rs::PULL_OFFSET_MOVED
                };
                (Outcome::Status(code, "NO_MESSAGE_IN_QUEUE"), 0)
            } else if offset < 0 || (offset as u64) < min {
                (
                    Outcome::Status(rs::PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL"),
                    min,
                )
            } else if offset as u64 == max {
                (
                    Outcome::Status(rs::PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"),
                    max,
                )
            } else if offset as u64 > max {
                (
                    Outcome::Status(rs::PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY"),
                    max,
                )
            } else {
                let mut found = Vec::new();
                let mut bytes = 0;
                let mut at = offset as u64;
                let scan_end = max.min(at + MAX_SCAN);
                while at < scan_end && found.len() < max_msgs {
                    let Some(m) = st.get(at) else { break };
                    if filter.matches(m) {
                        let size = m.body_len() + 128;
                        if !found.is_empty() && bytes + size > MAX_BYTES {
                            break;
                        }
                        bytes += size;
                        found.push(m.clone());
                    }
                    at += 1;
                }
                if found.is_empty() {
                    (
                        Outcome::Status(rs::PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
                        at,
                    )
                } else {
                    (Outcome::Found(found), at)
                }
            };
            (outcome, next, min, max)
        };
        let may_wait = matches!(outcome, Outcome::Status(rs::PULL_NOT_FOUND, _))
            && sys_flag & FLAG_SUSPEND != 0
            && Instant::now() < deadline
            && !conn.closed.is_cancelled();
        if may_wait {
            return ControlFlow::Continue(deadline);
        }
        let mut r = match outcome {
            Outcome::Found(found) => {
                let mut body = BytesMut::with_capacity(found.len() * 256);
                for m in &found {
                    encode_record(&mut body, m, &topic.name, queue_id, store_host);
                }
                reply(req, rs::SUCCESS, Some("FOUND".into())).with_body(body.freeze())
            }
            Outcome::Status(code, status) => reply(req, code, Some(status.into())),
        };
        r.set_ext("suggestWhichBrokerId", 0);
        r.set_ext("nextBeginOffset", next);
        r.set_ext("minOffset", min);
        r.set_ext("maxOffset", max);
        r.set_ext("topicSysFlag", 0);
        r.set_ext("groupSysFlag", 0);
        ControlFlow::Break(r)
    });
    Ok(answer.await)
}

/// The tag filter of a pull: from the request with `FLAG_SUBSCRIPTION`, else from the group's
/// heartbeat.
fn pull_filter(
    conn: &Conn,
    req: &RemotingCommand,
    group: &str,
    topic: &str,
    sys_flag: i32,
) -> Result<Filter, RemotingCommand> {
    let expr = if sys_flag & FLAG_SUBSCRIPTION != 0 {
        match req.ext("expressionType") {
            None | Some("") => {}
            Some(t) if t.eq_ignore_ascii_case("TAG") => {}
            Some(t) => {
                return Err(refuse(
                    req,
                    rs::SYSTEM_ERROR,
                    format!("The broker does not support consumer to filter message by {t}"),
                ))
            }
        }
        req.ext("subscription").unwrap_or("*").to_string()
    } else {
        conn.ep.remoting.subscription(group, topic).ok_or_else(|| {
            refuse(
                req,
                rs::SUBSCRIPTION_NOT_EXIST,
                format!("the consumer's subscription not exist, group: {group}, topic: {topic}"),
            )
        })?
    };
    let expr = expr.trim();
    Filter::of_tags(expr).ok_or_else(|| {
        refuse(
            req,
            rs::SUBSCRIPTION_PARSE_FAILED,
            format!("parse the consumer's subscription[{expr}] failed"),
        )
    })
}

/// A stand-in commit-log position of a message, unique per (topic, queue, offset) in practice:
/// 13 bits of the topic name's CRC, 10 bits of queue id, 40 bits of queue offset.
pub(crate) fn physical_offset(topic: &str, queue_id: i32, offset: u64) -> i64 {
    let t = i64::from(crc32fast::hash(topic.as_bytes()) & 0x1FFF);
    let q = i64::from(queue_id) & 0x3FF;
    (t << 50) | (q << 40) | (offset & 0xFF_FFFF_FFFF) as i64
}

/// The offset message id (§7.3): store host address and port, and the commit-log position, in
/// upper-case hex.
pub(crate) fn offset_msg_id(store_host: SocketAddr, physical: i64) -> String {
    let mut raw = Vec::with_capacity(28);
    match store_host.ip() {
        IpAddr::V4(ip) => raw.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => raw.extend_from_slice(&ip.octets()),
    }
    raw.extend_from_slice(&i32::from(store_host.port()).to_be_bytes());
    raw.extend_from_slice(&physical.to_be_bytes());
    super::send::upper_hex(&raw)
}

/// The born host of a stored message as a socket address (`host:port`, or a bare IP).
fn born_addr(m: &proto::Message) -> SocketAddr {
    let host = m
        .system_properties
        .as_ref()
        .map_or("", |s| s.born_host.as_str());
    host.parse::<SocketAddr>()
        .or_else(|_| host.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 0)))
        .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
}

fn put_addr(out: &mut BytesMut, addr: SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.put_i32(i32::from(addr.port()));
}

/// Append `name \u{1} value \u{2}`, unless a separator would corrupt it.
fn put_property(out: &mut String, name: &str, value: &str) {
    if value.is_empty() || [name, value].iter().any(|s| s.contains(['\u{1}', '\u{2}'])) {
        return;
    }
    out.push_str(name);
    out.push('\u{1}');
    out.push_str(value);
    out.push('\u{2}');
}

/// The properties string of a stored message: its tag, keys, id and message group, its user
/// properties, and what the broker adds to every message.
pub(crate) fn properties_of(m: &proto::Message) -> String {
    let mut s = String::new();
    if let Some(sp) = &m.system_properties {
        if let Some(tag) = &sp.tag {
            put_property(&mut s, prop::TAGS, tag);
        }
        if !sp.keys.is_empty() {
            put_property(&mut s, prop::KEYS, &sp.keys.join(" "));
        }
        put_property(&mut s, prop::UNIQ_KEY, &sp.message_id);
        if let Some(g) = &sp.message_group {
            put_property(&mut s, prop::SHARDING_KEY, g);
        }
    }
    put_property(&mut s, prop::CLUSTER, CLUSTER);
    put_property(&mut s, prop::MSG_REGION, REGION);
    put_property(&mut s, prop::TRACE_ON, "true");
    let mut user: Vec<_> = m.user_properties.iter().collect();
    user.sort();
    for (k, v) in user {
        if s.len() + k.len() + v.len() + 2 > MAX_PROPERTIES {
            break;
        }
        put_property(&mut s, k, v);
    }
    s
}

/// Append the stored record of `m` (§7) to `out`.
pub(crate) fn encode_record(
    out: &mut BytesMut,
    m: &Stored,
    topic: &str,
    queue_id: i32,
    store_host: SocketAddr,
) {
    let msg = &m.to_message(topic, queue_id);
    let sp = msg.system_properties.as_ref();
    let born = born_addr(msg);
    let born_ms = sp
        .and_then(|s| s.born_timestamp.as_ref())
        .map_or(m.store_ms, super::store::ms_of);
    let mut sys_flag = 0;
    if sp.is_some_and(|s| s.body_encoding == proto::Encoding::Gzip as i32) {
        sys_flag |= SYSFLAG_COMPRESSED;
    }
    if sp.is_some_and(|s| s.message_type == proto::MessageType::Transaction as i32) {
        sys_flag |= SYSFLAG_TRANSACTION_COMMIT;
    }
    if born.is_ipv6() {
        sys_flag |= SYSFLAG_BORNHOST_V6;
    }
    if store_host.is_ipv6() {
        sys_flag |= SYSFLAG_STOREHOST_V6;
    }
    let mut props = properties_of(msg);
    if props.len() > MAX_PROPERTIES {
        // Only user properties are bounded while building; never write a wrapped length.
        // 0x02 never occurs inside a multi-byte character: the cut is a char boundary.
        let cut = props.as_bytes()[..MAX_PROPERTIES]
            .iter()
            .rposition(|b| *b == 2)
            .map_or(0, |i| i + 1);
        props.truncate(cut);
    }
    let topic_len = topic.len().min(255);
    let host_len = |a: SocketAddr| if a.is_ipv6() { 20 } else { 8 };
    let total = 4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_len(born)
        + 8
        + host_len(store_host)
        + 4
        + 8
        + 4
        + msg.body.len()
        + 1
        + topic_len
        + 2
        + props.len();
    out.reserve(total);
    out.put_i32(i32::try_from(total).unwrap_or(i32::MAX));
    out.put_u32(MAGIC_V1);
    out.put_i32((crc32fast::hash(&msg.body) & 0x7FFF_FFFF) as i32);
    out.put_i32(queue_id);
    out.put_i32(0); // user flag: not kept by the store
    out.put_i64(m.offset as i64);
    out.put_i64(physical_offset(topic, queue_id, m.offset));
    out.put_i32(sys_flag);
    out.put_i64(born_ms);
    put_addr(out, born);
    out.put_i64(m.store_ms);
    put_addr(out, store_host);
    out.put_i32(0); // reconsume times
    out.put_i64(0); // prepared transaction offset
    out.put_i32(i32::try_from(msg.body.len()).unwrap_or(i32::MAX));
    out.put_slice(&msg.body);
    out.put_u8(topic_len as u8);
    out.put_slice(&topic.as_bytes()[..topic_len]);
    out.put_i16(props.len() as i16);
    out.put_slice(props.as_bytes());
}
