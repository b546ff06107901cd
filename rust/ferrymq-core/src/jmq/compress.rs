//! Body compression of JMQ4 messages (reference §6.2).
//!
//! The type id lives in bits 4–6 of `sysCode`: 0 none, 1 ZIP (a real ZIP archive with one entry
//! named `"0"`), 2 ZLIB (RFC 1950, `Deflater` default level), 3 Snappy (the *framed* stream
//! format). The broker stores bodies as sent; clients compress above a size threshold and
//! decompress what they fetch. Decompression is bounded, so a hostile body cannot make the
//! client allocate without limit.

use std::io::{Read, Write};

use crate::error::{Error, Result};

/// The body size from which the Java producer compresses (and ferrymq's default).
pub const DEFAULT_THRESHOLD: usize = 100;
/// The largest decompressed body ferrymq accepts (bodies are limited to a few MiB by brokers).
pub const MAX_DECOMPRESSED: usize = 64 * 1024 * 1024;

/// A JMQ4 compression type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Compression {
    /// Not compressed.
    None = 0,
    /// A ZIP archive holding one entry `"0"`.
    Zip = 1,
    /// A zlib stream (the Java client's default).
    #[default]
    Zlib = 2,
    /// A framed snappy stream.
    Snappy = 3,
}

impl Compression {
    /// From the 3-bit sysCode field. 4–7 are invalid: the real server closes the connection.
    pub fn from_id(id: u8) -> Result<Compression> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Zip),
            2 => Ok(Compression::Zlib),
            3 => Ok(Compression::Snappy),
            other => Err(Error::protocol(format!(
                "unknown JMQ4 compression type {other} in sysCode"
            ))),
        }
    }

    /// Parse a user-facing name.
    pub fn parse(s: &str) -> Result<Compression> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Compression::None),
            "zip" => Ok(Compression::Zip),
            "zlib" => Ok(Compression::Zlib),
            "snappy" => Ok(Compression::Snappy),
            other => Err(Error::invalid(
                "compression",
                format!("{other:?} is not one of none, zlib, zip, snappy"),
            )),
        }
    }

    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zip => "zip",
            Compression::Zlib => "zlib",
            Compression::Snappy => "snappy",
        }
    }
}

/// Compress `data`.
pub fn compress(kind: Compression, data: &[u8]) -> Result<Vec<u8>> {
    match kind {
        Compression::None => Ok(data.to_vec()),
        Compression::Zlib => {
            let mut e = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(data.len() / 2 + 16),
                flate2::Compression::default(),
            );
            e.write_all(data).map_err(io_err)?;
            e.finish().map_err(io_err)
        }
        Compression::Snappy => {
            let mut w = snap::write::FrameEncoder::new(Vec::with_capacity(data.len() / 2 + 32));
            w.write_all(data).map_err(io_err)?;
            w.into_inner()
                .map_err(|e| Error::internal(format!("snappy: {}", e.error())))
        }
        Compression::Zip => zip_one(data),
    }
}

/// Decompress `data`, refusing outputs larger than `max_out` bytes.
pub fn decompress(kind: Compression, data: &[u8], max_out: usize) -> Result<Vec<u8>> {
    match kind {
        Compression::None => Ok(data.to_vec()),
        Compression::Zlib => read_bounded(flate2::read::ZlibDecoder::new(data), max_out, "zlib"),
        Compression::Snappy => read_bounded(snap::read::FrameDecoder::new(data), max_out, "snappy"),
        Compression::Zip => unzip_one(data, max_out),
    }
}

fn io_err(e: std::io::Error) -> Error {
    Error::internal(format!("compression failed: {e}"))
}

fn read_bounded(r: impl Read, max_out: usize, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let limit = u64::try_from(max_out).unwrap_or(u64::MAX).saturating_add(1);
    r.take(limit)
        .read_to_end(&mut out)
        .map_err(|e| Error::protocol(format!("corrupt {what} message body: {e}")))?;
    if out.len() > max_out {
        return Err(Error::protocol(format!(
            "{what} message body inflates beyond {max_out} bytes"
        )));
    }
    Ok(out)
}

// --- ZIP: the minimal subset `ZipOutputStream` / `ZipInputStream` need for one entry. ---

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;

fn zip_one(data: &[u8]) -> Result<Vec<u8>> {
    let mut e = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(data.len() / 2 + 16),
        flate2::Compression::default(),
    );
    e.write_all(data).map_err(io_err)?;
    let deflated = e.finish().map_err(io_err)?;
    let crc = crc32fast::hash(data);
    let (Ok(csize), Ok(usize_)) = (u32::try_from(deflated.len()), u32::try_from(data.len())) else {
        return Err(Error::invalid(
            "body",
            "too large for a ZIP archive (4 GiB)",
        ));
    };
    let name = b"0";
    let mut out = Vec::with_capacity(deflated.len() + 100);
    // Local file header.
    out.extend_from_slice(&LOCAL_SIG.to_le_bytes());
    out.extend_from_slice(&20u16.to_le_bytes()); // version needed
    out.extend_from_slice(&0u16.to_le_bytes()); // flags
    out.extend_from_slice(&8u16.to_le_bytes()); // deflate
    out.extend_from_slice(&0u16.to_le_bytes()); // time
    out.extend_from_slice(&0x21u16.to_le_bytes()); // date (1980-01-01)
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&csize.to_le_bytes());
    out.extend_from_slice(&usize_.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // extra
    out.extend_from_slice(name);
    out.extend_from_slice(&deflated);
    let cd_start = out.len() as u32;
    // Central directory entry.
    out.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
    out.extend_from_slice(&20u16.to_le_bytes()); // made by
    out.extend_from_slice(&20u16.to_le_bytes()); // needed
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0x21u16.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&csize.to_le_bytes());
    out.extend_from_slice(&usize_.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0u8; 12]); // extra, comment, disk (2 each), internal (2), external (4)
    out.extend_from_slice(&0u32.to_le_bytes()); // local header offset
    out.extend_from_slice(name);
    let cd_len = out.len() as u32 - cd_start;
    // End of central directory.
    out.extend_from_slice(&EOCD_SIG.to_le_bytes());
    out.extend_from_slice(&[0u8; 4]); // disk numbers
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&cd_len.to_le_bytes());
    out.extend_from_slice(&cd_start.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

fn le16(b: &[u8], at: usize) -> Result<u16> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| Error::protocol("truncated ZIP message body"))
}

fn le32(b: &[u8], at: usize) -> Result<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| Error::protocol("truncated ZIP message body"))
}

/// Read the first entry of a ZIP archive, as `ZipInputStream.getNextEntry` does. Sizes come from
/// the local header, or (when bit 3 says they follow the data, as `ZipOutputStream` writes them)
/// from the central directory.
fn unzip_one(data: &[u8], max_out: usize) -> Result<Vec<u8>> {
    if le32(data, 0)? != LOCAL_SIG {
        return Err(Error::protocol("ZIP message body has no local file header"));
    }
    let flags = le16(data, 6)?;
    let method = le16(data, 8)?;
    let mut crc = le32(data, 14)?;
    let mut csize = le32(data, 18)? as usize;
    let name_len = le16(data, 26)? as usize;
    let extra_len = le16(data, 28)? as usize;
    let start = 30 + name_len + extra_len;
    if flags & 8 != 0 {
        // Sizes are in the central directory (found via the end record).
        let eocd = (0..data.len().saturating_sub(21))
            .rev()
            .find(|&i| le32(data, i).ok() == Some(EOCD_SIG))
            .ok_or_else(|| Error::protocol("ZIP message body has no end record"))?;
        let cd = le32(data, eocd + 16)? as usize;
        if le32(data, cd)? != CENTRAL_SIG {
            return Err(Error::protocol(
                "ZIP message body has a bad central directory",
            ));
        }
        crc = le32(data, cd + 16)?;
        csize = le32(data, cd + 20)? as usize;
    }
    let body = data
        .get(start..start.saturating_add(csize))
        .ok_or_else(|| Error::protocol("truncated ZIP message body"))?;
    let out = match method {
        0 => {
            if body.len() > max_out {
                return Err(Error::protocol("ZIP entry larger than the limit"));
            }
            body.to_vec()
        }
        8 => read_bounded(flate2::read::DeflateDecoder::new(body), max_out, "zip")?,
        m => {
            return Err(Error::protocol(format!(
                "ZIP message body uses unsupported method {m}"
            )))
        }
    };
    if crc32fast::hash(&out) != crc {
        return Err(Error::protocol("ZIP message body fails its CRC-32 check"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..5000u32).flat_map(|i| (i % 97).to_be_bytes()).collect()
    }

    #[test]
    fn every_kind_round_trips() {
        let data = sample();
        for kind in [
            Compression::None,
            Compression::Zip,
            Compression::Zlib,
            Compression::Snappy,
        ] {
            let c = compress(kind, &data).unwrap();
            if kind != Compression::None {
                assert!(c.len() < data.len(), "{kind:?} did not compress");
            }
            assert_eq!(
                decompress(kind, &c, MAX_DECOMPRESSED).unwrap(),
                data,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn formats_are_the_java_ones() {
        let z = compress(Compression::Zlib, b"hello").unwrap();
        assert_eq!(z[0], 0x78, "zlib header (CMF deflate, 32K window)");
        let s = compress(Compression::Snappy, b"hello").unwrap();
        assert_eq!(
            &s[..10],
            b"\xff\x06\x00\x00sNaPpY",
            "framed snappy stream id"
        );
        let zip = compress(Compression::Zip, b"hello").unwrap();
        assert_eq!(&zip[..4], b"PK\x03\x04");
        assert_eq!(&zip[30..31], b"0", "one entry named \"0\"");
    }

    #[test]
    fn zip_with_a_data_descriptor_is_read() {
        // What `ZipOutputStream` writes: flag bit 3, zero sizes in the local header, the real ones
        // in a data descriptor and the central directory.
        let mut zip = compress(Compression::Zip, b"payload payload payload").unwrap();
        zip[6] = 8;
        zip[14..26].fill(0);
        assert_eq!(
            decompress(Compression::Zip, &zip, 1024).unwrap(),
            b"payload payload payload"
        );
    }

    #[test]
    fn bombs_and_garbage_are_protocol_errors() {
        let big = vec![0u8; 1 << 20];
        for kind in [Compression::Zlib, Compression::Snappy, Compression::Zip] {
            let c = compress(kind, &big).unwrap();
            let e = decompress(kind, &c, 1000).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Protocol, "{kind:?}");
            assert!(
                decompress(kind, b"\x01\x02garbage", 1000).is_err(),
                "{kind:?}"
            );
        }
        assert!(Compression::from_id(4).is_err());
    }
}
