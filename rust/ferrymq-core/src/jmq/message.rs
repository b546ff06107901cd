//! The JMQ4 MESSAGE (the broker's store format, reference §6) and the batch body (§6.4).
//!
//! ```text
//! length INT | partition SHORT | index LONG | term INT | magic SHORT 0x1234 | sysCode SHORT |
//! priority BYTE | clientIp 16B | sendTime LONG | storeTime INT | bodyCRC LONG | flag SHORT |
//! body BYTES | businessId S1 | attributes S2 | extension BYTES | app S1
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{put_bytes, put_s1, put_s2, Reader};
use super::compress::{self, Compression};
use crate::error::{Error, Result};

/// The message magic (read and ignored by the server).
pub const MESSAGE_MAGIC: i16 = 0x1234;
/// Fixed bytes of a MESSAGE besides body, businessId, attributes, extension and app.
pub const FIXED_LEN: usize = 73;
/// Longest businessId the server accepts (in characters; ferrymq checks bytes, ≤ 127 for S1).
pub const MAX_BUSINESS_ID: usize = 100;
/// The server's default body limit (`produce.body.length`).
pub const DEFAULT_MAX_BODY: usize = 3 * 1024 * 1024;
/// The retry partition (`Partition.RETRY_PARTITION_ID`).
pub const RETRY_PARTITION: i16 = i16::MAX;

/// Where a message came from (sysCode bits 2–3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Source {
    /// Legacy JMQ.
    Jmq = 0,
    /// The Kafka protocol (the body is a Kafka record).
    Kafka = 1,
    /// MQTT.
    Mqtt = 2,
    /// JoyQueue (what ferrymq sends).
    JoyQueue = 3,
}

/// The `sysCode` bits (§6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SysCode {
    /// Bit 0.
    pub compressed: bool,
    /// Bit 1.
    pub ordered: bool,
    /// Bits 2–3.
    pub source: Source,
    /// Bits 4–6.
    pub compression: Compression,
    /// Bit 7: 1 = IPv4.
    pub ipv4: bool,
    /// Bits 8–11 (1 for the current layout).
    pub version: u8,
    /// Bit 12.
    pub batch: bool,
}

impl Default for SysCode {
    fn default() -> Self {
        SysCode {
            compressed: false,
            ordered: false,
            source: Source::JoyQueue,
            compression: Compression::None,
            ipv4: true,
            version: 1,
            batch: false,
        }
    }
}

impl SysCode {
    /// Pack into the wire SHORT.
    pub fn to_bits(self) -> i16 {
        let v = u16::from(self.compressed)
            | u16::from(self.ordered) << 1
            | (self.source as u16) << 2
            | (self.compression as u16) << 4
            | u16::from(self.ipv4) << 7
            | u16::from(self.version & 0xF) << 8
            | u16::from(self.batch) << 12;
        v as i16
    }

    /// Unpack; compression ids 4–7 are a protocol error (the server closes the connection).
    pub fn from_bits(bits: i16) -> Result<SysCode> {
        let v = bits as u16;
        Ok(SysCode {
            compressed: v & 1 != 0,
            ordered: v & 2 != 0,
            source: match (v >> 2) & 3 {
                0 => Source::Jmq,
                1 => Source::Kafka,
                2 => Source::Mqtt,
                _ => Source::JoyQueue,
            },
            compression: Compression::from_id(((v >> 4) & 7) as u8)?,
            ipv4: v & 0x80 != 0,
            version: ((v >> 8) & 0xF) as u8,
            // The reader tests `(sysCode >> 12) == 1`: bits 13–15 must be clear.
            batch: (v >> 12) == 1,
        })
    }
}

/// A MESSAGE as carried on the wire, in both directions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireMessage {
    /// Produce: the target partition or -1; fetch: the actual partition.
    pub partition: i16,
    /// Set by the store.
    pub index: i64,
    /// Set by the store.
    pub term: i32,
    /// The sysCode bits.
    pub sys_code: SysCode,
    /// Priority.
    pub priority: i8,
    /// `[port_lo, port_hi, a, b, c, d, 0…]` for IPv4.
    pub client_ip: [u8; 16],
    /// Epoch milliseconds.
    pub send_time: i64,
    /// Milliseconds from `send_time` to the store write.
    pub store_time: i32,
    /// CRC-32 of the body as sent (after compression), in the low 32 bits.
    pub body_crc: i64,
    /// User flag; the number of inner messages for a batch.
    pub flag: i16,
    /// The body as sent (possibly compressed, possibly a batch body).
    pub body: Bytes,
    /// S1, at most 127 bytes.
    pub business_id: Option<String>,
    /// Java properties text (S2).
    pub attributes: Option<String>,
    /// Opaque extension.
    pub extension: Bytes,
    /// The producing app (S1).
    pub app: Option<String>,
}

/// Encode a socket address as the 16-byte `clientIp` field (`IpUtil.toByte`).
pub fn encode_client_ip(addr: Option<SocketAddr>) -> ([u8; 16], bool) {
    let mut out = [0u8; 16];
    match addr {
        Some(SocketAddr::V6(a)) if a.ip().to_ipv4_mapped().is_none() => {
            out.copy_from_slice(&a.ip().octets());
            (out, false)
        }
        Some(a) => {
            let port = a.port().to_le_bytes();
            out[0] = port[0];
            out[1] = port[1];
            let ip = match a.ip() {
                IpAddr::V4(v4) => v4.octets(),
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or([0; 4], |v| v.octets()),
            };
            out[2..6].copy_from_slice(&ip);
            (out, true)
        }
        None => (out, true),
    }
}

/// The text form of an IPv4 `clientIp` field (`"a.b.c.d:port"`).
pub fn client_ip_text(ip: &[u8; 16]) -> String {
    let port = u16::from_le_bytes([ip[0], ip[1]]);
    format!("{}.{}.{}.{}:{port}", ip[2], ip[3], ip[4], ip[5])
}

impl WireMessage {
    /// Bytes this message takes on the wire.
    pub fn encoded_len(&self) -> usize {
        FIXED_LEN
            + self.body.len()
            + self.business_id.as_ref().map_or(0, String::len)
            + self.attributes.as_ref().map_or(0, String::len)
            + self.extension.len()
            + self.app.as_ref().map_or(0, String::len)
    }

    /// Set the body and its CRC (over the bytes as sent).
    pub fn set_body(&mut self, body: Bytes) {
        self.body_crc = i64::from(crc32fast::hash(&body));
        self.body = body;
    }

    /// Append the MESSAGE to `dst`.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<()> {
        let len = self.encoded_len();
        let Ok(len32) = i32::try_from(len) else {
            return Err(Error::invalid("body", "message larger than 2 GiB"));
        };
        dst.reserve(len);
        let start = dst.len();
        dst.put_i32(len32);
        dst.put_i16(self.partition);
        dst.put_i64(self.index);
        dst.put_i32(self.term);
        dst.put_i16(MESSAGE_MAGIC);
        dst.put_i16(self.sys_code.to_bits());
        dst.put_i8(self.priority);
        dst.put_slice(&self.client_ip);
        dst.put_i64(self.send_time);
        dst.put_i32(self.store_time);
        dst.put_i64(self.body_crc);
        dst.put_i16(self.flag);
        let r = (|| {
            put_bytes(dst, "body", &self.body)?;
            put_s1(dst, "business_id", self.business_id.as_deref())?;
            put_s2(dst, "attributes", self.attributes.as_deref())?;
            put_bytes(dst, "extension", &self.extension)?;
            put_s1(dst, "app", self.app.as_deref())
        })();
        if let Err(e) = r {
            dst.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(dst.len() - start, len);
        Ok(())
    }

    /// Decode one MESSAGE.
    ///
    /// `trust_length`: on fetch the length prefix is authoritative (the reader is bounded by it
    /// and skips anything the fields leave); on produce the server ignores it and parses the
    /// fields sequentially, which is what `false` does.
    pub fn decode(r: &mut Reader, trust_length: bool) -> Result<WireMessage> {
        let len = r.i32()?;
        if trust_length {
            let Some(rest) = usize::try_from(len).ok().and_then(|l| l.checked_sub(4)) else {
                return Err(Error::protocol(format!("bad JMQ4 message length {len}")));
            };
            if rest < FIXED_LEN - 4 {
                return Err(Error::protocol(format!(
                    "JMQ4 message length {len} is shorter than the fixed fields"
                )));
            }
            let mut sub = Reader::new(r.take(rest, "MESSAGE")?);
            let m = Self::decode_fields(&mut sub)?;
            return Ok(m);
        }
        Self::decode_fields(r)
    }

    fn decode_fields(r: &mut Reader) -> Result<WireMessage> {
        let partition = r.i16()?;
        let index = r.i64()?;
        let term = r.i32()?;
        let _magic = r.i16()?;
        let sys_code = SysCode::from_bits(r.i16()?)?;
        let priority = r.i8()?;
        let mut client_ip = [0u8; 16];
        client_ip.copy_from_slice(r.slice(16, "clientIp")?);
        let send_time = r.i64()?;
        let store_time = r.i32()?;
        let body_crc = r.i64()?;
        let flag = r.i16()?;
        let body = r.bytes()?;
        let business_id = r.s1()?;
        let attributes = r.s2()?;
        let extension = r.bytes()?;
        let app = r.s1()?;
        Ok(WireMessage {
            partition,
            index,
            term,
            sys_code,
            priority,
            client_ip,
            send_time,
            store_time,
            body_crc,
            flag,
            body,
            business_id,
            attributes,
            extension,
            app,
        })
    }

    /// The body after decompression (the batch body, for a batch).
    pub fn plain_body(&self, max_out: usize) -> Result<Bytes> {
        if self.sys_code.compressed && self.sys_code.compression != Compression::None {
            Ok(Bytes::from(compress::decompress(
                self.sys_code.compression,
                &self.body,
                max_out,
            )?))
        } else {
            Ok(self.body.clone())
        }
    }

    /// The messages a client sees: the message itself, or the inner messages of a batch, each
    /// with its own index (`outer index + i`) and the outer partition, sendTime and app.
    pub fn unpack(&self, max_out: usize) -> Result<Vec<BatchItem>> {
        let body = self.plain_body(max_out)?;
        if !self.sys_code.batch {
            return Ok(vec![BatchItem {
                priority: self.priority,
                flag: self.flag,
                body,
                business_id: self.business_id.clone(),
                attributes: self.attributes.clone(),
            }]);
        }
        let items = decode_batch(body)?;
        if items.len() != usize::try_from(self.flag).unwrap_or(usize::MAX) {
            return Err(Error::protocol(format!(
                "JMQ4 batch message says {} messages but holds {}",
                self.flag,
                items.len()
            )));
        }
        Ok(items)
    }
}

/// One message inside a batch body (or the only message of a plain one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchItem {
    /// Priority.
    pub priority: i8,
    /// User flag.
    pub flag: i16,
    /// Body (not compressed: a batch is compressed as a whole).
    pub body: Bytes,
    /// S1.
    pub business_id: Option<String>,
    /// Properties text, S2.
    pub attributes: Option<String>,
}

impl BatchItem {
    fn encoded_len(&self) -> usize {
        4 + 1
            + 2
            + 4
            + self.body.len()
            + 1
            + self.business_id.as_ref().map_or(0, String::len)
            + 2
            + self.attributes.as_ref().map_or(0, String::len)
    }
}

/// Encode a batch body: items concatenated, no leading length or count (§6.4).
pub fn encode_batch(items: &[BatchItem], dst: &mut BytesMut) -> Result<()> {
    dst.reserve(items.iter().map(BatchItem::encoded_len).sum());
    for it in items {
        let Ok(size) = i32::try_from(it.encoded_len()) else {
            return Err(Error::invalid("body", "batch item larger than 2 GiB"));
        };
        dst.put_i32(size);
        dst.put_i8(it.priority);
        dst.put_i16(it.flag);
        put_bytes(dst, "body", &it.body)?;
        put_s1(dst, "business_id", it.business_id.as_deref())?;
        put_s2(dst, "attributes", it.attributes.as_deref())?;
    }
    Ok(())
}

/// Decode a batch body (zero-copy bodies).
pub fn decode_batch(body: Bytes) -> Result<Vec<BatchItem>> {
    let mut r = Reader::new(body);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let start = r.position();
        let size = r.i32()?;
        let priority = r.i8()?;
        let flag = r.i16()?;
        let body = r.bytes()?;
        let business_id = r.s1()?;
        let attributes = r.s2()?;
        if usize::try_from(size).ok() != Some(r.position() - start) {
            return Err(Error::protocol(format!(
                "JMQ4 batch item size {size} does not match its fields ({} bytes)",
                r.position() - start
            )));
        }
        out.push(BatchItem {
            priority,
            flag,
            body,
            business_id,
            attributes,
        });
    }
    Ok(out)
}

/// Encode attributes as Java properties text (`key=value` lines, Java escaping, §6.3).
pub fn encode_properties(props: &BTreeMap<String, String>) -> Option<String> {
    if props.is_empty() {
        return None;
    }
    let mut s = String::new();
    for (i, (k, v)) in props.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        escape_into(&mut s, k, true);
        s.push('=');
        escape_into(&mut s, v, false);
    }
    Some(s)
}

fn escape_into(out: &mut String, s: &str, key: bool) {
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' if key || i == 0 => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            c => out.push(c),
        }
    }
}

/// Parse Java properties text (the subset `Properties.store` writes, plus `:` separators,
/// comments and blank lines).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.split('\n') {
        let line = line.trim_start_matches([' ', '\t', '\x0c']);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = split_property(line);
        out.insert(
            unescape(k),
            unescape(v.trim_start_matches([' ', '\t', '\x0c'])),
        );
    }
    out
}

fn split_property(line: &str) -> (&str, &str) {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'=' | b':' => return (&line[..i], &line[i + 1..]),
            b' ' | b'\t' => {
                let rest = line[i..].trim_start_matches([' ', '\t']);
                let rest = rest
                    .strip_prefix('=')
                    .or_else(|| rest.strip_prefix(':'))
                    .unwrap_or(rest);
                return (&line[..i], rest);
            }
            _ => i += 1,
        }
    }
    (line, "")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut pending_high: Option<u16> = None;
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let Ok(unit) = u16::from_str_radix(&hex, 16) else {
                    continue;
                };
                if (0xD800..0xDC00).contains(&unit) {
                    pending_high = Some(unit);
                    continue;
                }
                if let Some(high) = pending_high.take() {
                    if let Some(Ok(c)) = char::decode_utf16([high, unit]).next() {
                        out.push(c);
                        continue;
                    }
                }
                out.push(char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Java's `String.hashCode` (over UTF-16 code units), used by the server for ordered messages.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WireMessage {
        let mut m = WireMessage {
            partition: 3,
            index: 0x0102_0304_0506_0708,
            term: 9,
            sys_code: SysCode::default(),
            priority: 4,
            client_ip: encode_client_ip(Some("10.1.2.3:258".parse().unwrap())).0,
            send_time: 1_700_000_000_000,
            store_time: 5,
            flag: 0x11,
            business_id: Some("biz".into()),
            attributes: Some("k=v".into()),
            extension: Bytes::new(),
            app: Some("app1".into()),
            ..WireMessage::default()
        };
        m.set_body(Bytes::from_static(b"hello"));
        m
    }

    #[test]
    fn golden_message_bytes() {
        let m = sample();
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        let crc = crc32fast::hash(b"hello");
        let mut expected: Vec<u8> = Vec::new();
        expected.extend_from_slice(&(73 + 5 + 3 + 3 + 4i32).to_be_bytes()); // length
        expected.extend_from_slice(&[0, 3]); // partition
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]); // index
        expected.extend_from_slice(&[0, 0, 0, 9]); // term
        expected.extend_from_slice(&[0x12, 0x34]); // magic
                                                   // sysCode: source JOYQUEUE (3<<2 = 0x0c) | IPv4 (0x80) | version 1 (0x100) = 0x018c
        expected.extend_from_slice(&[0x01, 0x8c]);
        expected.push(4); // priority
        expected.extend_from_slice(&[2, 1, 10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // port LE, ip
        expected.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        expected.extend_from_slice(&[0, 0, 0, 5]); // storeTime
        expected.extend_from_slice(&i64::from(crc).to_be_bytes());
        expected.extend_from_slice(&[0, 0x11]); // flag
        expected.extend_from_slice(&[0, 0, 0, 5]);
        expected.extend_from_slice(b"hello");
        expected.extend_from_slice(&[3]);
        expected.extend_from_slice(b"biz"); // S1
        expected.extend_from_slice(&[0, 3]);
        expected.extend_from_slice(b"k=v"); // S2
        expected.extend_from_slice(&[0, 0, 0, 0]); // extension
        expected.extend_from_slice(&[4]);
        expected.extend_from_slice(b"app1");
        assert_eq!(&b[..], &expected[..]);
        for trust in [true, false] {
            let mut r = Reader::new(b.clone().freeze());
            assert_eq!(WireMessage::decode(&mut r, trust).unwrap(), m);
            r.finish("message").unwrap();
        }
        assert_eq!(client_ip_text(&m.client_ip), "10.1.2.3:258");
    }

    #[test]
    fn syscode_bits() {
        let s = SysCode {
            compressed: true,
            ordered: true,
            source: Source::JoyQueue,
            compression: Compression::Snappy,
            ipv4: true,
            version: 1,
            batch: true,
        };
        assert_eq!(s.to_bits() as u16, 0b0001_0001_1011_1111);
        assert_eq!(SysCode::from_bits(s.to_bits()).unwrap(), s);
        // Compression id 5 is refused, as the server's CompressionType.valueOf throws.
        assert!(SysCode::from_bits(0x0150).is_err());
        // Bits 13-15 set: not a batch ((sysCode >> 12) != 1).
        assert!(!SysCode::from_bits(0x3000u16 as i16).unwrap().batch);
    }

    #[test]
    fn batch_golden_and_indices() {
        let items = vec![
            BatchItem {
                priority: 1,
                flag: 2,
                body: Bytes::from_static(b"ab"),
                business_id: Some("x".into()),
                attributes: None,
            },
            BatchItem {
                body: Bytes::from_static(b"c"),
                ..BatchItem::default()
            },
        ];
        let mut b = BytesMut::new();
        encode_batch(&items, &mut b).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 17, 1, 0, 2, 0, 0, 0, 2, b'a', b'b', 1, b'x', 0, 0, // item 1
            0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 1, b'c', 0, 0, 0, // item 2
        ];
        assert_eq!(&b[..], expected);
        assert_eq!(decode_batch(b.clone().freeze()).unwrap(), items);
        let mut outer = WireMessage {
            sys_code: SysCode {
                batch: true,
                ..SysCode::default()
            },
            flag: 2,
            ..WireMessage::default()
        };
        outer.set_body(b.freeze());
        assert_eq!(outer.unpack(1 << 20).unwrap(), items);
        outer.flag = 3;
        assert!(outer.unpack(1 << 20).is_err());
    }

    #[test]
    fn properties_escape_like_java() {
        let mut p = BTreeMap::new();
        p.insert("a key".to_string(), "v=1:2#".to_string());
        p.insert("uni".to_string(), "é\t😀".to_string());
        let text = encode_properties(&p).unwrap();
        assert_eq!(text, "a\\ key=v\\=1\\:2\\#\nuni=\\u00E9\\t\\uD83D\\uDE00");
        assert_eq!(parse_properties(&text), p);
        assert_eq!(
            parse_properties("# c\n x : y\nz\n"),
            BTreeMap::from([("x".into(), "y".into()), ("z".into(), String::new())])
        );
        assert!(encode_properties(&BTreeMap::new()).is_none());
    }

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        // Overflow wraps like Java's int arithmetic.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }
}
