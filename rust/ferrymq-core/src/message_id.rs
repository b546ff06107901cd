//! Message ids in the layout of the Java reference client (`docs/message_id.md`, version 1).
//!
//! 17 bytes, big-endian, written as 34 upper-case hex characters:
//! `01 | MAC (6) | pid low 16 bits (2) | seconds since 2021-01-01T00:00Z, low 32 bits (4) | sequence (4)`.
//! An id is generated once per message before the first send attempt and kept on every retry.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time of 2021-01-01T00:00:00Z, the epoch of message-id timestamps.
pub const ID_EPOCH_SECS: u64 = 1_609_459_200;

/// Layout version written in the first byte.
pub const VERSION: u8 = 0x01;

static SEQUENCE: AtomicU32 = AtomicU32::new(0);
static MAC: OnceLock<[u8; 6]> = OnceLock::new();

/// The MAC address used in ids: the first non-zero hardware address of this host, or random bytes
/// (with the locally-administered bit set) when there is none.
pub fn host_mac() -> [u8; 6] {
    *MAC.get_or_init(|| read_mac().unwrap_or_else(random_mac))
}

fn read_mac() -> Option<[u8; 6]> {
    let mut names: Vec<_> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names.into_iter().find_map(|n| {
        let s = std::fs::read_to_string(format!("/sys/class/net/{n}/address")).ok()?;
        let mut mac = [0u8; 6];
        let mut parts = s.trim().split(':');
        for b in &mut mac {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        (mac != [0; 6]).then_some(mac)
    })
}

fn random_mac() -> [u8; 6] {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    let v = h.finish().to_be_bytes();
    [v[0] | 0x02, v[1], v[2], v[3], v[4], v[5]]
}

/// Generate a new message id.
pub fn generate() -> String {
    generate_at(SystemTime::now())
}

/// Generate a message id with the timestamp `now` (exposed for tests).
pub fn generate_at(now: SystemTime) -> String {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let since = secs.saturating_sub(ID_EPOCH_SECS);
    let mut raw = [0u8; 17];
    raw[0] = VERSION;
    raw[1..7].copy_from_slice(&host_mac());
    // Truncation to the low bits is the layout.
    #[allow(clippy::cast_possible_truncation)]
    {
        raw[7..9].copy_from_slice(&(std::process::id() as u16).to_be_bytes());
        raw[9..13].copy_from_slice(&(since as u32).to_be_bytes());
    }
    raw[13..17].copy_from_slice(&SEQUENCE.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    upper_hex(&raw)
}

/// Bytes as upper-case hex, two characters a byte (the layout of every RocketMQ id).
pub(crate) fn upper_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

/// The parts of a version-1 id, for diagnostics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedId {
    /// MAC address.
    pub mac: [u8; 6],
    /// Low 16 bits of the producing process id.
    pub pid: u16,
    /// Seconds since 2021-01-01, low 32 bits.
    pub seconds: u32,
    /// Per-process sequence number.
    pub sequence: u32,
}

/// Parse a version-1 id; `None` if it is not one.
pub fn parse(id: &str) -> Option<ParsedId> {
    if id.len() != 34
        || !id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    {
        return None;
    }
    let mut raw = [0u8; 17];
    for (i, b) in raw.iter_mut().enumerate() {
        *b = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).ok()?;
    }
    if raw[0] != VERSION {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&raw[1..7]);
    Some(ParsedId {
        mac,
        pid: u16::from_be_bytes([raw[7], raw[8]]),
        seconds: u32::from_be_bytes([raw[9], raw[10], raw[11], raw[12]]),
        sequence: u32::from_be_bytes([raw[13], raw[14], raw[15], raw[16]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;

    #[test]
    fn layout_matches_java_v1() {
        let t = UNIX_EPOCH + Duration::from_secs(ID_EPOCH_SECS + 86_400);
        let id = generate_at(t);
        assert_eq!(id.len(), 34);
        assert!(id.starts_with("01"));
        let p = parse(&id).unwrap();
        assert_eq!(p.seconds, 86_400);
        assert_eq!(p.mac, host_mac());
        #[allow(clippy::cast_possible_truncation)]
        let pid = std::process::id() as u16;
        assert_eq!(p.pid, pid);
    }

    #[test]
    fn ids_are_unique_and_sequential() {
        let ids: Vec<_> = (0..10_000).map(|_| generate()).collect();
        let set: HashSet<_> = ids.iter().collect();
        assert_eq!(set.len(), ids.len());
        let a = parse(&ids[0]).unwrap().sequence;
        let b = parse(&ids[1]).unwrap().sequence;
        assert!(b > a);
    }
}
