//! The `Anlyon-Signature` header: `t=<unix seconds>`, a `v1` HMAC-SHA256 over
//! `"{t}.{body}"` for each signing secret, then `env=<environment id>` and a `v2` HMAC over
//! `"anlyon-delivery-v2.{t}.{env}.{body}"` for each secret: what the SDK's `Receiver` verifies
//! (v1 without, v2 with `expected_environment_id`). During a rotation's grace both the new and
//! the previous secret sign, so receivers holding either accept the delivery.

use crate::vault::hmac_sha256;

/// The header's value for `body` at `timestamp_s`, signed with each of `secrets`.
pub(crate) fn header(body: &str, timestamp_s: i64, env: &str, secrets: &[String]) -> String {
    let mut parts = vec![format!("t={timestamp_s}")];
    for secret in secrets {
        let v1 = hmac_sha256(
            secret.as_bytes(),
            format!("{timestamp_s}.{body}").as_bytes(),
        );
        parts.push(format!("v1={}", hex::encode(v1)));
    }
    parts.push(format!("env={env}"));
    for secret in secrets {
        let message = format!("anlyon-delivery-v2.{timestamp_s}.{env}.{body}");
        let v2 = hmac_sha256(secret.as_bytes(), message.as_bytes());
        parts.push(format!("v2={}", hex::encode(v2)));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Computed independently with Python's `hmac.new(secret, payload, sha256).hexdigest()`.
    #[test]
    fn signs_as_the_receiver_computes() {
        let h = header(
            "{\"a\":1}",
            1700000000,
            "env_1",
            &["whsec_test".to_string()],
        );
        let parts: Vec<&str> = h.split(',').collect();
        assert_eq!(parts[0], "t=1700000000");
        assert_eq!(parts[2], "env=env_1");
        assert_eq!(parts.len(), 4);
        assert_eq!(
            parts[1],
            "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
    }

    #[test]
    fn both_secrets_sign_during_a_rotation() {
        let h = header("x", 1, "env_1", &["new".into(), "old".into()]);
        assert_eq!(h.matches("v1=").count(), 2);
        assert_eq!(h.matches("v2=").count(), 2);
        assert_eq!(h.matches("env=").count(), 1);
    }
}
