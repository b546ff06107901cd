//! SendMessage rules: what a message must look like (the proxy's checks and their status
//! codes), which kind it is (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY — it must match the
//! topic's type), and which queue of the called endpoint stores it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::config::BrokerConfig;
use super::service_wire::st;
use super::store::{self, writable, Queue, Topic};
use crate::message::{MessageKind, RESERVED_PROPERTIES};
use crate::proto;
use crate::status as code;

/// Longest message group accepted (`maxMessageGroupSize`).
const MAX_MESSAGE_GROUP: usize = 64;

/// Check one message of a send and tell its kind.
pub(crate) fn validate(
    cfg: &BrokerConfig,
    max_body_size: usize,
    topic: &Topic,
    m: &proto::Message,
    now: i64,
) -> Result<MessageKind, proto::Status> {
    let Some(sp) = m.system_properties.as_ref() else {
        return Err(st(code::BAD_REQUEST, "system_properties are required"));
    };
    if sp.message_id.is_empty() {
        return Err(st(
            code::ILLEGAL_MESSAGE_ID,
            "message_id is required (the client generates it)",
        ));
    }
    if m.body.is_empty() {
        return Err(st(code::MESSAGE_BODY_EMPTY, "the message body is empty"));
    }
    if m.body.len() > max_body_size {
        return Err(st(
            code::MESSAGE_BODY_TOO_LARGE,
            format!(
                "body of {} bytes exceeds the limit of {} bytes",
                m.body.len(),
                max_body_size
            ),
        ));
    }
    if let Some(tag) = &sp.tag {
        if tag.trim().is_empty() || tag.contains('|') {
            return Err(st(40004, format!("illegal tag {tag:?}")));
        }
    }
    if sp.keys.iter().any(|k| k.trim().is_empty()) {
        return Err(st(40005, "message keys must not be blank"));
    }
    let group = sp.message_group.as_deref().filter(|g| !g.is_empty());
    if let Some(g) = group {
        if g.len() > MAX_MESSAGE_GROUP || g.trim().is_empty() {
            return Err(st(
                code::ILLEGAL_MESSAGE_GROUP,
                format!("illegal message group (at most {MAX_MESSAGE_GROUP} bytes)"),
            ));
        }
    }
    let mut props = 0usize;
    for (k, v) in &m.user_properties {
        if k.is_empty() || RESERVED_PROPERTIES.contains(&k.as_str()) {
            return Err(st(
                40007,
                format!("property key {k:?} is empty or reserved by RocketMQ"),
            ));
        }
        props += k.len() + v.len();
    }
    if props > cfg.max_properties_size {
        return Err(st(
            code::MESSAGE_PROPERTIES_TOO_LARGE,
            format!(
                "user properties of {props} bytes exceed {} bytes",
                cfg.max_properties_size
            ),
        ));
    }
    let tx = sp.message_type == proto::MessageType::Transaction as i32;
    let delay = sp.delivery_timestamp.is_some();
    let prio = sp.priority.is_some();
    let kinds = [tx, group.is_some(), delay, prio]
        .iter()
        .filter(|b| **b)
        .count();
    if kinds > 1 {
        return Err(st(
            code::MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a message can be only one of TRANSACTION, FIFO (message group), DELAY \
             (delivery time) and PRIORITY",
        ));
    }
    let kind = if tx {
        MessageKind::Transaction
    } else if group.is_some() {
        MessageKind::Fifo
    } else if delay {
        MessageKind::Delay
    } else if prio {
        MessageKind::Priority
    } else {
        MessageKind::Normal
    };
    let ty = topic.topic_type();
    if !ty.accepts(kind) {
        return Err(st(
            code::MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            format!(
                "topic {:?} accepts {} messages, this message is {}",
                topic.name,
                ty.as_str(),
                kind.as_str()
            ),
        ));
    }
    if let Some(ts) = &sp.delivery_timestamp {
        let due = store::ms_of(ts);
        if due - now > cfg.max_delay.as_millis() as i64 {
            return Err(st(
                code::ILLEGAL_DELIVERY_TIME,
                format!(
                    "delivery time is more than {} s ahead",
                    cfg.max_delay.as_secs()
                ),
            ));
        }
    }
    Ok(kind)
}

/// Pick the queue of a send on this endpoint.
pub(crate) fn pick_queue(
    topic: &Topic,
    endpoint: usize,
    first: &proto::Message,
) -> Option<Arc<Queue>> {
    let sp = first.system_properties.as_ref();
    let wanted = sp.map_or(-1, |s| s.queue_id);
    if let Some(q) = topic.queue(endpoint, wanted) {
        if writable(q.permission()) {
            return Some(q.clone());
        }
    }
    let mine: Vec<&Arc<Queue>> = topic.by_broker[endpoint]
        .iter()
        .map(|i| &topic.queues[*i])
        .filter(|q| writable(q.permission()))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let i = match sp
        .and_then(|s| s.message_group.as_deref())
        .filter(|g| !g.is_empty())
    {
        Some(g) => crate::selector::fifo_queue_index(g, mine.len()),
        None => topic.rr.fetch_add(1, Ordering::Relaxed) % mine.len(),
    };
    Some(mine[i].clone())
}

/// The body digest a proxy attaches to every delivered message: MD5, upper-case hex (32
/// digits). Both official clients recompute it in that exact form; a CRC32 would not do, since
/// the Java client writes it without leading zeros and the Python client with them.
pub(crate) fn body_digest(body: &[u8]) -> proto::Digest {
    use md5::{Digest as _, Md5};
    proto::Digest {
        r#type: proto::DigestType::Md5 as i32,
        checksum: upper_hex(&Md5::digest(body)),
    }
}

/// `bytes` in upper-case hex, two digits each.
pub(crate) fn upper_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xF)]])
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_upper_case_md5() {
        let d = body_digest(b"hello");
        assert_eq!(d.r#type, proto::DigestType::Md5 as i32);
        assert_eq!(d.checksum, "5D41402ABC4B2A76B9719D911017C592");
        // Leading zero digits are kept: the digest always has 32.
        assert_eq!(
            body_digest(b"").checksum,
            "D41D8CD98F00B204E9800998ECF8427E"
        );
    }
}
