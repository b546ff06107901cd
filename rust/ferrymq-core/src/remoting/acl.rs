//! Request signing for brokers with authentication (ACL 1.0 and 2.0 use the same signature).
//!
//! The signature covers every header field except `Signature` itself, sorted by key, with only
//! the values concatenated, followed by the body. It is HMAC-SHA1 with the secret key, in
//! standard padded base64. Signing must be the last change to a request: any field added later
//! would not be covered and the broker would refuse the request.

use ring::hmac;

use super::codec::RemotingCommand;
use crate::rocketmq::metadata::Credentials;

/// Header field carrying the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// Header field carrying the signature.
pub const SIGNATURE: &str = "Signature";
/// Header field carrying the optional session token.
pub const SECURITY_TOKEN: &str = "SecurityToken";

/// The signature of `ext_fields` and `body` with `secret`.
pub fn sign(ext_fields: &[(String, String)], body: &[u8], secret: &str) -> String {
    let mut fields: Vec<&(String, String)> =
        ext_fields.iter().filter(|(k, _)| k != SIGNATURE).collect();
    // Java sorts the keys as a `TreeMap<String, _>`: by UTF-16 code units.
    fields.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    for (_, v) in fields {
        ctx.update(v.as_bytes());
    }
    ctx.update(body);
    base64(ctx.sign().as_ref())
}

/// Add the access key (and token), then the signature, to a request whose other fields are
/// final.
pub fn sign_command(cmd: &mut RemotingCommand, credentials: &Credentials) {
    cmd.set_ext(ACCESS_KEY, credentials.access_key());
    if let Some(t) = credentials.security_token() {
        cmd.set_ext(SECURITY_TOKEN, t);
    }
    let sig = sign(&cmd.ext_fields, &cmd.body, credentials.secret_key());
    cmd.set_ext(SIGNATURE, sig);
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_sorted_values_and_body() {
        // HMAC-SHA1("SK", "AK" + "7" + "orders" + "body"): keys AccessKey < queueId < topic.
        let creds = Credentials::new("AK", "SK", None).unwrap();
        let mut cmd = RemotingCommand::request(30)
            .with_ext("topic", "orders")
            .with_ext("queueId", 7)
            .with_body(&b"body"[..]);
        sign_command(&mut cmd, &creds);
        assert_eq!(cmd.ext(ACCESS_KEY), Some("AK"));
        assert_eq!(cmd.ext(SIGNATURE), Some("ilScdhBxhhg+0LOJHfWly7MPors="));
        // Re-signing ignores the old signature.
        assert_eq!(
            sign(&cmd.ext_fields, &cmd.body, "SK"),
            "ilScdhBxhhg+0LOJHfWly7MPors="
        );
    }
}
