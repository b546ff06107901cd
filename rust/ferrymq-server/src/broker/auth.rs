//! Request headers the proxy checks: `x-mq-client-id` (else `CLIENT_ID_REQUIRED`) and, when the
//! broker has credentials, the `authorization` signature (reference §5.2):
//!
//! `MQv2-HMAC-SHA1 Credential=<AK>[/…], SignedHeaders=x-mq-date-time, Signature=<hex>` where the
//! signature is HMAC-SHA1 keyed by the secret over the `x-mq-date-time` value. The hex is compared
//! without regard to case; the date is not parsed and clock skew is not checked (as the server).
//!
//! The proxy checks every request's signature. [`Verified`] gives the same answers with fewer
//! HMACs: the answer depends only on the two headers (the secret is fixed), and a client signs
//! once per second and sends that signature with every request of the second, so a pair found
//! valid is remembered and found valid again without the HMAC.

use std::collections::VecDeque;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use sha1::Sha1;
use tonic::metadata::MetadataMap;

use super::config::Credentials;
use crate::status;

/// A refused request: the status code and message to answer.
pub type Refusal = (i32, String);

/// The client id of a request, or `CLIENT_ID_REQUIRED`.
pub fn client_id(md: &MetadataMap) -> Result<String, Refusal> {
    match md.get("x-mq-client-id").and_then(|v| v.to_str().ok()) {
        Some(id) if !id.trim().is_empty() => Ok(id.to_string()),
        _ => Err((
            status::CLIENT_ID_REQUIRED,
            "the x-mq-client-id header is required".into(),
        )),
    }
}

/// Check the `authorization` header against `creds`.
pub fn authorize(md: &MetadataMap, creds: &Credentials) -> Result<(), Refusal> {
    let deny = |why: &str| Err((status::UNAUTHORIZED, why.to_string()));
    let Some(header) = md.get("authorization").and_then(|v| v.to_str().ok()) else {
        return deny("the authorization header is missing");
    };
    let Some(rest) = header.trim().strip_prefix("MQv2-HMAC-SHA1") else {
        return deny("unsupported authorization scheme (expected MQv2-HMAC-SHA1)");
    };
    let mut credential = None;
    let mut signature = None;
    for part in rest.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else {
            continue;
        };
        match k.trim() {
            "Credential" => credential = Some(v.trim()),
            "Signature" => signature = Some(v.trim()),
            _ => {}
        }
    }
    let (Some(credential), Some(signature)) = (credential, signature) else {
        return deny("the authorization header lacks Credential or Signature");
    };
    let access_key = credential.split('/').next().unwrap_or_default();
    if access_key != creds.access_key {
        return deny("unknown access key");
    }
    let Some(date) = md.get("x-mq-date-time").and_then(|v| v.to_str().ok()) else {
        return deny("the x-mq-date-time header is missing");
    };
    let Some(given) = decode_hex(signature) else {
        return deny("the signature is not hexadecimal");
    };
    let mut mac =
        Hmac::<Sha1>::new_from_slice(creds.secret_key.as_bytes()).expect("any key length");
    mac.update(date.as_bytes());
    if mac.verify_slice(&given).is_err() {
        return deny("signature mismatch");
    }
    Ok(())
}

/// How many valid `(authorization, x-mq-date-time)` pairs [`Verified`] remembers: a few
/// clients signing in the same second.
const REMEMBERED: usize = 16;

/// The last header pairs [`authorize`] found valid with the broker's credentials.
#[derive(Debug, Default)]
pub struct Verified(Mutex<VecDeque<(String, String)>>);

impl Verified {
    /// What [`authorize`] answers, computed only for a pair of headers not found valid lately.
    pub fn authorize(&self, md: &MetadataMap, creds: &Credentials) -> Result<(), Refusal> {
        let header = md.get("authorization").and_then(|v| v.to_str().ok());
        let date = md.get("x-mq-date-time").and_then(|v| v.to_str().ok());
        let (Some(header), Some(date)) = (header, date) else {
            return authorize(md, creds);
        };
        if self.0.lock().iter().any(|(h, d)| h == header && d == date) {
            return Ok(());
        }
        authorize(md, creds)?;
        let mut valid = self.0.lock();
        if valid.len() >= REMEMBERED {
            valid.pop_front();
        }
        valid.push_back((header.to_string(), date.to_string()));
        Ok(())
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&'static str, String)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn signature_is_checked_case_insensitively() {
        let creds = Credentials {
            access_key: "ak".into(),
            secret_key: "sk".into(),
        };
        let date = "20240101T000000Z".to_string();
        // Signed by the client's signer (upper-case hex).
        let client = ferrymq_core::rocketmq::Credentials::new("ak", "sk", None).unwrap();
        let signed = ferrymq_core::rocketmq::metadata::sign(&client, &date);
        let with = |header: String, date: &str| {
            md(&[("x-mq-date-time", date.into()), ("authorization", header)])
        };
        assert!(authorize(&with(signed.clone(), &date), &creds).is_ok());
        let (head, sig) = signed.rsplit_once("Signature=").unwrap();
        let lower = format!("{head}Signature={}", sig.to_lowercase());
        let region = lower.replace("Credential=ak,", "Credential=ak/region,");
        assert!(authorize(&with(region, &date), &creds).is_ok());
        let bad = with(signed.clone(), "20240101T000001Z");
        assert_eq!(authorize(&bad, &creds).unwrap_err().0, status::UNAUTHORIZED);
        assert!(authorize(&MetadataMap::new(), &creds).is_err());
        let wrong_ak = signed.replace("Credential=ak,", "Credential=other,");
        assert!(authorize(&with(wrong_ak, &date), &creds).is_err());
    }

    #[test]
    fn remembered_signatures_answer_as_the_check_does() {
        let creds = Credentials {
            access_key: "ak".into(),
            secret_key: "sk".into(),
        };
        let client = ferrymq_core::rocketmq::Credentials::new("ak", "sk", None).unwrap();
        let verified = Verified::default();
        let with = |header: &str, date: &str| {
            md(&[
                ("x-mq-date-time", date.into()),
                ("authorization", header.into()),
            ])
        };
        let dates: Vec<String> = (0..20).map(|i| format!("20240101T0000{i:02}Z")).collect();
        for _ in 0..2 {
            for date in &dates {
                let signed = ferrymq_core::rocketmq::metadata::sign(&client, date);
                assert!(verified.authorize(&with(&signed, date), &creds).is_ok());
                // The same signature with another date, or another key's, is refused however
                // often the valid pair was seen.
                let other_date = format!("{date}0");
                let refused = verified.authorize(&with(&signed, &other_date), &creds);
                assert_eq!(refused.unwrap_err().0, status::UNAUTHORIZED);
                let wrong_ak = signed.replace("Credential=ak,", "Credential=other,");
                let refused = verified.authorize(&with(&wrong_ak, date), &creds);
                assert_eq!(refused.unwrap_err().0, status::UNAUTHORIZED);
            }
        }
        assert_eq!(verified.0.lock().len(), REMEMBERED);
        let other = Credentials {
            access_key: "ak".into(),
            secret_key: "other".into(),
        };
        let signed = ferrymq_core::rocketmq::metadata::sign(&client, &dates[0]);
        assert!(authorize(&with(&signed, &dates[0]), &other).is_err());
        assert!(verified.authorize(&MetadataMap::new(), &creds).is_err());
    }

    #[test]
    fn client_id_is_required() {
        assert_eq!(
            client_id(&MetadataMap::new()).unwrap_err().0,
            status::CLIENT_ID_REQUIRED
        );
        assert_eq!(
            client_id(&md(&[("x-mq-client-id", "c1".into())])).unwrap(),
            "c1"
        );
    }
}
