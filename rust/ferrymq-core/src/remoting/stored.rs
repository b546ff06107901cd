//! Messages as a broker stores them (the body of a pull reply), the per-message records of a
//! batch send, the properties string and the client-side unique id.
//!
//! A pull body is records back to back; each starts with its total size, so the decoder steps
//! by that size and tolerates fields it does not know. A record holds the queue position, the
//! timestamps and hosts, the body (zlib-compressed when the system flag says so) and the topic
//! and properties. Properties travel as one string, `name \u1 value \u2` per entry.
//!
//! [`StoredMessage::to_proto`] turns a record into the gRPC message model, so the readers share
//! the row layout ([`crate::rocketmq::pull::push_message`]) with the gRPC pull reader.

use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::duration::timestamp_ms;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::message_id::upper_hex;
use crate::proto;

/// Magic of stored records with a 1-byte topic length.
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of stored records with a 2-byte topic length.
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// System flag: the body is compressed.
pub const SYSFLAG_COMPRESSED: i32 = 0x1;
/// System flag: the born host is IPv6.
pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
/// System flag: the store host is IPv6.
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;
/// System flag: the body holds inner batch records.
pub const SYSFLAG_INNER_BATCH: i32 = 0x80;
/// Largest inflated body accepted.
pub const MAX_INFLATED: usize = 64 * 1024 * 1024;
/// Largest properties string a record can carry (its length is a signed 16-bit integer).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Property separating a name from its value.
pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
/// Property terminating each entry.
pub const PROPERTY_SEPARATOR: char = '\u{2}';

/// Property names ferrymq maps onto message fields or the broker manages; every other
/// property is a user property.
pub const SYSTEM_PROPERTIES: &[&str] = &[
    "KEYS",
    "TAGS",
    "UNIQ_KEY",
    "WAIT",
    "__SHARDINGKEY",
    "CLUSTER",
    "MSG_REGION",
    "TRACE_ON",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "DELAY",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "TRAN_MSG",
    "PGROUP",
    "REAL_TOPIC",
    "REAL_QID",
    "RETRY_TOPIC",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "ORIGIN_MESSAGE_ID",
    "INNER_NUM",
    "__CRC32#",
];

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredMessage {
    /// Topic as stored.
    pub topic: String,
    /// Queue id on its broker.
    pub queue_id: i32,
    /// Logical offset in the queue.
    pub queue_offset: i64,
    /// Offset in the broker's commit log.
    pub physical_offset: i64,
    /// System flag bits (compression cleared once inflated).
    pub sys_flag: i32,
    /// The producer's user flag.
    pub flag: i32,
    /// Producer-side timestamp, ms.
    pub born_timestamp_ms: i64,
    /// Broker-side timestamp, ms.
    pub store_timestamp_ms: i64,
    /// The producer's address as the broker saw it, `ip:port`.
    pub born_host: String,
    /// The broker's address, `ip:port`.
    pub store_host: String,
    /// Delivery attempts so far minus one.
    pub reconsume_times: i32,
    /// The body, inflated.
    pub body: Bytes,
    /// All properties, in stored order, duplicates resolved (last wins).
    pub properties: Vec<(String, String)>,
    /// `UNIQ_KEY` when present, else the broker's offset id (hex of store host + commit-log
    /// offset).
    pub msg_id: String,
}

impl StoredMessage {
    /// A property by name.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The tag (`TAGS`).
    pub fn tag(&self) -> Option<&str> {
        self.property("TAGS")
    }

    /// The keys (`KEYS`, split on spaces).
    pub fn keys(&self) -> Vec<String> {
        self.property("KEYS")
            .map(|k| {
                k.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The message in the gRPC model: user properties are the properties minus the system
    /// ones; keys, tag, group, id, hosts, times and the queue position become system
    /// properties. `TRACE_CONTEXT` (the gRPC `trace_context` as a broker stores it) fills the
    /// system field and stays a user property, as a proxy delivers it.
    pub fn to_proto(&self) -> proto::Message {
        let user_properties = self
            .properties
            .iter()
            .filter(|(k, _)| !SYSTEM_PROPERTIES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let message_group = self.property("__SHARDINGKEY").map(str::to_string);
        proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: self.topic.clone(),
            }),
            user_properties,
            system_properties: Some(proto::SystemProperties {
                tag: self.tag().map(str::to_string),
                keys: self.keys(),
                message_id: self.msg_id.clone(),
                body_encoding: proto::Encoding::Identity as i32,
                message_type: if message_group.is_some() {
                    proto::MessageType::Fifo as i32
                } else {
                    proto::MessageType::Normal as i32
                },
                born_timestamp: Some(timestamp_ms(self.born_timestamp_ms)),
                born_host: self.born_host.clone(),
                store_timestamp: Some(timestamp_ms(self.store_timestamp_ms)),
                store_host: self.store_host.clone(),
                queue_id: self.queue_id,
                queue_offset: Some(self.queue_offset),
                delivery_attempt: Some(self.reconsume_times.saturating_add(1)),
                message_group,
                trace_context: self
                    .property(crate::trace_context::ROCKETMQ_TRACE_CONTEXT)
                    .map(str::to_string),
                ..Default::default()
            }),
            body: self.body.clone(),
        }
    }
}

fn short(what: &str) -> Error {
    Error::protocol(format!("stored message truncated in {what}"))
}

fn need(b: &Bytes, n: usize, what: &str) -> Result<()> {
    if b.remaining() < n {
        Err(short(what))
    } else {
        Ok(())
    }
}

fn host(b: &mut Bytes, v6: bool, what: &str) -> Result<(String, Vec<u8>)> {
    let n = if v6 { 16 } else { 4 };
    need(b, n + 4, what)?;
    let raw = b.split_to(n).to_vec();
    let port = b.get_i32();
    let text = if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&raw);
        format!("[{}]:{port}", Ipv6Addr::from(a))
    } else {
        format!("{}:{port}", Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    };
    let mut id = raw;
    id.extend_from_slice(&port.to_be_bytes());
    Ok((text, id))
}

/// Inflate a compressed body: zlib, or gzip when it starts with the gzip magic. At most
/// `limit` bytes.
pub fn inflate(body: &[u8], compression: i32, limit: usize) -> Result<Bytes> {
    if compression != 0 && compression != 3 {
        return Err(Error::protocol(format!(
            "compression type {compression} not supported (only zlib)"
        )));
    }
    let mut out = Vec::with_capacity(body.len().saturating_mul(3).min(limit));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let r = if body.starts_with(&[0x1F, 0x8B]) {
        flate2::read::GzDecoder::new(body)
            .take(cap)
            .read_to_end(&mut out)
    } else {
        flate2::read::ZlibDecoder::new(body)
            .take(cap)
            .read_to_end(&mut out)
    };
    r.map_err(|e| Error::protocol("compressed message body does not inflate").with_source(e))?;
    if out.len() > limit {
        return Err(Error::protocol(format!(
            "message body inflates to more than {limit} bytes"
        )));
    }
    Ok(Bytes::from(out))
}

/// Decode a pull body into messages, in order. Inner batches are unwrapped.
pub fn decode_stored(body: &Bytes) -> Result<Vec<StoredMessage>> {
    let mut rest = body.clone();
    let mut out = Vec::new();
    while rest.has_remaining() {
        need(&rest, 4, "total size")?;
        let total = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let total = usize::try_from(total)
            .ok()
            .filter(|t| *t >= 4)
            .ok_or_else(|| Error::protocol(format!("stored message size {total} is invalid")))?;
        need(&rest, total, "record")?;
        let mut rec = rest.split_to(total);
        rec.advance(4);
        decode_record(rec, &mut out)?;
    }
    Ok(out)
}

fn decode_record(mut r: Bytes, out: &mut Vec<StoredMessage>) -> Result<()> {
    need(&r, 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8, "fixed fields")?;
    let magic = r.get_i32();
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Err(Error::protocol(format!(
            "stored message magic {:#010x} is unknown",
            magic as u32
        )));
    }
    let body_crc = r.get_i32();
    let queue_id = r.get_i32();
    let flag = r.get_i32();
    let queue_offset = r.get_i64();
    let physical_offset = r.get_i64();
    let mut sys_flag = r.get_i32();
    let born_timestamp_ms = r.get_i64();
    let (born_host, _) = host(&mut r, sys_flag & SYSFLAG_BORNHOST_V6 != 0, "born host")?;
    need(&r, 8, "store timestamp")?;
    let store_timestamp_ms = r.get_i64();
    let (store_host, mut offset_id) =
        host(&mut r, sys_flag & SYSFLAG_STOREHOST_V6 != 0, "store host")?;
    need(&r, 4 + 8 + 4, "reconsume times")?;
    let reconsume_times = r.get_i32();
    let _prepared = r.get_i64();
    let body_len = usize::try_from(r.get_i32())
        .map_err(|_| Error::protocol("stored message body length is negative"))?;
    need(&r, body_len, "body")?;
    let mut body = r.split_to(body_len);
    #[allow(clippy::cast_possible_wrap)]
    let crc = (crc32fast::hash(&body) & 0x7FFF_FFFF) as i32;
    if crc != body_crc {
        return Err(Error::protocol(format!(
            "stored message at queue offset {queue_offset}: body CRC {crc} != {body_crc}"
        )));
    }
    let topic_len = if magic == MAGIC_V1 {
        need(&r, 1, "topic length")?;
        usize::from(r.get_u8())
    } else {
        need(&r, 2, "topic length")?;
        usize::from(r.get_u16())
    };
    need(&r, topic_len, "topic")?;
    let topic = String::from_utf8(r.split_to(topic_len).to_vec())
        .map_err(|_| Error::protocol("stored topic is not UTF-8"))?;
    need(&r, 2, "properties length")?;
    let props_len = usize::from(r.get_u16());
    need(&r, props_len, "properties")?;
    let props = r.split_to(props_len);
    let properties = decode_properties(
        std::str::from_utf8(&props)
            .map_err(|_| Error::protocol("stored properties are not UTF-8"))?,
    );
    if sys_flag & SYSFLAG_COMPRESSED != 0 {
        body = inflate(&body, (sys_flag & 0x700) >> 8, MAX_INFLATED)?;
        sys_flag &= !SYSFLAG_COMPRESSED;
    }
    offset_id.extend_from_slice(&physical_offset.to_be_bytes());
    let mut m = StoredMessage {
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        sys_flag,
        flag,
        born_timestamp_ms,
        store_timestamp_ms,
        born_host,
        store_host,
        reconsume_times,
        body,
        properties,
        msg_id: upper_hex(&offset_id),
    };
    if let Some(id) = m.property("UNIQ_KEY") {
        m.msg_id = id.to_string();
    }
    if sys_flag & SYSFLAG_INNER_BATCH != 0 {
        for (i, inner) in decode_batch(&m.body)?.into_iter().enumerate() {
            let mut one = m.clone();
            one.queue_offset = m
                .queue_offset
                .saturating_add(i64::try_from(i).unwrap_or(i64::MAX));
            one.flag = inner.flag;
            one.body = inner.body;
            one.properties = inner.properties;
            one.sys_flag &= !SYSFLAG_INNER_BATCH;
            one.msg_id = one
                .property("UNIQ_KEY")
                .map_or_else(|| format!("{}-{i}", m.msg_id), str::to_string);
            out.push(one);
        }
    } else {
        out.push(m);
    }
    Ok(())
}

/// Parse a properties string. Entries without a separator or shorter than 3 characters are
/// skipped; the last of duplicate names wins.
pub fn decode_properties(s: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for entry in s.split(PROPERTY_SEPARATOR) {
        if entry.len() < 3 {
            continue;
        }
        let Some((k, v)) = entry.split_once(NAME_VALUE_SEPARATOR) else {
            continue;
        };
        match out.iter_mut().find(|(old, _)| old == k) {
            Some(slot) => slot.1 = v.to_string(),
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    out
}

/// Encode properties as `name \u1 value \u2` per entry.
pub fn encode_properties<K: AsRef<str>, V: AsRef<str>>(props: &[(K, V)]) -> String {
    let mut s = String::new();
    for (k, v) in props {
        s.push_str(k.as_ref());
        s.push(NAME_VALUE_SEPARATOR);
        s.push_str(v.as_ref());
        s.push(PROPERTY_SEPARATOR);
    }
    s
}

/// The properties a message is sent with: keys, tag, unique id, wait flag, message group,
/// delivery time and the user properties. Separator characters inside values are refused.
pub fn message_properties(m: &Message, id: &str) -> Result<String> {
    let mut p: Vec<(&str, &str)> = Vec::with_capacity(6 + m.properties().len());
    let deliver_at = m.delivery_time_millis().map(|ms| ms.to_string());
    let keys = m.keys().join(" ");
    if !keys.is_empty() {
        p.push(("KEYS", &keys));
    }
    if let Some(t) = m.tag() {
        p.push(("TAGS", t));
    }
    p.push(("UNIQ_KEY", id));
    p.push(("WAIT", "true"));
    if let Some(g) = m.message_group() {
        p.push(("__SHARDINGKEY", g));
    }
    if let Some(ms) = &deliver_at {
        p.push(("TIMER_DELIVER_MS", ms));
    }
    for (k, v) in m.properties() {
        p.push((k, v));
    }
    if let Some(tc) = m.trace_context() {
        for (k, v) in tc.pairs() {
            p.push((k, v));
        }
    }
    for (k, v) in &p {
        if k.contains(['\u{1}', '\u{2}']) || v.contains(['\u{1}', '\u{2}']) {
            return Err(Error::invalid(
                "properties",
                format!("{k:?}: the characters U+0001 and U+0002 cannot be sent over remoting"),
            ));
        }
    }
    let s = encode_properties(&p);
    if s.len() > MAX_PROPERTIES_LEN {
        return Err(Error::invalid(
            "properties",
            format!(
                "{} bytes once encoded, more than the remoting limit of {MAX_PROPERTIES_LEN}",
                s.len()
            ),
        ));
    }
    Ok(s)
}

/// The body of a batch send: one record per message with its own properties and unique id
/// (`ids[i]` belongs to `messages[i]`).
pub fn encode_batch(messages: &[Message], ids: &[String]) -> Result<Bytes> {
    if messages.len() != ids.len() {
        return Err(Error::invalid(
            "ids",
            format!("{} ids for {} messages", ids.len(), messages.len()),
        ));
    }
    let mut out = BytesMut::new();
    for (m, id) in messages.iter().zip(ids) {
        let props = message_properties(m, id)?;
        let total = 20 + m.body().len() + 2 + props.len();
        let total = i32::try_from(total)
            .map_err(|_| Error::invalid("body", "too large for one message"))?;
        out.reserve(usize::try_from(total).unwrap_or(0));
        out.put_i32(total);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(i32::try_from(m.body().len()).unwrap_or(i32::MAX));
        out.put_slice(m.body());
        out.put_u16(u16::try_from(props.len()).unwrap_or(0));
        out.put_slice(props.as_bytes());
    }
    Ok(out.freeze())
}

/// One record of a batch body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord {
    /// The user flag.
    pub flag: i32,
    /// The body.
    pub body: Bytes,
    /// The properties.
    pub properties: Vec<(String, String)>,
}

/// Decode a batch body (the inverse of [`encode_batch`]; inner batches use it too).
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchRecord>> {
    let mut rest = body.clone();
    let mut out = Vec::new();
    while rest.has_remaining() {
        need(&rest, 20, "batch record")?;
        let total = usize::try_from(rest.get_i32())
            .ok()
            .filter(|t| *t >= 22)
            .ok_or_else(|| Error::protocol("batch record size is invalid"))?;
        need(&rest, total - 4, "batch record")?;
        let mut r = rest.split_to(total - 4);
        r.advance(8);
        let flag = r.get_i32();
        let blen = usize::try_from(r.get_i32())
            .map_err(|_| Error::protocol("batch record body length is negative"))?;
        need(&r, blen, "batch record body")?;
        let body = r.split_to(blen);
        need(&r, 2, "batch record properties length")?;
        let plen = usize::from(r.get_u16());
        need(&r, plen, "batch record properties")?;
        let props = r.split_to(plen);
        let properties = decode_properties(
            std::str::from_utf8(&props)
                .map_err(|_| Error::protocol("batch record properties are not UTF-8"))?,
        );
        out.push(BatchRecord {
            flag,
            body,
            properties,
        });
    }
    Ok(out)
}

/// Fields of a stored record, for [`encode_stored`].
#[derive(Debug, Clone, Default)]
pub struct StoredRecord<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Queue id.
    pub queue_id: i32,
    /// Queue offset.
    pub queue_offset: i64,
    /// Commit-log offset.
    pub physical_offset: i64,
    /// System flag (set [`SYSFLAG_COMPRESSED`] with an already compressed body).
    pub sys_flag: i32,
    /// User flag.
    pub flag: i32,
    /// Born time, ms.
    pub born_timestamp_ms: i64,
    /// Store time, ms.
    pub store_timestamp_ms: i64,
    /// Born host IPv4 address and port.
    pub born_host: ([u8; 4], i32),
    /// Store host IPv4 address and port.
    pub store_host: ([u8; 4], i32),
    /// Reconsume times.
    pub reconsume_times: i32,
    /// Body as stored.
    pub body: &'a [u8],
    /// Properties string.
    pub properties: &'a str,
}

/// Append one stored record (magic V1, IPv4 hosts) to `out`, as a broker would return it.
pub fn encode_stored(rec: &StoredRecord<'_>, out: &mut BytesMut) -> Result<()> {
    let topic_len = u8::try_from(rec.topic.len())
        .map_err(|_| Error::invalid("topic", "longer than 255 bytes"))?;
    let props_len = u16::try_from(rec.properties.len())
        .ok()
        .filter(|l| usize::from(*l) <= MAX_PROPERTIES_LEN)
        .ok_or_else(|| Error::invalid("properties", "longer than 32767 bytes"))?;
    let body_len =
        i32::try_from(rec.body.len()).map_err(|_| Error::invalid("body", "too large"))?;
    let total = 88 + rec.body.len() + 1 + rec.topic.len() + 2 + rec.properties.len();
    let total = i32::try_from(total).map_err(|_| Error::invalid("body", "too large"))?;
    let sys_flag = rec.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    out.put_i32(total);
    out.put_i32(MAGIC_V1);
    #[allow(clippy::cast_possible_wrap)]
    out.put_i32((crc32fast::hash(rec.body) & 0x7FFF_FFFF) as i32);
    out.put_i32(rec.queue_id);
    out.put_i32(rec.flag);
    out.put_i64(rec.queue_offset);
    out.put_i64(rec.physical_offset);
    out.put_i32(sys_flag);
    out.put_i64(rec.born_timestamp_ms);
    out.put_slice(&rec.born_host.0);
    out.put_i32(rec.born_host.1);
    out.put_i64(rec.store_timestamp_ms);
    out.put_slice(&rec.store_host.0);
    out.put_i32(rec.store_host.1);
    out.put_i32(rec.reconsume_times);
    out.put_i64(0);
    out.put_i32(body_len);
    out.put_slice(rec.body);
    out.put_u8(topic_len);
    out.put_slice(rec.topic.as_bytes());
    out.put_u16(props_len);
    out.put_slice(rec.properties.as_bytes());
    Ok(())
}

static COUNTER: AtomicU16 = AtomicU16::new(0);
/// This process's id (high 32 bits) and random number (low 32 bits) as the ids carry them; made
/// again in a forked child, whose ids must differ from its parent's.
static PROCESS: AtomicU64 = AtomicU64::new(0);

/// A new unique message id in the `UNIQ_KEY` layout: 32 upper-case hex characters of host (4
/// bytes, here the low bytes of the host's hardware address), process id (2), a per-process
/// random number (4), milliseconds since the start of the current UTC month (4) and a counter
/// (2).
pub fn new_unique_id() -> String {
    new_unique_ids(1).pop().unwrap_or_default()
}

/// `n` new unique message ids (see [`new_unique_id`]), the process checked once for them all.
pub fn new_unique_ids(n: usize) -> Vec<String> {
    let mut prefix = [0u8; 10];
    prefix[..4].copy_from_slice(&crate::message_id::host_mac()[2..]);
    let (pid, random) = process_part();
    #[allow(clippy::cast_possible_truncation)]
    prefix[4..6].copy_from_slice(&(pid as u16).to_be_bytes());
    prefix[6..].copy_from_slice(&random.to_be_bytes());
    let mut raw = [0u8; 16];
    raw[..10].copy_from_slice(&prefix);
    (0..n)
        .map(|_| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            raw[10..14].copy_from_slice(
                &(millis_in_month(crate::duration::now_ms()) as u32).to_be_bytes(),
            );
            raw[14..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
            upper_hex(&raw)
        })
        .collect()
}

/// This process's id and random number, drawn on the first call in each process: a forked child
/// has a new id, and its random number is drawn again (its random generator's state is a copy of
/// its parent's, so the time is mixed in).
fn process_part() -> (u32, u32) {
    let pid = std::process::id();
    let seen = PROCESS.load(Ordering::Relaxed);
    if seen >> 32 == u64::from(pid) {
        #[allow(clippy::cast_possible_truncation)]
        return (pid, seen as u32);
    }
    let random = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(fastrand::u32(..));
        h.write_u32(pid);
        h.write_i64(crate::duration::now_ms());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        #[allow(clippy::cast_possible_truncation)]
        let r = h.finish() as u32;
        r
    };
    let mine = (u64::from(pid) << 32) | u64::from(random);
    match PROCESS.compare_exchange(seen, mine, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => (pid, random),
        // Another thread of this process drew first: use its number, as every later call will.
        #[allow(clippy::cast_possible_truncation)]
        Err(other) if other >> 32 == u64::from(pid) => (pid, other as u32),
        Err(_) => (pid, random),
    }
}

/// Milliseconds since 00:00 UTC on the first day of the month of `ms`.
fn millis_in_month(ms: i64) -> i64 {
    const DAY: i64 = 86_400_000;
    let days = ms.div_euclid(DAY);
    // Day of month from the civil calendar (eras of 400 years, March-based years).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day_of_month = doy - (153 * mp + 2) / 5 + 1;
    ms - (days - (day_of_month - 1)) * DAY
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, body: &[u8], props: &str, sys_flag: i32) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_stored(
            &StoredRecord {
                topic: "orders",
                queue_id: 3,
                queue_offset: offset,
                physical_offset: 0x100,
                sys_flag,
                flag: 9,
                born_timestamp_ms: 1_000,
                store_timestamp_ms: 2_000,
                born_host: ([10, 0, 0, 1], 5555),
                store_host: ([127, 0, 0, 1], 10911),
                reconsume_times: 1,
                body,
                properties: props,
            },
            &mut out,
        )
        .unwrap();
        out.to_vec()
    }

    #[test]
    fn decodes_records() {
        let mut all = record(
            7,
            b"one",
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}t\u{2}a\u{1}b\u{2}",
            0,
        );
        let z = {
            use std::io::Write;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
            e.write_all(&[b'x'; 5000]).unwrap();
            e.finish().unwrap()
        };
        all.extend(record(8, &z, "UNIQ_KEY\u{1}ABC\u{2}", 0x301));
        let msgs = decode_stored(&Bytes::from(all)).unwrap();
        assert_eq!(msgs.len(), 2);
        let m = &msgs[0];
        assert_eq!((m.queue_id, m.queue_offset, m.flag), (3, 7, 9));
        assert_eq!(m.born_host, "10.0.0.1:5555");
        assert_eq!(m.store_host, "127.0.0.1:10911");
        assert_eq!(m.msg_id, "7F00000100002A9F0000000000000100");
        assert_eq!(m.keys(), vec!["k1", "k2"]);
        assert_eq!(&m.body[..], b"one");
        assert_eq!(msgs[1].body.len(), 5000);
        assert_eq!(msgs[1].msg_id, "ABC");
        assert_eq!(msgs[1].sys_flag & SYSFLAG_COMPRESSED, 0);

        let p = m.to_proto();
        let sp = p.system_properties.as_ref().unwrap();
        assert_eq!(sp.tag.as_deref(), Some("t"));
        assert_eq!(sp.queue_offset, Some(7));
        assert_eq!(sp.delivery_attempt, Some(2));
        assert_eq!(p.user_properties.len(), 1);
        assert_eq!(p.user_properties["a"], "b");
        let mut cols = crate::columnar::MessageColumns::new();
        crate::rocketmq::pull::push_message(&mut cols, &p, "orders", 7).unwrap();
        assert_eq!(cols.len(), 1);
    }

    #[test]
    fn bad_crc_and_compression_are_errors() {
        let mut r = record(1, b"abc", "", 0);
        let n = r.len();
        r[n - 10] ^= 1; // the last body byte: topic length, "orders" and props length follow
        assert!(decode_stored(&Bytes::from(r)).is_err());
        let r = record(1, b"abc", "", 0x101);
        let e = decode_stored(&Bytes::from(r)).unwrap_err();
        assert!(e.message().contains("compression type 1"), "{e}");
    }

    #[test]
    fn batch_round_trip() {
        let msgs: Vec<Message> = (0..3)
            .map(|i| {
                Message::builder("orders", format!("body{i}"))
                    .keys([format!("k{i}"), "x".into()])
                    .tag(format!("t{i}"))
                    .property("p", format!("v{i}"))
                    .build()
                    .unwrap()
            })
            .collect();
        let ids: Vec<String> = (0..3).map(|_| new_unique_id()).collect();
        let body = encode_batch(&msgs, &ids).unwrap();
        let recs = decode_batch(&body).unwrap();
        assert_eq!(recs.len(), 3);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(&r.body[..], format!("body{i}").as_bytes());
            let get = |k: &str| r.properties.iter().find(|(n, _)| n == k).unwrap().1.clone();
            assert_eq!(get("KEYS"), format!("k{i} x"));
            assert_eq!(get("TAGS"), format!("t{i}"));
            assert_eq!(get("UNIQ_KEY"), ids[i]);
            assert_eq!(get("p"), format!("v{i}"));
        }
        assert!(encode_batch(&msgs, &ids[..1]).is_err());
    }

    #[test]
    fn properties_and_ids() {
        let p = decode_properties("a\u{1}1\u{2}x\u{2}b\u{1}\u{2}a\u{1}2\u{2}");
        assert_eq!(p, vec![("a".into(), "2".into())]);
        assert_eq!(encode_properties(&[("a", "1")]), "a\u{1}1\u{2}");
        let a = new_unique_id();
        let b = new_unique_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        // 2024-03-05T01:02:03.004Z is 4 days, 1 h, 2 min, 3.004 s into March.
        assert_eq!(
            millis_in_month(1_709_600_523_004),
            ((4 * 24 + 1) * 60 + 2) * 60_000 + 3_004
        );
    }
}
