//! The compact form of a stored message: [`Stored`], its record bytes and the per-queue
//! [`Arena`] that holds them.
//!
//! A message is stored as one record, a byte string laid out as
//!
//! ```text
//! tag length + 1 (0: no tag) | tag | message id length | message id | meta length | meta | body
//! ```
//!
//! (lengths are protobuf varints). `meta` is the protobuf encoding of the `proto::Message` without
//! what the record keeps elsewhere or the store knows anyway: the body, tag and message id (in the
//! record, readable without decoding: filters and lookups need them), the topic name (the topic
//! the message is stored in; only a non-empty namespace is kept), the queue id, offset and store
//! time (the queue and [`Stored`] have them) and the per-delivery fields (receipt handle,
//! delivery attempt, invisible duration). A delivery decodes `meta` and puts those fields back
//! ([`Stored::to_message`]); the body is a slice of the record, never copied.
//!
//! Records of up to [`OWN_ALLOCATION_ABOVE`] bytes are written one after the other into the
//! queue's current chunk (an [`Arena`]); a chunk is freed when the last record in it is dropped.
//! Queues evict oldest first, so chunks are freed in the order they were filled. Larger records
//! get an allocation of their own. Nothing keeps the receive buffer of a request alive.
//!
//! Memory held per message (what [`accounted`] counts against the topic's bound): the record,
//! plus [`MESSAGE_OVERHEAD`] for the `Arc<Stored>` (80 bytes), its slot in the queue's deque
//! (8 bytes, up to 16 while the deque doubles) and the amortized unused chunk tails; a record
//! with its own allocation also counts the allocator's rounding (at most an eighth of its size)
//! and the reference count its first shared slice allocates.

use bytes::{Buf, Bytes, BytesMut};
use prost::Message as _;

use crate::proto;

/// A protobuf timestamp from milliseconds since the epoch.
pub fn timestamp_ms(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// Bytes counted per stored message besides its record (see the module documentation).
pub const MESSAGE_OVERHEAD: usize = 128;

/// Records larger than this get their own allocation instead of a place in the queue's chunk.
pub const OWN_ALLOCATION_ABOVE: usize = 4 * 1024;

/// Extra bytes counted for a record with its own allocation: the shared reference count that
/// slicing it allocates (a chunk's is shared by all its records).
const OWN_ALLOCATION_EXTRA: usize = 32;

/// Size of a queue's first chunk; each next one is twice the previous, up to [`LAST_CHUNK`].
const FIRST_CHUNK: usize = 4 * 1024;

/// Largest chunk: at most `OWN_ALLOCATION_ABOVE` of it stays unused when a record does not fit.
const LAST_CHUNK: usize = 256 * 1024;

/// The bytes a record of `len` bytes holds, as counted against its topic's memory bound.
pub fn accounted(len: usize) -> usize {
    if len > OWN_ALLOCATION_ABOVE {
        len + len / 8 + OWN_ALLOCATION_EXTRA + MESSAGE_OVERHEAD
    } else {
        len + MESSAGE_OVERHEAD
    }
}

/// The accounted size `m` will have once stored (see [`accounted`]).
pub fn accounted_size(m: &proto::Message) -> usize {
    accounted(record_len(m))
}

/// Length of a varint.
fn varint_len(v: u64) -> usize {
    // 64-bit targets only: `usize` holds any `u64`.
    prost::length_delimiter_len(v as usize)
}

/// Length of a length-delimited field with a one-byte key.
fn delimited(len: usize) -> usize {
    1 + prost::length_delimiter_len(len) + len
}

/// What the record of `m` takes besides the meta: the tag, id and their lengths.
fn head_len(tag: Option<&str>, id: &str) -> usize {
    let tag_len = tag.map_or(0, |t| t.len() + 1);
    varint_len(tag_len as u64) + tag.map_or(0, str::len) + varint_len(id.len() as u64) + id.len()
}

/// Exact length of the record `encode` writes for `m`, computed without encoding it.
pub fn record_len(m: &proto::Message) -> usize {
    let sp = m.system_properties.as_ref();
    let tag = sp.and_then(|s| s.tag.as_deref());
    let id = sp.map_or("", |s| s.message_id.as_str());
    let meta = meta_len(m);
    head_len(tag, id) + varint_len(meta as u64) + meta + m.body.len()
}

/// Length of the meta of `m`: its encoding less the fields the record keeps elsewhere.
fn meta_len(m: &proto::Message) -> usize {
    let mut n = 0;
    if let Some(r) = &m.topic {
        if !r.resource_namespace.is_empty() {
            n += delimited(delimited(r.resource_namespace.len()));
        }
    }
    n += user_properties_len(&m.user_properties);
    if let Some(sp) = &m.system_properties {
        n += delimited(sp.encoded_len() - stripped_len(sp));
    }
    n
}

/// Length of the map field of user properties (each entry a nested message; prost omits empty
/// keys and values in an entry).
fn user_properties_len(props: &std::collections::HashMap<String, String>) -> usize {
    props
        .iter()
        .map(|(k, v)| {
            let entry = if k.is_empty() { 0 } else { delimited(k.len()) }
                + if v.is_empty() { 0 } else { delimited(v.len()) };
            delimited(entry)
        })
        .sum()
}

/// The encoded length of the system properties that the meta leaves out.
fn stripped_len(sp: &proto::SystemProperties) -> usize {
    let int = |v: i64| 1 + varint_len(v as u64);
    let mut n = 0;
    if let Some(t) = &sp.tag {
        n += delimited(t.len());
    }
    if !sp.message_id.is_empty() {
        n += delimited(sp.message_id.len());
    }
    if let Some(ts) = &sp.store_timestamp {
        n += delimited(ts.encoded_len());
    }
    if let Some(h) = &sp.receipt_handle {
        n += delimited(h.len());
    }
    if sp.queue_id != 0 {
        n += int(i64::from(sp.queue_id));
    }
    if let Some(o) = sp.queue_offset {
        n += int(o);
    }
    if let Some(d) = &sp.invisible_duration {
        n += delimited(d.encoded_len());
    }
    if let Some(a) = sp.delivery_attempt {
        // Field 16: a two-byte key.
        n += 1 + int(i64::from(a));
    }
    n
}

/// Write the record of `m` (exactly [`record_len`] bytes) to `out`.
fn encode(mut m: proto::Message, out: &mut BytesMut) {
    let body = std::mem::take(&mut m.body);
    let mut tag = None;
    let mut id = String::new();
    if let Some(sp) = m.system_properties.as_mut() {
        tag = sp.tag.take();
        id = std::mem::take(&mut sp.message_id);
        sp.store_timestamp = None;
        sp.receipt_handle = None;
        sp.queue_id = 0;
        sp.queue_offset = None;
        sp.invisible_duration = None;
        sp.delivery_attempt = None;
    }
    m.topic = m
        .topic
        .take()
        .filter(|r| !r.resource_namespace.is_empty())
        .map(|r| proto::Resource {
            resource_namespace: r.resource_namespace,
            name: String::new(),
        });
    let put_len = |n: usize, out: &mut BytesMut| {
        prost::encode_length_delimiter(n, out).expect("a BytesMut grows");
    };
    put_len(tag.as_ref().map_or(0, |t| t.len() + 1), out);
    if let Some(t) = &tag {
        out.extend_from_slice(t.as_bytes());
    }
    put_len(id.len(), out);
    out.extend_from_slice(id.as_bytes());
    put_len(m.encoded_len(), out);
    m.encode(out).expect("a BytesMut grows");
    out.extend_from_slice(&body);
}

/// The chunks one queue writes its records into.
#[derive(Debug, Default)]
pub struct Arena {
    /// The unused rest of the current chunk.
    chunk: BytesMut,
    /// Capacity of the last chunk allocated.
    last: usize,
}

/// The record of `m`, `len` bytes long, in an allocation of its own.
fn own(m: proto::Message, len: usize) -> Bytes {
    let mut own = BytesMut::with_capacity(len);
    encode(m, &mut own);
    own.freeze()
}

impl Arena {
    /// Store the record of `m`, `len` bytes long (its [`record_len`]).
    fn put(&mut self, m: proto::Message, len: usize) -> Bytes {
        if len > OWN_ALLOCATION_ABOVE {
            return own(m, len);
        }
        if self.chunk.capacity() < len {
            self.last = (self.last * 2).clamp(FIRST_CHUNK, LAST_CHUNK);
            self.chunk = BytesMut::with_capacity(self.last);
        }
        encode(m, &mut self.chunk);
        self.chunk.split().freeze()
    }
}

/// One stored message. Immutable once stored; shared by every delivery.
#[derive(Debug)]
pub struct Stored {
    /// The offset in its queue.
    pub offset: u64,
    /// Store time, milliseconds since the Unix epoch.
    pub store_ms: i64,
    /// The key a FIFO receive holds the message's group back by: a hash of the message group
    /// (if any), computed once at store time, so that scanning neither allocates nor hashes
    /// strings.
    pub group_key: Option<u64>,
    /// The record (see the module documentation).
    record: Bytes,
}

/// A record cut into its parts.
struct Parts<'a> {
    tag: Option<&'a [u8]>,
    id: &'a [u8],
    meta: &'a [u8],
    /// Where the body starts in the record.
    body_at: usize,
}

impl Stored {
    /// Store `m` at `offset` (system properties filled in, except those the record leaves
    /// out), writing its record into `arena`.
    pub fn store(offset: u64, m: proto::Message, store_ms: i64, arena: &mut Arena) -> Self {
        Self::with(offset, m, store_ms, |m, len| arena.put(m, len))
    }

    /// A message stored on its own, in an allocation of its own (tests, inspection).
    pub fn new(offset: u64, m: proto::Message, store_ms: i64) -> Self {
        Self::with(offset, m, store_ms, own)
    }

    fn with(
        offset: u64,
        m: proto::Message,
        store_ms: i64,
        put: impl FnOnce(proto::Message, usize) -> Bytes,
    ) -> Self {
        let group_key = m
            .system_properties
            .as_ref()
            .and_then(|s| s.message_group.as_deref())
            .filter(|g| !g.is_empty())
            .map(|g| {
                use std::hash::{BuildHasher, BuildHasherDefault};
                BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                    .hash_one(g)
            });
        let len = record_len(&m);
        let record = put(m, len);
        debug_assert_eq!(record.len(), len, "record_len must match the encoding");
        Self {
            offset,
            store_ms,
            group_key,
            record,
        }
    }

    /// The record's length in bytes.
    pub fn record_len(&self) -> usize {
        self.record.len()
    }

    /// The bytes counted against the topic's memory bound.
    pub fn size(&self) -> usize {
        accounted(self.record.len())
    }

    fn parts(&self) -> Parts<'_> {
        let all: &[u8] = &self.record;
        let mut rest = all;
        // The record was written by `encode`: its lengths are in range. A damaged one reads
        // as empty parts rather than a panic.
        let take = |rest: &mut &[u8]| -> usize {
            prost::decode_length_delimiter(&mut *rest)
                .unwrap_or(0)
                .min(rest.len())
        };
        let tag_len = take(&mut rest);
        let tag = (tag_len > 0).then(|| &rest[..tag_len - 1]);
        rest.advance(tag_len.saturating_sub(1));
        let id_len = take(&mut rest);
        let id = &rest[..id_len];
        rest.advance(id_len);
        let meta_len = take(&mut rest);
        let meta = &rest[..meta_len];
        rest.advance(meta_len);
        Parts {
            tag,
            id,
            meta,
            body_at: all.len() - rest.len(),
        }
    }

    /// The message id.
    pub fn message_id(&self) -> &str {
        std::str::from_utf8(self.parts().id).unwrap_or("")
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.parts().tag.and_then(|t| std::str::from_utf8(t).ok())
    }

    /// The body (a slice of the record).
    pub fn body(&self) -> Bytes {
        self.record.slice(self.parts().body_at..)
    }

    /// Length of the body.
    pub fn body_len(&self) -> usize {
        self.record.len() - self.parts().body_at
    }

    /// The message as stored in queue `queue_id` of `topic`: everything the producer sent and
    /// the broker added at store time (queue id, offset, store time), no per-delivery fields.
    pub fn to_message(&self, topic: &str, queue_id: i32) -> proto::Message {
        let p = self.parts();
        let mut m = proto::Message::decode(p.meta).unwrap_or_default();
        let namespace = m
            .topic
            .take()
            .map(|r| r.resource_namespace)
            .unwrap_or_default();
        m.topic = Some(proto::Resource {
            resource_namespace: namespace,
            name: topic.to_string(),
        });
        if let Some(sp) = m.system_properties.as_mut() {
            sp.tag = p.tag.map(|t| String::from_utf8_lossy(t).into_owned());
            sp.message_id = String::from_utf8_lossy(p.id).into_owned();
            sp.queue_id = queue_id;
            sp.queue_offset = Some(self.offset as i64);
            sp.store_timestamp = Some(timestamp_ms(self.store_ms));
        }
        m.body = self.record.slice(p.body_at..);
        m
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn full() -> proto::Message {
        proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: "ns".into(),
                name: "orders".into(),
            }),
            user_properties: HashMap::from([
                ("k".to_string(), "v".to_string()),
                ("empty".to_string(), String::new()),
            ]),
            system_properties: Some(proto::SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_id: "01ABCDEF".into(),
                body_digest: Some(proto::Digest {
                    r#type: proto::DigestType::Crc32 as i32,
                    checksum: "3610A686".into(),
                }),
                message_type: proto::MessageType::Fifo as i32,
                born_timestamp: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 123_000_000,
                }),
                born_host: "10.0.0.1".into(),
                store_host: "127.0.0.1:8081".into(),
                store_timestamp: Some(prost_types::Timestamp {
                    seconds: 5,
                    nanos: 0,
                }),
                receipt_handle: Some("handle".into()),
                queue_id: -3,
                queue_offset: Some(i64::MAX),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                delivery_attempt: Some(-1),
                message_group: Some("g1".into()),
                ..Default::default()
            }),
            body: Bytes::from_static(b"hello"),
        }
    }

    fn bare() -> proto::Message {
        proto::Message {
            topic: None,
            user_properties: HashMap::new(),
            system_properties: None,
            body: Bytes::new(),
        }
    }

    #[test]
    fn record_len_is_exact() {
        let mut with_empty_tag = full();
        with_empty_tag.system_properties.as_mut().unwrap().tag = Some(String::new());
        let mut no_ns = full();
        no_ns.topic.as_mut().unwrap().resource_namespace.clear();
        let mut big = full();
        big.body = Bytes::from(vec![7u8; 10_000]);
        big.system_properties.as_mut().unwrap().message_id = "x".repeat(200);
        for m in [full(), bare(), with_empty_tag, no_ns, big] {
            let len = record_len(&m);
            let mut out = BytesMut::new();
            encode(m, &mut out);
            assert_eq!(out.len(), len);
        }
    }

    #[test]
    fn a_stored_message_reads_back_with_its_store_fields() {
        let s = Stored::new(42, full(), 5_250);
        assert_eq!(s.tag(), Some("TagA"));
        assert_eq!(s.message_id(), "01ABCDEF");
        assert_eq!(s.body(), Bytes::from_static(b"hello"));
        assert_eq!(s.body_len(), 5);
        assert!(s.group_key.is_some());
        let m = s.to_message("orders", 3);
        let mut want = full();
        let sp = want.system_properties.as_mut().unwrap();
        sp.queue_id = 3;
        sp.queue_offset = Some(42);
        sp.store_timestamp = Some(timestamp_ms(5_250));
        sp.receipt_handle = None;
        sp.invisible_duration = None;
        sp.delivery_attempt = None;
        assert_eq!(m, want);
        // A message without system properties or topic reads back as one in the topic.
        let b = Stored::new(0, bare(), 0);
        assert_eq!((b.tag(), b.message_id(), b.body_len()), (None, "", 0));
        assert_eq!(b.to_message("t", 0).topic.unwrap().name, "t");
    }

    #[test]
    fn small_records_share_chunks_and_large_ones_do_not() {
        let mut arena = Arena::default();
        let a = Stored::store(0, full(), 0, &mut arena);
        let b = Stored::store(1, full(), 0, &mut arena);
        // Consecutive in one chunk.
        let end_a = a.record.as_ptr() as usize + a.record.len();
        assert_eq!(end_a, b.record.as_ptr() as usize);
        let mut big = full();
        big.body = Bytes::from(vec![1u8; OWN_ALLOCATION_ABOVE]);
        let c = Stored::store(2, big, 0, &mut arena);
        assert!(c.record_len() > OWN_ALLOCATION_ABOVE);
        assert_eq!(c.size(), accounted(c.record_len()));
        assert!(c.size() > c.record_len() + c.record_len() / 8);
        // The next small one still goes after `b` in the chunk.
        let d = Stored::store(3, full(), 0, &mut arena);
        assert_eq!(
            b.record.as_ptr() as usize + b.record.len(),
            d.record.as_ptr() as usize
        );
        assert_eq!(a.size(), a.record_len() + MESSAGE_OVERHEAD);
    }
}
