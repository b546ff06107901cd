//! Request headers the proxy checks: `x-mq-client-id` (else `CLIENT_ID_REQUIRED`) and, when the
//! broker has credentials, the `authorization` signature (reference §5.2):
//!
//! `MQv2-HMAC-SHA1 Credential=<AK>[/…], SignedHeaders=x-mq-date-time, Signature=<hex>` where the
//! signature is HMAC-SHA1 keyed by the secret over the `x-mq-date-time` value. The hex is compared
//! without regard to case; the date is not parsed and clock skew is not checked (as the server).

use hmac::{Hmac, Mac};
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
