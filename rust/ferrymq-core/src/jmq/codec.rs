//! JMQ4 framing, header and primitive encodings (reference §2–§3).
//!
//! A frame is `length INT` (the whole frame, these 4 bytes included), the header, then the
//! payload. Everything is big-endian. Decoding never panics: a short buffer is "need more bytes"
//! ([`decode_frame`] returns `Ok(None)`), anything inconsistent is [`Error::protocol`], after
//! which the connection must be closed (the peer's framing can no longer be trusted).

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};

/// The fixed magic after the length.
pub const MAGIC: u32 = 0xCAFE_BEBE;
/// The header version ferrymq sends. Payloads are shaped by the version of the request (§2.1):
/// 3 is what 4.2.x servers speak, and responses are decoded by the version we sent.
pub const VERSION: u8 = 3;
/// The newest header version any server understands (post-4.2.7 master).
pub const MAX_VERSION: u8 = 4;
/// Size of a request header, the length field included.
pub const REQUEST_HEADER_LEN: usize = 23;
/// Size of a response header without its error string, the length field included.
pub const RESPONSE_HEADER_LEN: usize = 26;
/// Bytes a server needs in the first read to recognise the protocol (§2.2).
pub const SNIFF_LEN: usize = 19;
/// The largest frame ferrymq accepts by default. The real server has no limit; a client that
/// trusted any length could be made to allocate gigabytes, so both sides cap it.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;
/// The response type of commands without a payload, and of request-level failures (§4).
pub const BOOLEAN_ACK: i8 = -128;

/// JMQ4 command ids (`JoyQueueCommandType`); responses use the negated id or [`BOOLEAN_ACK`].
#[allow(missing_docs)]
pub mod command_type {
    /// States each command once: its id constant and its name in [`name`].
    macro_rules! command_types {
        ($($(#[$m:meta])* $name:ident = $id:literal,)*) => {
            $($(#[$m])* pub const $name: i8 = $id;)*

            /// The command name, for logs and errors.
            pub fn name(t: i8) -> &'static str {
                match t.checked_abs().unwrap_or(t) {
                    $($id => stringify!($name),)*
                    _ if t == super::BOOLEAN_ACK => "BOOLEAN_ACK",
                    _ => "UNKNOWN",
                }
            }
        };
    }

    command_types! {
        ADD_CONNECTION = 1,
        REMOVE_CONNECTION = 2,
        ADD_CONSUMER = 3,
        REMOVE_CONSUMER = 4,
        ADD_PRODUCER = 5,
        REMOVE_PRODUCER = 6,
        HEARTBEAT = 7,
        FETCH_HEALTH = 8,
        FETCH_CLUSTER = 10,
        FIND_COORDINATOR = 20,
        FETCH_ASSIGNED_PARTITION = 21,
        FETCH_TOPIC_MESSAGE = 30,
        FETCH_PARTITION_MESSAGE = 31,
        COMMIT_ACK = 32,
        COMMIT_ACK_INDEX = 33,
        /// Listed in the protocol document but commented out of the server's enum: a server
        /// closes the connection when it receives it.
        FETCH_ACK_INDEX = 34,
        FETCH_INDEX = 35,
        PRODUCE_MESSAGE = 50,
        PRODUCE_MESSAGE_PREPARE = 51,
        PRODUCE_MESSAGE_COMMIT = 52,
        PRODUCE_MESSAGE_ROLLBACK = 53,
        FETCH_PRODUCE_FEEDBACK = 54,
    }

    /// Request ids the server has a payload decoder for (34 is not one of them).
    pub const KNOWN: &[i8] = &[
        1, 2, 3, 4, 5, 6, 7, 8, 10, 20, 21, 30, 31, 32, 33, 35, 50, 51, 52, 53, 54,
    ];

    /// Whether `t` is a request type the server knows.
    pub fn is_known(t: i8) -> bool {
        KNOWN.contains(&t)
    }
}

/// Header QoS (`QosLevel`, bits 1–2 of `identity`; reference §2 "DOC≠CODE").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum QosLevel {
    /// The server never answers, not even with an error.
    OneWay = 0,
    /// Answer once the broker received the request (ferrymq's header default).
    #[default]
    Receive = 1,
    /// Answer once written to disk.
    Persistence = 2,
    /// Answer once replicated (the Java producer's default for PRODUCE_MESSAGE bodies).
    Replication = 3,
}

impl QosLevel {
    /// From the 2-bit (header) or byte (PRODUCE body) value. `4` (ALL) and anything else that
    /// does not fit the header maps as the server's `ordinal() << 1 & 6` would: to its low bits.
    pub fn from_bits(v: u8) -> QosLevel {
        match v & 3 {
            0 => QosLevel::OneWay,
            1 => QosLevel::Receive,
            2 => QosLevel::Persistence,
            _ => QosLevel::Replication,
        }
    }

    /// Parse a user-facing name.
    pub fn parse(s: &str) -> Result<QosLevel> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "one_way" | "oneway" => Ok(QosLevel::OneWay),
            "receive" => Ok(QosLevel::Receive),
            "persistence" => Ok(QosLevel::Persistence),
            "replication" => Ok(QosLevel::Replication),
            other => Err(Error::invalid(
                "qos",
                format!("{other:?} is not one of one_way, receive, persistence, replication"),
            )),
        }
    }
}

/// The header of a frame (without the length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header version; payload layouts depend on it.
    pub version: u8,
    /// `true` for responses (bit 0 of identity).
    pub response: bool,
    /// QoS bits of identity.
    pub qos: QosLevel,
    /// Correlation id, echoed by the response.
    pub request_id: i32,
    /// Command type (negative or [`BOOLEAN_ACK`] in responses).
    pub command_type: i8,
    /// Epoch milliseconds.
    pub send_time: i64,
    /// Response status (the low 8 bits of a JMQ4 code); 0 in requests.
    pub status: u8,
    /// Response error text; `None` when empty.
    pub error: Option<String>,
}

impl Header {
    /// A request header.
    pub fn request(command_type: i8, request_id: i32, qos: QosLevel) -> Header {
        Header {
            version: VERSION,
            response: false,
            qos,
            request_id,
            command_type,
            send_time: now_millis(),
            status: 0,
            error: None,
        }
    }

    /// The response header to `req`: the request's version, id and QoS, direction flipped.
    pub fn response_to(req: &Header, command_type: i8, status: u8, error: Option<String>) -> Self {
        Header {
            version: req.version,
            response: true,
            qos: req.qos,
            request_id: req.request_id,
            command_type,
            send_time: now_millis(),
            status,
            error,
        }
    }

    /// The identity byte.
    pub fn identity(&self) -> u8 {
        u8::from(self.response) | ((self.qos as u8) << 1)
    }

    fn encoded_len(&self) -> usize {
        if self.response {
            RESPONSE_HEADER_LEN + self.error.as_ref().map_or(0, String::len)
        } else {
            REQUEST_HEADER_LEN
        }
    }
}

/// One decoded frame: header plus the raw payload (decoded by [`super::command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header.
    pub header: Header,
    /// The payload bytes, exactly as long as the frame says.
    pub payload: Bytes,
}

/// Milliseconds since the Unix epoch (the header's send time).
pub use crate::duration::now_ms as now_millis;

/// Encode a frame whose payload is written by `payload` straight into `dst` (no intermediate
/// buffer); the length field is patched afterwards.
pub fn encode_frame_with<F>(header: &Header, dst: &mut BytesMut, payload: F) -> Result<()>
where
    F: FnOnce(&mut BytesMut) -> Result<()>,
{
    let start = dst.len();
    dst.reserve(header.encoded_len() + 64);
    dst.put_i32(0);
    dst.put_u32(MAGIC);
    dst.put_u8(header.version);
    dst.put_u8(header.identity());
    dst.put_i32(header.request_id);
    dst.put_i8(header.command_type);
    dst.put_i64(header.send_time);
    if header.response {
        dst.put_u8(header.status);
        // An over-long error text is cut (at a char boundary) rather than failing the response.
        let err = header.error.as_deref().unwrap_or("");
        put_s2_lossy(dst, err);
    }
    if let Err(e) = payload(dst) {
        dst.truncate(start);
        return Err(e);
    }
    let len = dst.len() - start;
    let Ok(len) = i32::try_from(len) else {
        dst.truncate(start);
        return Err(Error::invalid(
            "message",
            format!("frame of {len} bytes exceeds the 2 GiB limit of JMQ4"),
        ));
    };
    dst[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Encode a frame with a ready payload.
pub fn encode_frame(header: &Header, payload: &[u8], dst: &mut BytesMut) -> Result<()> {
    encode_frame_with(header, dst, |d| {
        d.put_slice(payload);
        Ok(())
    })
}

/// Try to split one frame off the front of `src`.
///
/// `Ok(None)`: more bytes are needed. `Err`: the stream is corrupt (bad length, magic or
/// header), and the caller must close the connection.
pub fn decode_frame(src: &mut BytesMut, max_frame: usize) -> Result<Option<Frame>> {
    if src.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([src[0], src[1], src[2], src[3]]);
    let Ok(len) = usize::try_from(len) else {
        return Err(Error::protocol(format!("negative JMQ4 frame length {len}")));
    };
    if len < REQUEST_HEADER_LEN {
        return Err(Error::protocol(format!(
            "JMQ4 frame length {len} is shorter than a header"
        )));
    }
    if len > max_frame {
        return Err(Error::protocol(format!(
            "JMQ4 frame of {len} bytes exceeds the limit of {max_frame}"
        )));
    }
    // Check the magic early, so garbage is rejected without waiting for `len` bytes.
    if src.len() >= 8 {
        let magic = u32::from_be_bytes([src[4], src[5], src[6], src[7]]);
        if magic != MAGIC {
            return Err(Error::protocol(format!(
                "bad JMQ4 magic {magic:#010x} (expected {MAGIC:#010x})"
            )));
        }
    }
    if src.len() < len {
        src.reserve(len - src.len());
        return Ok(None);
    }
    let frame = src.split_to(len).freeze();
    let mut r = Reader::new(frame.slice(8..));
    let version = r.u8()?;
    let identity = r.u8()?;
    if identity & 0x80 != 0 {
        return Err(Error::protocol(format!(
            "bad JMQ4 identity byte {identity:#04x}"
        )));
    }
    let response = identity & 1 == 1;
    let qos = QosLevel::from_bits(identity >> 1);
    let request_id = r.i32()?;
    let command_type = r.i8()?;
    let send_time = r.i64()?;
    let (status, error) = if response {
        (r.u8()?, r.s2()?)
    } else {
        (0, None)
    };
    let header = Header {
        version,
        response,
        qos,
        request_id,
        command_type,
        send_time,
        status,
        error,
    };
    Ok(Some(Frame {
        header,
        payload: r.rest(),
    }))
}

/// Whether the first bytes of a connection look like JMQ4 (the server's `isSupport`, §2.2):
/// at least 19 bytes, the magic, a non-negative version and identity, and a known request type.
pub fn sniff(first: &[u8]) -> bool {
    if first.len() < SNIFF_LEN {
        return false;
    }
    let magic = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
    let version = first[8] as i8;
    let identity = first[9] as i8;
    let t = first[14] as i8;
    magic == MAGIC && version >= 0 && identity >= 0 && command_type::is_known(t)
}

/// A cursor over a payload. Every read checks bounds and fails with a protocol error.
#[derive(Debug, Clone)]
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    /// Read from `buf`.
    pub fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes already read.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn need(&self, n: usize, what: &str) -> Result<()> {
        if self.remaining() < n {
            Err(Error::protocol(format!(
                "truncated JMQ4 payload: {what} needs {n} bytes, {} left",
                self.remaining()
            )))
        } else {
            Ok(())
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        self.need(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    /// BYTE (unsigned).
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>("BYTE")?[0])
    }
    /// BYTE (signed).
    pub fn i8(&mut self) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array::<1>("BYTE")?))
    }
    /// BOOLEAN (any non-zero byte is true, as in Java's `readBoolean`).
    pub fn bool(&mut self) -> Result<bool> {
        Ok(self.u8()? != 0)
    }
    /// SHORT.
    pub fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array("SHORT")?))
    }
    /// INT.
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array("INT")?))
    }
    /// LONG.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array("LONG")?))
    }
    /// DOUBLE.
    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_be_bytes(self.array("DOUBLE")?))
    }

    /// An ARRAY count (SHORT). Negative counts read as 0, as the server's `for` loops do.
    pub fn count(&mut self) -> Result<usize> {
        let n = self.i16()?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// `n` raw bytes, borrowed (no reference-count traffic).
    pub fn slice(&mut self, n: usize, what: &str) -> Result<&[u8]> {
        self.need(n, what)?;
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    /// `n` raw bytes (zero-copy).
    pub fn take(&mut self, n: usize, what: &str) -> Result<Bytes> {
        self.need(n, what)?;
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }

    /// Skip `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<()> {
        self.need(n, "skip")?;
        self.pos += n;
        Ok(())
    }

    /// BYTES: INT length then the bytes. A negative length is a protocol error.
    pub fn bytes(&mut self) -> Result<Bytes> {
        let n = self.i32()?;
        let Ok(n) = usize::try_from(n) else {
            return Err(Error::protocol(format!("negative BYTES length {n}")));
        };
        self.take(n, "BYTES")
    }

    fn string(&mut self, n: i32) -> Result<Option<String>> {
        // Signed length; zero or negative reads as null and consumes nothing (§3).
        let Ok(n) = usize::try_from(n) else {
            return Ok(None);
        };
        if n == 0 {
            return Ok(None);
        }
        let b = self.slice(n, "STRING")?;
        Ok(Some(match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            // Java decodes with replacement characters; so do we.
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        }))
    }

    /// S1: a string with a signed 1-byte length.
    pub fn s1(&mut self) -> Result<Option<String>> {
        let n = self.i8()?;
        self.string(i32::from(n))
    }

    /// S2: a string with a signed 2-byte length.
    pub fn s2(&mut self) -> Result<Option<String>> {
        let n = self.i16()?;
        self.string(i32::from(n))
    }

    /// S2, with null read as "".
    pub fn s2_or_empty(&mut self) -> Result<String> {
        Ok(self.s2()?.unwrap_or_default())
    }

    /// The unread rest (zero-copy).
    pub fn rest(&mut self) -> Bytes {
        let b = self.buf.slice(self.pos..);
        self.pos = self.buf.len();
        b
    }

    /// Fail unless every byte was consumed (a payload decoder must consume the whole frame).
    pub fn finish(&self, what: &str) -> Result<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Error::protocol(format!(
                "{} trailing bytes after the {what} payload",
                self.remaining()
            )))
        }
    }
}

/// Write S1. Longer than 127 bytes is an error: the server would desynchronise (§8.3).
pub fn put_s1(dst: &mut BytesMut, field: &str, s: Option<&str>) -> Result<()> {
    put_string(dst, field, s, 1)
}

/// Write S2. Longer than 32767 bytes is an error.
pub fn put_s2(dst: &mut BytesMut, field: &str, s: Option<&str>) -> Result<()> {
    put_string(dst, field, s, 2)
}

/// Write a string after its length in `width` (1 or 2) bytes, signed on the server's side.
fn put_string(dst: &mut BytesMut, field: &str, s: Option<&str>, width: usize) -> Result<()> {
    let s = s.unwrap_or("");
    let max = (1usize << (8 * width - 1)) - 1;
    if s.len() > max {
        return Err(Error::invalid(
            field,
            format!(
                "{} bytes; JMQ4 sends this field with a {width}-byte length (at most {max})",
                s.len()
            ),
        ));
    }
    dst.put_uint(s.len() as u64, width);
    dst.put_slice(s.as_bytes());
    Ok(())
}

/// Write S2, cutting the text at a char boundary if it is too long (for error texts).
pub fn put_s2_lossy(dst: &mut BytesMut, s: &str) {
    let mut end = s.len().min(i16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    dst.put_u16(end as u16);
    dst.put_slice(&s.as_bytes()[..end]);
}

/// Write an ARRAY count.
pub fn put_count(dst: &mut BytesMut, field: &str, n: usize) -> Result<()> {
    let Ok(n) = i16::try_from(n) else {
        return Err(Error::invalid(
            field,
            format!("{n} entries; a JMQ4 array holds at most 32767"),
        ));
    };
    dst.put_i16(n);
    Ok(())
}

/// Write BYTES.
pub fn put_bytes(dst: &mut BytesMut, field: &str, b: &[u8]) -> Result<()> {
    let Ok(n) = i32::try_from(b.len()) else {
        return Err(Error::invalid(field, "longer than 2 GiB"));
    };
    dst.put_i32(n);
    dst.put_slice(b);
    Ok(())
}

/// Write a BOOLEAN.
pub fn put_bool(dst: &mut BytesMut, b: bool) {
    dst.put_u8(u8::from(b));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_golden_bytes() {
        // HEARTBEAT, request id 7, QoS RECEIVE, send time 0x0102030405060708, version 2.
        let mut h = Header::request(command_type::HEARTBEAT, 7, QosLevel::Receive);
        h.version = 2;
        h.send_time = 0x0102_0304_0506_0708;
        let mut b = BytesMut::new();
        encode_frame(&h, &[], &mut b).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 23, // length, including itself
            0xCA, 0xFE, 0xBE, 0xBE, // magic
            2,    // version
            0x02, // identity: request, qos RECEIVE (1 << 1)
            0, 0, 0, 7, // request id
            7, // HEARTBEAT
            1, 2, 3, 4, 5, 6, 7, 8, // send time
        ];
        assert_eq!(&b[..], expected);
        assert!(sniff(&b));
        let f = decode_frame(&mut b, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(f.header, h);
        assert!(f.payload.is_empty());
        assert!(b.is_empty());
    }

    #[test]
    fn response_header_golden_bytes() {
        let req = Header::request(command_type::HEARTBEAT, 9, QosLevel::Receive);
        let mut h = Header::response_to(&req, BOOLEAN_ACK, 132, Some("no conn".into()));
        h.send_time = 1;
        let mut b = BytesMut::new();
        encode_frame(&h, &[], &mut b).unwrap();
        assert_eq!(b.len(), RESPONSE_HEADER_LEN + 7);
        assert_eq!(&b[0..4], &[0, 0, 0, 33]);
        assert_eq!(b[9], 0x03, "identity: response + RECEIVE");
        assert_eq!(b[14], 0x80, "type -128");
        assert_eq!(b[23], 132, "status as an unsigned byte");
        assert_eq!(&b[24..26], &[0, 7]);
        assert_eq!(&b[26..], b"no conn");
        let f = decode_frame(&mut b, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(f.header, h);
    }

    #[test]
    fn partial_frames_wait_and_garbage_fails() {
        let h = Header::request(command_type::FETCH_HEALTH, 1, QosLevel::Receive);
        let mut full = BytesMut::new();
        encode_frame(&h, b"xyz", &mut full).unwrap();
        for cut in 0..full.len() {
            let mut part = BytesMut::from(&full[..cut]);
            assert!(decode_frame(&mut part, DEFAULT_MAX_FRAME)
                .unwrap()
                .is_none());
        }
        let mut bad = BytesMut::from(&b"\x00\x00\x00\x20\xde\xad\xbe\xef"[..]);
        assert!(decode_frame(&mut bad, DEFAULT_MAX_FRAME).is_err());
        let mut neg = BytesMut::from(&b"\xff\xff\xff\xff"[..]);
        assert!(decode_frame(&mut neg, DEFAULT_MAX_FRAME).is_err());
        let mut big = BytesMut::from(&b"\x10\x00\x00\x00\xca\xfe\xbe\xbe"[..]);
        let e = decode_frame(&mut big, 1024).unwrap_err();
        assert!(e.message().contains("exceeds"), "{e}");
    }

    #[test]
    fn strings_follow_the_signed_length_rules() {
        let mut b = BytesMut::new();
        put_s1(&mut b, "f", Some("héllo")).unwrap();
        put_s2(&mut b, "f", None).unwrap();
        put_s1(&mut b, "f", Some("")).unwrap();
        let e = put_s1(&mut b, "business_id", Some(&"x".repeat(128))).unwrap_err();
        assert!(e.message().contains("1-byte length (at most 127)"), "{e}");
        let e = put_s2(&mut b, "topic", Some(&"x".repeat(32768))).unwrap_err();
        assert!(e.message().contains("2-byte length (at most 32767)"), "{e}");
        let mut r = Reader::new(b.freeze());
        assert_eq!(r.s1().unwrap().as_deref(), Some("héllo"));
        assert_eq!(r.s2().unwrap(), None);
        assert_eq!(r.s1().unwrap(), None);
        r.finish("test").unwrap();
        // A "negative" 1-byte length (a 200-byte string sent as S1) reads as null and consumes
        // nothing, which is how the real server desynchronises.
        let mut r = Reader::new(Bytes::from_static(&[200, b'a']));
        assert_eq!(r.s1().unwrap(), None);
        assert_eq!(r.remaining(), 1);
    }

    #[test]
    fn qos_bits_follow_the_code_not_the_doc() {
        assert_eq!(QosLevel::from_bits(0), QosLevel::OneWay);
        assert_eq!(QosLevel::from_bits(1), QosLevel::Receive);
        assert_eq!(QosLevel::from_bits(3), QosLevel::Replication);
        // ALL (4) does not fit in two bits and becomes ONE_WAY, as on the server.
        assert_eq!(QosLevel::from_bits(4), QosLevel::OneWay);
        assert!(QosLevel::parse("nope").is_err());
    }
}
