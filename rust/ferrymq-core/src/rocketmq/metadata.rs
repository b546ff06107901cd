//! Request metadata: the `x-mq-*` headers every RPC carries, the client id, and the
//! `authorization` header (HMAC-SHA1 request signing), per the rocketmq-v2 reference §5.
//!
//! Static headers are encoded once per client, into a header map every request starts from as a
//! copy (names parsed and the table sized once, not per request). The date-time and the
//! signature change once per second, so they are cached per second too: signing costs one HMAC
//! per client per second, not one per request. Secrets never appear in `Debug` output or logs.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use crate::error::{Error, Result};

/// `x-mq-language`: a server `LanguageCode` enum name (the proxy rejects anything else).
pub const LANGUAGE: &str = "PYTHON";
/// `x-mq-protocol`.
pub const PROTOCOL: &str = "v2";
/// `x-mq-client-version`. The proxy compares this against 5.0.3 to choose between status codes,
/// so ferrymq reports the protocol level of the reference clients whose behaviour it implements;
/// ferrymq's own version travels in the `UA` of the telemetry settings.
pub const CLIENT_VERSION: &str = "5.1.1";
/// The signing algorithm in the `authorization` header.
pub const ALGORITHM: &str = "MQv2-HMAC-SHA1";

/// Header names.
pub mod header {
    /// Client id; required by the server.
    pub const CLIENT_ID: &str = "x-mq-client-id";
    /// A fresh UUID per call.
    pub const REQUEST_ID: &str = "x-mq-request-id";
    /// Client language.
    pub const LANGUAGE: &str = "x-mq-language";
    /// Client version.
    pub const CLIENT_VERSION: &str = "x-mq-client-version";
    /// Protocol version.
    pub const PROTOCOL: &str = "x-mq-protocol";
    /// Namespace (may be empty).
    pub const NAMESPACE: &str = "x-mq-namespace";
    /// The signed date-time string.
    pub const DATE_TIME: &str = "x-mq-date-time";
    /// STS session token.
    pub const SESSION_TOKEN: &str = "x-mq-session-token";
    /// Signature.
    pub const AUTHORIZATION: &str = "authorization";
}

/// Access key / secret key (and optional STS token). `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key: String,
    secret_key: String,
    security_token: Option<String>,
}

impl Credentials {
    /// New credentials; the access key may not contain `,` or whitespace, neither may be empty.
    pub fn new(
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
        security_token: Option<String>,
    ) -> Result<Self> {
        let access_key = access_key.into();
        let secret_key = secret_key.into();
        if access_key.is_empty() {
            return Err(Error::invalid(
                "credentials.access_key",
                "must not be empty",
            ));
        }
        if access_key
            .chars()
            .any(|c| c.is_whitespace() || c == ',' || c.is_control())
        {
            return Err(Error::invalid(
                "credentials.access_key",
                "must not contain whitespace, ',' or control characters",
            ));
        }
        if secret_key.is_empty() {
            return Err(Error::invalid(
                "credentials.secret_key",
                "must not be empty",
            ));
        }
        if let Some(t) = &security_token {
            if AsciiMetadataValue::try_from(t.as_str()).is_err() {
                return Err(Error::invalid(
                    "credentials.security_token",
                    "must be printable ASCII",
                ));
            }
        }
        Ok(Self {
            access_key,
            secret_key,
            security_token,
        })
    }

    /// The access key (not secret).
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret key, for request signing inside the crate.
    pub(crate) fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The optional session token.
    pub(crate) fn security_token(&self) -> Option<&str> {
        self.security_token.as_deref()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field(
                "security_token",
                &self.security_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The `x-mq-date-time` format: `yyyyMMdd'T'HHmmss'Z'` (UTC).
pub fn format_date_time(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The `authorization` header value for `date_time`, signed with `credentials`.
pub fn sign(credentials: &Credentials, date_time: &str) -> String {
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        credentials.secret_key.as_bytes(),
    );
    let tag = ring::hmac::sign(&key, date_time.as_bytes());
    let hex = crate::message_id::upper_hex(tag.as_ref());
    format!(
        "{ALGORITHM} Credential={}, SignedHeaders={}, Signature={hex}",
        credentials.access_key,
        header::DATE_TIME
    )
}

static CLIENT_INDEX: AtomicU64 = AtomicU64::new(0);

/// A new client id in the Java format `host@pid@index@base36(nanos)`.
pub fn new_client_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}@{}@{}@{}",
        hostname(),
        std::process::id(),
        CLIENT_INDEX.fetch_add(1, Ordering::Relaxed),
        base36(nanos)
    )
}

fn base36(mut n: u128) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// This host's name (for client ids and the user agent).
pub fn hostname() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && !h.contains('@'))
            .unwrap_or_else(|| "localhost".to_string())
    })
}

/// A random (version 4) UUID string, for `x-mq-request-id`. The process id is hashed in: a
/// forked child inherits the hasher's keys and the counter, and must not repeat its parent's ids.
pub fn new_request_id() -> String {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = STATE.get_or_init(RandomState::new);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let mut h1 = state.build_hasher();
    h1.write_u64(c);
    h1.write_u32(pid);
    let mut h2 = state.build_hasher();
    h2.write_u64(!c);
    h2.write_u32(pid);
    let hi = h1.finish();
    let lo = h2.finish();
    let hi = (hi & !0xF000) | 0x4000; // version 4
    let lo = (lo & !(0xC << 60)) | (0x8 << 60); // RFC 4122 variant
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFFF,
        lo >> 48,
        lo & 0xFFFF_FFFF_FFFF
    )
}

/// Room in a request's header map for the per-request headers and those tonic adds
/// (`content-type`, `te`, `grpc-timeout`, `user-agent`): no growth on the way.
const HEADERS_CAPACITY: usize = 16;

const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(header::REQUEST_ID);
const DATE_TIME_NAME: HeaderName = HeaderName::from_static(header::DATE_TIME);
const AUTHORIZATION_NAME: HeaderName = HeaderName::from_static(header::AUTHORIZATION);

/// Builds the headers of every request of one client.
pub struct RequestMetadata {
    client_id: AsciiMetadataValue,
    namespace: AsciiMetadataValue,
    credentials: Option<Credentials>,
    /// The headers that never change: client id, language, versions, namespace, session token.
    constant: HeaderMap,
    /// The second, its date-time header and its signature.
    signed: Mutex<(u64, HeaderValue, Option<HeaderValue>)>,
}

impl fmt::Debug for RequestMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestMetadata")
            .field("client_id", &self.client_id)
            .field("namespace", &self.namespace)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl RequestMetadata {
    /// Headers for `client_id` in `namespace`, signed when `credentials` are given.
    pub fn new(client_id: &str, namespace: &str, credentials: Option<Credentials>) -> Result<Self> {
        let ascii = |field: &str, v: &str| {
            AsciiMetadataValue::try_from(v)
                .map_err(|_| Error::invalid(field, "must be printable ASCII"))
        };
        let session_token = match credentials.as_ref().and_then(|c| c.security_token.as_ref()) {
            Some(t) => Some(ascii("credentials.security_token", t)?),
            None => None,
        };
        let client_id = ascii("client_id", client_id)?;
        let namespace = ascii("namespace", namespace)?;
        let mut constant = MetadataMap::from_headers(HeaderMap::with_capacity(HEADERS_CAPACITY));
        constant.insert(header::CLIENT_ID, client_id.clone());
        constant.insert(header::LANGUAGE, AsciiMetadataValue::from_static(LANGUAGE));
        constant.insert(
            header::CLIENT_VERSION,
            AsciiMetadataValue::from_static(CLIENT_VERSION),
        );
        constant.insert(header::PROTOCOL, AsciiMetadataValue::from_static(PROTOCOL));
        constant.insert(header::NAMESPACE, namespace.clone());
        if let Some(t) = session_token {
            constant.insert(header::SESSION_TOKEN, t);
        }
        Ok(Self {
            client_id,
            namespace,
            credentials,
            constant: constant.into_headers(),
            signed: Mutex::new((u64::MAX, HeaderValue::from_static(""), None)),
        })
    }

    /// Add every header of §5.1 to `md`.
    pub fn apply(&self, md: &mut MetadataMap) {
        let mut headers = if md.is_empty() {
            self.constant.clone()
        } else {
            let mut h = std::mem::take(md).into_headers();
            for (name, value) in &self.constant {
                h.insert(name.clone(), value.clone());
            }
            h
        };
        if let Ok(v) = HeaderValue::try_from(new_request_id()) {
            headers.insert(REQUEST_ID_NAME, v);
        }
        let (date, auth) = self.date_and_signature();
        headers.insert(DATE_TIME_NAME, date);
        if let Some(auth) = auth {
            headers.insert(AUTHORIZATION_NAME, auth);
        }
        *md = MetadataMap::from_headers(headers);
    }

    fn date_and_signature(&self) -> (HeaderValue, Option<HeaderValue>) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut cached = self.signed.lock();
        if cached.0 != now {
            let date = format_date_time(now);
            let auth = self
                .credentials
                .as_ref()
                .and_then(|c| HeaderValue::try_from(sign(c, &date)).ok());
            let date = HeaderValue::try_from(date).unwrap_or_else(|_| HeaderValue::from_static(""));
            *cached = (now, date, auth);
        }
        (cached.1.clone(), cached.2.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_time_format() {
        assert_eq!(format_date_time(0), "19700101T000000Z");
        // 2021-01-01T00:00:00Z, the message-id epoch.
        assert_eq!(format_date_time(1_609_459_200), "20210101T000000Z");
        // 2024-02-29T23:59:59Z (leap day).
        assert_eq!(format_date_time(1_709_251_199), "20240229T235959Z");
    }

    #[test]
    fn hmac_sha1_signature() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let c = Credentials::new("AK", "Jefe", None).unwrap();
        let h = sign(&c, "what do ya want for nothing?");
        assert_eq!(
            h,
            "MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, \
             Signature=EFFCDF6AE5EB2FA2D27416D5F184DF9C259A7C79"
        );
    }

    #[test]
    fn headers_are_complete_and_secret_free() {
        let c = Credentials::new("ak", "super-secret", Some("tok".into())).unwrap();
        let m = RequestMetadata::new("host@1@0@x", "ns", Some(c)).unwrap();
        let mut md = MetadataMap::new();
        m.apply(&mut md);
        for h in [
            header::CLIENT_ID,
            header::REQUEST_ID,
            header::LANGUAGE,
            header::CLIENT_VERSION,
            header::PROTOCOL,
            header::NAMESPACE,
            header::DATE_TIME,
            header::AUTHORIZATION,
            header::SESSION_TOKEN,
        ] {
            assert!(md.get(h).is_some(), "missing {h}");
        }
        assert_eq!(md.get(header::LANGUAGE).unwrap(), "PYTHON");
        let auth = md.get(header::AUTHORIZATION).unwrap().to_str().unwrap();
        assert!(auth.starts_with("MQv2-HMAC-SHA1 Credential=ak, "));
        assert!(!format!("{m:?}").contains("super-secret"));
        assert!(!format!("{m:?}").contains("tok\""));
    }

    #[test]
    fn ids() {
        let id = new_client_id();
        assert_eq!(id.split('@').count(), 4, "{id}");
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn credentials_validated() {
        assert!(Credentials::new("", "s", None).is_err());
        assert!(Credentials::new("a b", "s", None).is_err());
        assert!(Credentials::new("a", "", None).is_err());
    }
}
