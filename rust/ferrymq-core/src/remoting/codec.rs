//! Remoting framing and the command header.
//!
//! A frame is `length i32` (everything after these 4 bytes), one byte naming the header
//! encoding (0 = JSON, 1 = the compact binary "ROCKETMQ" form), the header length as a 24-bit
//! integer, the header, and the body, whose length is what remains. All integers are
//! big-endian.
//!
//! The server answers in *its* configured header encoding, not in the request's, so
//! [`decode_frame`] reads both. ferrymq sends JSON ([`RemotingCommand::encode`]);
//! [`RemotingCommand::encode_binary`] exists for tests and the embedded server.
//!
//! Decoding never panics: a short buffer is `Ok(None)` (need more bytes), anything
//! inconsistent is [`Error::protocol`], after which the connection must be dropped.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde_json::Value;

use crate::error::{Error, Result};

/// The largest frame accepted by default (the Java server's default limit too).
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;
/// `LanguageCode` of Rust clients.
pub const LANGUAGE_RUST: u8 = 12;
/// The protocol version ferrymq announces (`MQVersion` ordinal of 5.3.3).
pub const VERSION: i32 = 479;
/// Flag bit of responses.
pub const FLAG_RESPONSE: i32 = 1;
/// Flag bit of fire-and-forget requests (never answered).
pub const FLAG_ONEWAY: i32 = 2;
/// Header encoding byte: JSON.
pub const SERIALIZE_JSON: u8 = 0;
/// Header encoding byte: binary.
pub const SERIALIZE_BINARY: u8 = 1;

/// `LanguageCode` names by their byte value.
const LANGUAGES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

/// The name of a `LanguageCode` byte (`"OTHER"` when unknown).
pub fn language_name(code: u8) -> &'static str {
    LANGUAGES.get(usize::from(code)).copied().unwrap_or("OTHER")
}

fn language_code(name: &str) -> u8 {
    LANGUAGES
        .iter()
        .position(|l| l.eq_ignore_ascii_case(name))
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(7)
}

/// One remoting command: a request, or the response to one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code, or response code in a response.
    pub code: i32,
    /// The sender's `LanguageCode`.
    pub language: u8,
    /// The sender's protocol version.
    pub version: i32,
    /// Request id; a response carries its request's.
    pub opaque: i32,
    /// [`FLAG_RESPONSE`] and [`FLAG_ONEWAY`] bits.
    pub flag: i32,
    /// Error text of a response (the store status of a pull).
    pub remark: Option<String>,
    /// The custom header as string pairs, in insertion order; keys are unique.
    pub ext_fields: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl RemotingCommand {
    /// A request with `code`, sent as a Rust client of version [`VERSION`]; opaque 0 until the
    /// connection assigns one.
    pub fn request(code: i32) -> Self {
        RemotingCommand {
            code,
            language: LANGUAGE_RUST,
            version: VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// The response to a request with `opaque`.
    pub fn response(code: i32, opaque: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            language: LANGUAGE_RUST,
            version: VERSION,
            opaque,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// Whether the response bit is set.
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// Whether the oneway bit is set (no answer expected).
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// The value of the custom header field `key`.
    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Set (or replace) the custom header field `key`.
    pub fn set_ext(&mut self, key: impl Into<String>, value: impl ToString) {
        let key = key.into();
        let value = value.to_string();
        match self.ext_fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.ext_fields.push((key, value)),
        }
    }

    /// Builder form of [`RemotingCommand::set_ext`].
    #[must_use]
    pub fn with_ext(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.set_ext(key, value);
        self
    }

    /// Builder: set the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The field `key` parsed as an integer; a missing or malformed value is a protocol error.
    pub fn ext_i64(&self, key: &str) -> Result<i64> {
        let v = self.ext(key).ok_or_else(|| {
            Error::protocol(format!(
                "reply (code {}) lacks the field {key:?}",
                self.code
            ))
        })?;
        v.trim().parse::<i64>().map_err(|_| {
            Error::protocol(format!(
                "reply field {key:?} is not an integer: {:?}",
                truncate(v, 40)
            ))
        })
    }

    /// Append the frame with a JSON header to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        let mut h = Vec::with_capacity(128 + self.ext_fields.len() * 32);
        h.extend_from_slice(b"{\"code\":");
        h.extend_from_slice(itoa::Buffer::new().format(self.code).as_bytes());
        if !self.ext_fields.is_empty() {
            h.extend_from_slice(b",\"extFields\":{");
            for (i, (k, v)) in self.ext_fields.iter().enumerate() {
                if i > 0 {
                    h.push(b',');
                }
                json_string(&mut h, k);
                h.push(b':');
                json_string(&mut h, v);
            }
            h.push(b'}');
        }
        h.extend_from_slice(b",\"flag\":");
        h.extend_from_slice(itoa::Buffer::new().format(self.flag).as_bytes());
        h.extend_from_slice(b",\"language\":");
        json_string(&mut h, language_name(self.language));
        h.extend_from_slice(b",\"opaque\":");
        h.extend_from_slice(itoa::Buffer::new().format(self.opaque).as_bytes());
        if let Some(r) = &self.remark {
            h.extend_from_slice(b",\"remark\":");
            json_string(&mut h, r);
        }
        h.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
        h.extend_from_slice(itoa::Buffer::new().format(self.version).as_bytes());
        h.push(b'}');
        put_frame(out, SERIALIZE_JSON, &h, &self.body);
    }

    /// Append the frame with a binary header to `out`. Code and version are truncated to 16
    /// bits, as the format demands.
    pub fn encode_binary(&self, out: &mut BytesMut) {
        let mut h = Vec::with_capacity(64 + self.ext_fields.len() * 32);
        #[allow(clippy::cast_possible_truncation)]
        {
            h.put_i16(self.code as i16);
            h.put_u8(self.language);
            h.put_i16(self.version as i16);
        }
        h.put_i32(self.opaque);
        h.put_i32(self.flag);
        match &self.remark {
            Some(r) if !r.is_empty() => {
                h.put_i32(len_i32(r.len()));
                h.put_slice(r.as_bytes());
            }
            _ => h.put_i32(0),
        }
        let ext_len: usize = self
            .ext_fields
            .iter()
            .map(|(k, v)| 2 + k.len() + 4 + v.len())
            .sum();
        h.put_i32(len_i32(ext_len));
        for (k, v) in &self.ext_fields {
            h.put_i16(i16::try_from(k.len()).unwrap_or(i16::MAX));
            h.put_slice(&k.as_bytes()[..k.len().min(i16::MAX as usize)]);
            h.put_i32(len_i32(v.len()));
            h.put_slice(v.as_bytes());
        }
        put_frame(out, SERIALIZE_BINARY, &h, &self.body);
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn put_frame(out: &mut BytesMut, kind: u8, header: &[u8], body: &[u8]) {
    out.reserve(8 + header.len() + body.len());
    out.put_i32(len_i32(4 + header.len() + body.len()));
    let h = u32::try_from(header.len()).unwrap_or(0xFF_FFFF) & 0xFF_FFFF;
    out.put_u32((u32::from(kind) << 24) | h);
    out.put_slice(header);
    out.put_slice(body);
}

/// Append `s` as a JSON string literal; every control character is escaped.
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1F | 0x7F => None,
            _ => continue,
        };
        out.extend_from_slice(&s.as_bytes()[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xF)]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&s.as_bytes()[start..]);
    out.push(b'"');
}

/// Split one frame off the front of `buf`. `Ok(None)`: not complete yet (nothing consumed).
/// Frames longer than `max_frame` are refused.
pub fn decode_frame(buf: &mut BytesMut, max_frame: usize) -> Result<Option<RemotingCommand>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l >= 4)
        .ok_or_else(|| Error::protocol(format!("remoting frame length {len} is invalid")))?;
    if len > max_frame {
        return Err(Error::protocol(format!(
            "remoting frame of {len} bytes exceeds the limit of {max_frame}"
        )));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    let mut frame = buf.split_to(len).freeze();
    let word = frame.get_u32();
    let kind = u8::try_from(word >> 24).unwrap_or(u8::MAX);
    let hlen = (word & 0xFF_FFFF) as usize;
    if hlen > frame.len() {
        return Err(Error::protocol(format!(
            "remoting header length {hlen} exceeds the frame ({} bytes)",
            frame.len()
        )));
    }
    let header = frame.split_to(hlen);
    let mut cmd = match kind {
        SERIALIZE_JSON => decode_json_header(&header)?,
        SERIALIZE_BINARY => decode_binary_header(header)?,
        other => {
            return Err(Error::protocol(format!(
                "unknown remoting header encoding {other}"
            )))
        }
    };
    cmd.body = frame;
    Ok(Some(cmd))
}

fn int_field(obj: &serde_json::Map<String, Value>, key: &str, required: bool) -> Result<i32> {
    match obj.get(key) {
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| Error::protocol(format!("remoting header {key} {n} is out of range"))),
        None | Some(Value::Null) if !required => Ok(0),
        _ => Err(Error::protocol(format!(
            "remoting header lacks a numeric {key:?}"
        ))),
    }
}

fn decode_json_header(h: &[u8]) -> Result<RemotingCommand> {
    let v: Value = serde_json::from_slice(h)
        .map_err(|e| Error::protocol("remoting JSON header does not parse").with_source(e))?;
    let Value::Object(obj) = v else {
        return Err(Error::protocol("remoting JSON header is not an object"));
    };
    let language = match obj.get("language") {
        Some(Value::String(s)) => language_code(s),
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u8::try_from(n).ok()).unwrap_or(7),
        _ => 7,
    };
    let remark = match obj.get("remark") {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let mut ext_fields = Vec::new();
    match obj.get("extFields") {
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => continue,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => other.to_string(),
                };
                ext_fields.push((k.clone(), v));
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => return Err(Error::protocol("remoting extFields is not an object")),
    }
    Ok(RemotingCommand {
        code: int_field(&obj, "code", true)?,
        language,
        version: int_field(&obj, "version", false)?,
        opaque: int_field(&obj, "opaque", true)?,
        flag: int_field(&obj, "flag", false)?,
        remark,
        ext_fields,
        body: Bytes::new(),
    })
}

fn need(b: &Bytes, n: usize, what: &str) -> Result<()> {
    if b.remaining() < n {
        Err(Error::protocol(format!(
            "remoting binary header truncated in {what}"
        )))
    } else {
        Ok(())
    }
}

fn take_string(b: &mut Bytes, n: usize, what: &str) -> Result<String> {
    need(b, n, what)?;
    let raw = b.split_to(n);
    String::from_utf8(raw.to_vec())
        .map_err(|_| Error::protocol(format!("remoting {what} is not UTF-8")))
}

fn decode_binary_header(mut b: Bytes) -> Result<RemotingCommand> {
    need(&b, 2 + 1 + 2 + 4 + 4 + 4, "fixed fields")?;
    let code = i32::from(b.get_i16());
    let language = b.get_u8();
    let version = i32::from(b.get_i16());
    let opaque = b.get_i32();
    let flag = b.get_i32();
    let rlen = b.get_i32();
    let remark = match usize::try_from(rlen) {
        Ok(0) => None,
        Ok(n) => Some(take_string(&mut b, n, "remark")?),
        Err(_) => return Err(Error::protocol("remoting remark length is negative")),
    };
    need(&b, 4, "extFields length")?;
    let elen = usize::try_from(b.get_i32())
        .map_err(|_| Error::protocol("remoting extFields length is negative"))?;
    need(&b, elen, "extFields")?;
    let mut e = b.split_to(elen);
    let mut ext_fields = Vec::new();
    while e.has_remaining() {
        need(&e, 2, "extFields key length")?;
        let klen = usize::try_from(e.get_i16())
            .map_err(|_| Error::protocol("remoting extFields key length is negative"))?;
        let k = take_string(&mut e, klen, "extFields key")?;
        need(&e, 4, "extFields value length")?;
        let vlen = usize::try_from(e.get_i32())
            .map_err(|_| Error::protocol("remoting extFields value length is negative"))?;
        let v = take_string(&mut e, vlen, "extFields value")?;
        match ext_fields.iter_mut().find(|(old, _)| *old == k) {
            Some(slot) => *slot = (k, v),
            None => ext_fields.push((k, v)),
        }
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: Bytes::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RemotingCommand {
        RemotingCommand::request(11)
            .with_ext("topic", "orders")
            .with_ext("queueId", 3)
            .with_ext("props", "KEYS\u{1}a b\u{2}TAGS\u{1}t\"q\\\u{2}")
            .with_body(Bytes::from_static(b"hello"))
    }

    /// JSON objects come back in key order; order carries no meaning.
    fn sorted(mut c: RemotingCommand) -> RemotingCommand {
        c.ext_fields.sort();
        c
    }

    #[test]
    fn json_round_trip() {
        let mut c = sample();
        c.opaque = 42;
        c.remark = Some("line\nnext\u{7f}".into());
        let mut buf = BytesMut::new();
        c.encode(&mut buf);
        let header_len =
            (u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) & 0xFF_FFFF) as usize;
        let header = std::str::from_utf8(&buf[8..8 + header_len]).unwrap();
        assert!(header.contains("\\u0001a b\\u0002"), "{header}");
        assert!(header.contains("\"language\":\"RUST\""));
        assert!(header.contains("\"queueId\":\"3\""));
        // Any strict JSON parser accepts it.
        serde_json::from_str::<Value>(header).unwrap();
        let got = decode_frame(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert!(buf.is_empty());
        assert_eq!(got, sorted(c));
        assert_eq!(got.ext("queueId"), Some("3"));
        assert_eq!(got.ext_i64("queueId").unwrap(), 3);
        assert!(got.ext_i64("topic").is_err());
        assert!(got.ext_i64("missing").is_err());
    }

    #[test]
    fn binary_round_trip() {
        let mut c = sample();
        c.opaque = -7;
        c.flag = FLAG_RESPONSE;
        c.remark = Some("FOUND".into());
        let mut buf = BytesMut::new();
        c.encode_binary(&mut buf);
        assert_eq!(buf[4], SERIALIZE_BINARY);
        let got = decode_frame(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(got, c);
        assert!(got.is_response());
        assert!(!got.is_oneway());
    }

    #[test]
    fn real_reply() {
        let h = br#"{"code":0,"extFields":{"offset":"7"},"flag":1,"language":"JAVA","opaque":8,"serializeTypeCurrentRPC":"JSON","version":479}"#;
        let mut buf = BytesMut::new();
        buf.put_i32(i32::try_from(4 + h.len()).unwrap());
        buf.put_u32(u32::try_from(h.len()).unwrap());
        buf.put_slice(h);
        let c = decode_frame(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!((c.code, c.opaque, c.version, c.language), (0, 8, 479, 0));
        assert!(c.is_response());
        assert_eq!(c.ext_i64("offset").unwrap(), 7);
        assert!(c.body.is_empty());
        // A numeric language and an absent extFields decode too.
        let h = br#"{"code":3,"flag":1,"language":12,"opaque":1,"remark":"x"}"#;
        let mut buf = BytesMut::new();
        buf.put_i32(i32::try_from(4 + h.len() + 2).unwrap());
        buf.put_u32(u32::try_from(h.len()).unwrap());
        buf.put_slice(h);
        buf.put_slice(b"zz");
        let c = decode_frame(&mut buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(c.language, LANGUAGE_RUST);
        assert!(c.ext_fields.is_empty());
        assert_eq!(&c.body[..], b"zz");
        assert_eq!(c.remark.as_deref(), Some("x"));
    }

    #[test]
    fn partial_frames_need_more() {
        let mut whole = BytesMut::new();
        sample().encode(&mut whole);
        sample().encode_binary(&mut whole);
        let bytes = whole.to_vec();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in bytes {
            buf.put_u8(b);
            if let Some(c) = decode_frame(&mut buf, DEFAULT_MAX_FRAME).unwrap() {
                got.push(c);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], sorted(got[1].clone()));
    }

    #[test]
    fn garbage_is_an_error() {
        let cases: &[&[u8]] = &[
            &[0xFF, 0xFF, 0xFF, 0xFF],
            &[0, 0, 0, 1],
            &[0x7F, 0, 0, 0],
            &[0, 0, 0, 8, 0, 0, 0, 9, 1, 2, 3, 4],
            &[0, 0, 0, 6, 5, 0, 0, 0, 0, 0],
            &[0, 0, 0, 7, 0, 0, 0, 3, b'{', b'x', b'}'],
            &[0, 0, 0, 7, 1, 0, 0, 3, 0, 1, 2],
            &[0, 0, 0, 6, 0, 0, 0, 2, b'[', b']'],
        ];
        for c in cases {
            let mut buf = BytesMut::from(*c);
            assert!(decode_frame(&mut buf, 1024).is_err(), "{c:?}");
        }
        let mut big = BytesMut::new();
        sample().encode(&mut big);
        assert!(decode_frame(&mut big, 16).is_err());
    }
}
