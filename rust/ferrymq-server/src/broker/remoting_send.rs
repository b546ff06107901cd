//! Remoting sends (`SEND_MESSAGE`, `SEND_MESSAGE_V2`, `SEND_BATCH_MESSAGE`; remoting reference
//! §8), stored as the store's `proto::Message`s so that gRPC consumers receive them.
//!
//! A message's properties string maps onto the message: `TAGS` → tag, `KEYS` (space separated)
//! → keys, `UNIQ_KEY` → message id (the broker makes one when a single message has none),
//! `__SHARDINGKEY` → message group; the other names that RocketMQ reserves are dropped and the
//! rest become user properties. The compressed bit of `sysFlag` becomes the GZIP body encoding.
//! A batch (`batch`/`m` = true) body holds one record per message (§8.4), each with its own
//! properties; the header's properties do not leak into them. Delays (`DELAY` levels and the
//! `TIMER_*` properties) go through the broker's timer; transactional messages are refused.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::remoting_pull::{offset_msg_id, physical_offset, prop};
use super::remoting_wire::{field, flag_field, number, refuse, reply, Answer, Conn, REGION};
use super::send::body_digest;
use super::store::{self, kind_to_proto, now_ms, valid_resource_name, writable, Queue};
use super::telemetry::DELAY_LEVELS;
use super::timer::Delayed;
use crate::message::{MessageKind, RESERVED_PROPERTIES};
use crate::proto;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::{request as rq, response as rs};

/// Bodies of frames smaller than this are copied out of the connection's read buffer.
const COPY_BODIES_BELOW: usize = 64 * 1024;

/// One message of a send, before it becomes a `proto::Message`.
struct Incoming {
    body: Bytes,
    props: Vec<(String, String)>,
}

impl Incoming {
    fn get(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parse a properties string (`name \u{1} value \u{2}` …); the last duplicate wins.
fn parse_properties(s: &str) -> Vec<(String, String)> {
    s.split('\u{2}')
        .filter(|e| e.len() >= 3)
        .filter_map(|e| e.split_once('\u{1}'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Split a batch body into its messages (§8.4). Like the Java broker, the fields are read in
/// sequence; the leading record size is not relied upon.
fn decode_batch(mut body: Bytes) -> Result<Vec<Incoming>, String> {
    let mut out = Vec::new();
    while body.has_remaining() {
        if body.len() < 20 {
            return Err(format!(
                "truncated batch record ({} bytes left)",
                body.len()
            ));
        }
        body.advance(12); // record size, magic code, body CRC
        let _flag = body.get_i32();
        let body_len = usize::try_from(body.get_i32()).map_err(|_| "negative body length")?;
        if body_len + 2 > body.len() {
            return Err("a batch record's body overruns the batch".into());
        }
        let msg_body = body.split_to(body_len);
        let props_len =
            usize::try_from(body.get_i16()).map_err(|_| "negative properties length")?;
        if props_len > body.len() {
            return Err("a batch record's properties overrun the batch".into());
        }
        let props = body.split_to(props_len);
        let props =
            std::str::from_utf8(&props).map_err(|_| "batch record properties are not UTF-8")?;
        out.push(Incoming {
            body: msg_body,
            props: parse_properties(props),
        });
    }
    Ok(out)
}

/// The delivery time of a delayed message, from `DELAY` or the `TIMER_*` properties.
fn delivery_ms(m: &Incoming, now: i64) -> Option<i64> {
    if let Some(at) = m
        .get("TIMER_DELIVER_MS")
        .and_then(|v| v.parse::<i64>().ok())
    {
        return Some(at);
    }
    if let Some(ms) = m.get("TIMER_DELAY_MS").and_then(|v| v.parse::<i64>().ok()) {
        return Some(now.saturating_add(ms));
    }
    if let Some(s) = m.get("TIMER_DELAY_SEC").and_then(|v| v.parse::<i64>().ok()) {
        return Some(now.saturating_add(s.saturating_mul(1000)));
    }
    let level = m.get("DELAY").and_then(|v| v.parse::<usize>().ok())?;
    let level = level.min(DELAY_LEVELS.len());
    (level > 0).then(|| now + DELAY_LEVELS[level - 1] as i64 * 1000)
}

/// Whether a property name is the broker's, not the user's.
fn is_system(name: &str) -> bool {
    RESERVED_PROPERTIES.contains(&name)
        || name.starts_with("TIMER_")
        || matches!(
            name,
            prop::SHARDING_KEY | prop::CLUSTER | "__STARTDELIVERTIME"
        )
}

/// Serve a send.
pub(crate) fn send(conn: &Conn, req: &RemotingCommand) -> Answer {
    // Code 10 names its fields in full, 310 and 320 with one letter.
    let long = req.code == rq::SEND_MESSAGE;
    let name = |short: &'static str, full: &'static str| if long { full } else { short };
    field(req, name("a", "producerGroup"))?;
    let topic_name = field(req, name("b", "topic"))?;
    let queue_id: i32 = number(req, name("e", "queueId"))?;
    let sys_flag: i32 = number(req, name("f", "sysFlag"))?;
    let born_ms: i64 = number(req, name("g", "bornTimestamp"))?;
    number::<i32>(req, name("h", "flag"))?;
    let header_props = req.ext(name("i", "properties")).unwrap_or("");
    let batch = flag_field(req, name("m", "batch"));
    let core = &conn.core;
    let cfg = &core.config;
    if !valid_resource_name(topic_name) {
        return Err(refuse(
            req,
            rs::INVALID_PARAMETER,
            format!("the topic[{topic_name}] is not valid"),
        ));
    }
    let Some(topic) = core.store.topic_or_create(topic_name, cfg) else {
        return Err(refuse(
            req,
            rs::TOPIC_NOT_EXIST,
            format!("topic[{topic_name}] not exist, apply first please!"),
        ));
    };
    let mine = &topic.by_broker[conn.ep.index];
    let queue: Arc<Queue> = if queue_id < 0 {
        let open: Vec<_> = mine
            .iter()
            .map(|i| &topic.queues[*i])
            .filter(|q| writable(q.permission()))
            .collect();
        if open.is_empty() {
            return Err(refuse(
                req,
                rs::NO_PERMISSION,
                format!("the topic[{topic_name}] sending message is forbidden"),
            ));
        }
        open[topic.rr.fetch_add(1, Ordering::Relaxed) % open.len()].clone()
    } else {
        match topic.queue(conn.ep.index, queue_id) {
            Some(q) => q.clone(),
            None => {
                return Err(refuse(
                    req,
                    rs::INVALID_PARAMETER,
                    format!(
                        "queueId[{queue_id}] is illegal, topic:[{topic_name}] topicConfig.writeQueueNums:[{}] producer:[{}]",
                        mine.len(),
                        conn.peer
                    ),
                ))
            }
        }
    };
    if !writable(queue.permission()) {
        return Err(refuse(
            req,
            rs::NO_PERMISSION,
            format!("the topic[{topic_name}] sending message is forbidden"),
        ));
    }
    let body = if req.body.len() < COPY_BODIES_BELOW {
        Bytes::copy_from_slice(&req.body)
    } else {
        req.body.clone()
    };
    let header = parse_properties(header_props);
    let transactional = sys_flag & 0xC == 0x4
        || header
            .iter()
            .any(|(k, v)| k == "TRAN_MSG" && v.eq_ignore_ascii_case("true"));
    let msgs = if batch {
        if topic_name.starts_with("%RETRY%") {
            return Err(refuse(
                req,
                rs::MESSAGE_ILLEGAL,
                "batch request does not support retry group",
            ));
        }
        if transactional || header.iter().any(|(k, _)| k == "DELAY") {
            return Err(refuse(
                req,
                rs::MESSAGE_ILLEGAL,
                "batch message does not support delay or transaction",
            ));
        }
        if body.len() > cfg.max_body_size {
            return Err(refuse(
                req,
                rs::SYSTEM_ERROR,
                "RuntimeException: message body size exceeded",
            ));
        }
        decode_batch(body).map_err(|e| refuse(req, rs::SYSTEM_ERROR, e))?
    } else {
        if transactional {
            return Err(refuse(
                req,
                rs::NO_PERMISSION,
                format!(
                    "the broker[{}] sending transaction message is forbidden",
                    conn.ep.name
                ),
            ));
        }
        if body.len() > cfg.max_body_size {
            return Err(refuse(
                req,
                rs::MESSAGE_ILLEGAL,
                format!(
                    "the message body size over max value, MAX: {}",
                    cfg.max_body_size
                ),
            ));
        }
        vec![Incoming {
            body,
            props: header,
        }]
    };
    if msgs.is_empty() {
        return Err(refuse(req, rs::MESSAGE_ILLEGAL, "the batch is empty"));
    }
    let now = now_ms();
    let store_host = conn.local_addr();
    let mut due = None;
    let mut stored = Vec::with_capacity(msgs.len());
    for m in &msgs {
        if m.props
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum::<usize>()
            > i16::MAX as usize
        {
            return Err(refuse(
                req,
                rs::MESSAGE_ILLEGAL,
                "the message properties exceed 32767 bytes",
            ));
        }
        if !batch {
            due = delivery_ms(m, now);
            if due.is_some_and(|at| at.saturating_sub(now) > cfg.max_delay.as_millis() as i64) {
                return Err(refuse(
                    req,
                    rs::MESSAGE_ILLEGAL,
                    format!(
                        "timer message delay exceeds the maximum of {} s",
                        cfg.max_delay.as_secs()
                    ),
                ));
            }
        }
        stored.push(to_proto(conn, topic_name, m, sys_flag, born_ms, due));
    }
    let ids: Vec<String> = stored
        .iter()
        .map(|m| {
            m.system_properties
                .as_ref()
                .map_or(String::new(), |s| s.message_id.clone())
        })
        .collect();
    let first = if let Some(at) = due {
        let mut msg = stored.pop().expect("one message");
        // Held until due: a body of its own, not a slice keeping the request buffer alive.
        msg.body = bytes::Bytes::copy_from_slice(&msg.body);
        core.store
            .reserve(&topic, store::accounted_size(&msg), cfg)
            .map_err(|e| refuse(req, rs::SYSTEM_BUSY, format!("[OVERLOAD] {}", e.message)))?;
        core.timer.schedule(
            at,
            Delayed {
                topic: topic.clone(),
                queue: queue.clone(),
                msg,
            },
        );
        0
    } else {
        core.store
            .append(&topic, &queue, stored, cfg)
            .map_err(|e| refuse(req, rs::SYSTEM_BUSY, format!("[OVERLOAD] {}", e.message)))?
    };
    let msg_ids: Vec<String> = (0..ids.len() as u64)
        .map(|i| offset_msg_id(store_host, physical_offset(topic_name, queue.id, first + i)))
        .collect();
    let mut r = reply(req, rs::SUCCESS, None)
        .with_ext("msgId", msg_ids.join(","))
        .with_ext("queueId", queue.id)
        .with_ext("queueOffset", first)
        .with_ext(prop::MSG_REGION, REGION)
        .with_ext(prop::TRACE_ON, "true");
    let tx_id = if batch {
        parse_properties(header_props)
            .into_iter()
            .rev()
            .find(|(k, _)| k == prop::UNIQ_KEY)
            .map(|(_, v)| v)
    } else {
        ids.into_iter().next()
    };
    if let Some(tx) = tx_id {
        r.set_ext("transactionId", tx);
    }
    Ok(r)
}

/// The store's form of one message of a send.
fn to_proto(
    conn: &Conn,
    topic: &str,
    m: &Incoming,
    sys_flag: i32,
    born_ms: i64,
    due: Option<i64>,
) -> proto::Message {
    let non_empty = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
    let group = non_empty(m.get(prop::SHARDING_KEY));
    let kind = if due.is_some() {
        MessageKind::Delay
    } else if group.is_some() {
        MessageKind::Fifo
    } else {
        MessageKind::Normal
    };
    let sp = proto::SystemProperties {
        tag: non_empty(m.get(prop::TAGS)),
        keys: m
            .get(prop::KEYS)
            .map(|k| {
                k.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        message_id: non_empty(m.get(prop::UNIQ_KEY)).unwrap_or_else(crate::message_id::generate),
        body_digest: Some(body_digest(&m.body)),
        body_encoding: if sys_flag & 0x1 != 0 {
            proto::Encoding::Gzip as i32
        } else {
            proto::Encoding::Identity as i32
        },
        message_type: kind_to_proto(kind) as i32,
        born_timestamp: Some(store::timestamp_ms(born_ms)),
        born_host: conn.peer.to_string(),
        store_host: conn.ep.addr_str.clone(),
        delivery_timestamp: due.map(store::timestamp_ms),
        message_group: group,
        // What a proxy makes of the stored property (it stays a user property too).
        trace_context: non_empty(m.get(crate::trace_context::ROCKETMQ_TRACE_CONTEXT)),
        ..Default::default()
    };
    proto::Message {
        topic: Some(proto::Resource {
            resource_namespace: String::new(),
            name: topic.to_string(),
        }),
        user_properties: m
            .props
            .iter()
            .filter(|(k, _)| !k.is_empty() && !is_system(k))
            .cloned()
            .collect(),
        system_properties: Some(sp),
        body: m.body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_records_keep_their_own_properties() {
        let mut body = Vec::new();
        for (b, p) in [
            (&b"one"[..], "TAGS\u{1}a\u{2}"),
            (b"two", "KEYS\u{1}k1 k2\u{2}"),
        ] {
            let total = 22 + b.len() + p.len();
            body.extend_from_slice(&(total as i32).to_be_bytes());
            body.extend_from_slice(&[0; 8]);
            body.extend_from_slice(&7i32.to_be_bytes());
            body.extend_from_slice(&(b.len() as i32).to_be_bytes());
            body.extend_from_slice(b);
            body.extend_from_slice(&(p.len() as i16).to_be_bytes());
            body.extend_from_slice(p.as_bytes());
        }
        let msgs = decode_batch(Bytes::from(body.clone())).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(&msgs[0].body[..], b"one");
        assert_eq!(msgs[0].get("TAGS"), Some("a"));
        assert_eq!(msgs[1].get("KEYS"), Some("k1 k2"));
        assert!(decode_batch(Bytes::from(body[..30].to_vec())).is_err());
        let mut bad = body.clone();
        bad[19] = 0xFF; // body length
        assert!(decode_batch(Bytes::from(bad)).is_err());
    }

    #[test]
    fn delay_levels_and_timer_properties() {
        let m = |k: &str, v: &str| Incoming {
            body: Bytes::new(),
            props: vec![(k.to_string(), v.to_string())],
        };
        assert_eq!(delivery_ms(&m("DELAY", "3"), 1000), Some(11_000));
        assert_eq!(delivery_ms(&m("DELAY", "0"), 1000), None);
        assert_eq!(delivery_ms(&m("TIMER_DELAY_SEC", "2"), 1000), Some(3000));
        assert_eq!(delivery_ms(&m("TIMER_DELIVER_MS", "5"), 1000), Some(5));
        assert_eq!(delivery_ms(&m("WAIT", "true"), 1000), None);
        let far = delivery_ms(&m("TIMER_DELAY_SEC", &i64::MAX.to_string()), 1000);
        assert_eq!(far, Some(i64::MAX));
    }
}
