//! One JWT access token checked against one issuer's key (`oauth.rs` finds the issuer and the
//! key): the signature, `iss`, `aud` (RFC 8707: this resource, exactly), `exp` and `nbf` (with
//! the configured leeway), the subject and the scopes. Pure: the key and the time are passed
//! in, so every refusal is a unit test below.
//!
//! Only asymmetric algorithms are accepted (RSA, ECDSA, EdDSA): a key from a public JWKS that
//! claimed to be an HMAC secret would let anyone sign. A key that names its algorithm (`alg`)
//! verifies only tokens of that algorithm.

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::{Map, Value};
use steward_core::Millis;

/// What a token must say to be accepted.
pub struct Expected<'a> {
    pub issuer: &'a str,
    /// This resource's canonical URL (`resource` in the protected resource metadata).
    pub audience: &'a str,
    /// Scopes the token must all hold.
    pub scopes: &'a [String],
    /// How far `exp` and `nbf` may be off, in seconds.
    pub leeway_s: i64,
    /// The claim that names the subject (`sub` unless configured).
    pub subject_claim: &'a str,
}

/// A token that passed every check.
#[derive(Debug, PartialEq)]
pub struct Verified {
    pub subject: String,
    pub expires_at: Millis,
}

/// Why a token was refused. Every one but [`Rejection::InsufficientScope`] is a 401
/// `invalid_token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Not a JWT, or its header or claims could not be read.
    Malformed,
    /// `iss` names no configured issuer.
    UnknownIssuer,
    /// The issuer's key set has no key the header names.
    UnknownKey,
    /// A symmetric algorithm, or one the key is not for.
    Algorithm,
    Signature,
    Issuer,
    /// Issued for another resource (RFC 8707).
    Audience,
    Expired,
    NotYetValid,
    /// `exp`, `iss`, `aud` or the subject claim is missing.
    MissingClaim,
    /// Valid, but without every required scope: 403 `insufficient_scope`.
    InsufficientScope,
}

impl Rejection {
    /// The `error_description` of the challenge: says what was wrong, never what the token held.
    pub fn description(self) -> &'static str {
        match self {
            Rejection::Malformed => "the access token is not a readable JWT",
            Rejection::UnknownIssuer => "the access token's issuer is not one this server trusts",
            Rejection::UnknownKey => {
                "the access token is signed with a key its issuer does not publish"
            }
            Rejection::Algorithm => "the access token's algorithm is not accepted",
            Rejection::Signature => "the access token's signature does not verify",
            Rejection::Issuer => "the access token's issuer does not match",
            Rejection::Audience => "the access token was issued for another resource",
            Rejection::Expired => "the access token has expired",
            Rejection::NotYetValid => "the access token is not valid yet",
            Rejection::MissingClaim => "the access token lacks exp, iss, aud or its subject",
            Rejection::InsufficientScope => "the access token lacks a required scope",
        }
    }
}

/// True when `token` has a JWT's shape (three base64url parts): the bearer `/mcp` checks as
/// an OAuth access token rather than as an agent key.
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| !p.is_empty())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The `iss` the token claims, unverified: only to choose which issuer's keys to check it
/// with (the check then requires the same `iss`).
pub fn claimed_issuer(token: &str) -> Result<String, Rejection> {
    let claims: Map<String, Value> =
        jsonwebtoken::dangerous::insecure_decode_claims(token).map_err(|_| Rejection::Malformed)?;
    match claims.get("iss") {
        Some(Value::String(iss)) => Ok(iss.clone()),
        _ => Err(Rejection::MissingClaim),
    }
}

/// The key id the header names, if any.
pub fn key_id(token: &str) -> Result<Option<String>, Rejection> {
    jsonwebtoken::decode_header(token)
        .map(|h| h.kid)
        .map_err(|_| Rejection::Malformed)
}

/// Checks `token` against `key` and `expected` at `now`.
pub fn verify(
    token: &str,
    key: &Jwk,
    expected: &Expected<'_>,
    now: Millis,
) -> Result<Verified, Rejection> {
    let header = jsonwebtoken::decode_header(token).map_err(|_| Rejection::Malformed)?;
    if header.alg.family() == AlgorithmFamily::Hmac || !key_allows(key, header.alg) {
        return Err(Rejection::Algorithm);
    }
    let decoding = DecodingKey::from_jwk(key).map_err(|_| Rejection::UnknownKey)?;
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[expected.issuer]);
    validation.set_audience(&[expected.audience]);
    // Time is checked below against the injected clock, not the library's.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &decoding, &validation)
        .map_err(|e| rejection(e.kind()))?
        .claims;
    let now_s = now.0.div_euclid(1_000);
    let exp = seconds(claims.get("exp")).ok_or(Rejection::MissingClaim)?;
    if exp.saturating_add(expected.leeway_s) <= now_s {
        return Err(Rejection::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = seconds(Some(nbf)).ok_or(Rejection::Malformed)?;
        if nbf > now_s.saturating_add(expected.leeway_s) {
            return Err(Rejection::NotYetValid);
        }
    }
    let subject = match claims.get(expected.subject_claim) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(Rejection::MissingClaim),
    };
    let held = scopes(&claims);
    if !expected.scopes.iter().all(|s| held.contains(&s.as_str())) {
        return Err(Rejection::InsufficientScope);
    }
    Ok(Verified {
        subject,
        expires_at: Millis(exp.saturating_mul(1_000)),
    })
}

/// True unless the key names an algorithm other than `alg`.
fn key_allows(key: &Jwk, alg: Algorithm) -> bool {
    let named = key
        .common
        .key_algorithm
        .and_then(|a| serde_json::to_value(a).ok());
    let used = serde_json::to_value(alg).ok();
    named.is_none() || named == used
}

fn rejection(kind: &jsonwebtoken::errors::ErrorKind) -> Rejection {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::InvalidSignature => Rejection::Signature,
        K::InvalidIssuer => Rejection::Issuer,
        K::InvalidAudience => Rejection::Audience,
        K::MissingRequiredClaim(_) => Rejection::MissingClaim,
        K::InvalidAlgorithm | K::MissingAlgorithm => Rejection::Algorithm,
        K::InvalidEddsaKey | K::InvalidRsaKey(_) | K::InvalidEcdsaKey | K::InvalidKeyFormat => {
            Rejection::UnknownKey
        }
        _ => Rejection::Malformed,
    }
}

/// A NumericDate claim, in whole seconds.
fn seconds(value: Option<&Value>) -> Option<i64> {
    let value = value?;
    value
        .as_i64()
        .or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// The scopes a token holds: `scope` (RFC 9068, space-separated) or `scp` (a list or a
/// string, as some issuers write it).
fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut held = Vec::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(s)) => held.extend(s.split_ascii_whitespace()),
            Some(Value::Array(list)) => held.extend(list.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const ISSUER: &str = "https://as.example";
    const RESOURCE: &str = "https://steward.example/mcp";
    const NOW_S: i64 = 1_800_000_000;
    const PKCS8_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];

    /// A signing key and its public JWK.
    struct Signer {
        key: EncodingKey,
        jwk: Jwk,
    }

    fn signer(seed: u8) -> Signer {
        let seed = [seed; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let mut der = PKCS8_PREFIX.to_vec();
        der.extend_from_slice(&seed);
        let jwk = serde_json::from_value(json!({
            "kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA",
            "x": URL_SAFE_NO_PAD.encode(public),
        }))
        .unwrap();
        Signer {
            key: EncodingKey::from_ed_der(&der),
            jwk,
        }
    }

    fn claims() -> Value {
        json!({
            "iss": ISSUER, "aud": RESOURCE, "sub": "alice",
            "iat": NOW_S, "nbf": NOW_S, "exp": NOW_S + 600,
            "scope": "openid steward:mcp",
        })
    }

    fn sign(signer: &Signer, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(&header, claims, &signer.key).unwrap()
    }

    fn check(token: &str, key: &Jwk, now_s: i64) -> Result<Verified, Rejection> {
        let scopes = ["steward:mcp".to_string()];
        let expected = Expected {
            issuer: ISSUER,
            audience: RESOURCE,
            scopes: &scopes,
            leeway_s: 60,
            subject_claim: "sub",
        };
        verify(token, key, &expected, Millis(now_s * 1_000))
    }

    fn with(field: &str, value: Value) -> Value {
        let mut claims = claims();
        claims[field] = value;
        claims
    }

    #[test]
    fn a_token_of_the_issuer_for_this_resource_with_the_scope_is_accepted() {
        let s = signer(1);
        let verified = check(&sign(&s, &claims()), &s.jwk, NOW_S).unwrap();
        assert_eq!(verified.subject, "alice");
        assert_eq!(verified.expires_at, Millis((NOW_S + 600) * 1_000));
        // An audience list that includes this resource is this resource's token too.
        let listed = with("aud", json!(["https://other.example", RESOURCE]));
        assert!(check(&sign(&s, &listed), &s.jwk, NOW_S).is_ok());
    }

    #[test]
    fn a_wrong_issuer_is_refused() {
        let s = signer(1);
        let token = sign(&s, &with("iss", json!("https://evil.example")));
        assert_eq!(check(&token, &s.jwk, NOW_S), Err(Rejection::Issuer));
    }

    #[test]
    fn a_token_for_another_audience_is_refused() {
        let s = signer(1);
        for aud in [
            json!("https://other.example/mcp"),
            json!("https://steward.example/mcp/"),
            json!("https://steward.example"),
            json!([]),
        ] {
            let token = sign(&s, &with("aud", aud.clone()));
            assert_eq!(
                check(&token, &s.jwk, NOW_S),
                Err(Rejection::Audience),
                "{aud}"
            );
        }
    }

    #[test]
    fn a_signature_by_another_key_or_a_tampered_payload_is_refused() {
        let (s, other) = (signer(1), signer(2));
        let token = sign(&other, &claims());
        assert_eq!(check(&token, &s.jwk, NOW_S), Err(Rejection::Signature));
        // The payload of a good token swapped for another subject's.
        let good = sign(&s, &claims());
        let forged = URL_SAFE_NO_PAD.encode(with("sub", json!("mallory")).to_string());
        let parts: Vec<&str> = good.split('.').collect();
        let tampered = format!("{}.{}.{}", parts[0], forged, parts[2]);
        assert_eq!(check(&tampered, &s.jwk, NOW_S), Err(Rejection::Signature));
    }

    #[test]
    fn an_expired_token_is_refused_past_the_leeway_and_not_before() {
        let s = signer(1);
        let token = sign(&s, &claims());
        let exp = NOW_S + 600;
        assert!(check(&token, &s.jwk, exp + 59).is_ok());
        assert_eq!(check(&token, &s.jwk, exp + 60), Err(Rejection::Expired));
        let early = sign(&s, &with("nbf", json!(NOW_S + 61)));
        assert_eq!(check(&early, &s.jwk, NOW_S), Err(Rejection::NotYetValid));
    }

    #[test]
    fn a_missing_scope_is_insufficient_scope() {
        let s = signer(1);
        for scope in [json!("openid"), json!("steward:mcp:read"), json!(null)] {
            let token = sign(&s, &with("scope", scope.clone()));
            assert_eq!(
                check(&token, &s.jwk, NOW_S),
                Err(Rejection::InsufficientScope),
                "{scope}"
            );
        }
        let scp = sign(&s, &with("scope", json!(null)));
        let mut listed = claims();
        listed["scp"] = json!(["steward:mcp"]);
        listed.as_object_mut().unwrap().remove("scope");
        assert!(check(&sign(&s, &listed), &s.jwk, NOW_S).is_ok());
        assert!(check(&scp, &s.jwk, NOW_S).is_err());
    }

    #[test]
    fn missing_claims_and_symmetric_algorithms_are_refused() {
        let s = signer(1);
        for claim in ["exp", "aud", "sub"] {
            let mut claims = claims();
            claims.as_object_mut().unwrap().remove(claim);
            let token = sign(&s, &claims);
            assert_eq!(
                check(&token, &s.jwk, NOW_S),
                Err(Rejection::MissingClaim),
                "{claim}"
            );
        }
        let hmac = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(),
            &EncodingKey::from_secret(b"public").unwrap(),
        )
        .unwrap();
        assert_eq!(check(&hmac, &s.jwk, NOW_S), Err(Rejection::Algorithm));
        assert_eq!(check("not.a.jwt", &s.jwk, NOW_S), Err(Rejection::Malformed));
    }

    #[test]
    fn only_jwt_shaped_bearers_are_taken_for_access_tokens() {
        let s = signer(1);
        assert!(looks_like_jwt(&sign(&s, &claims())));
        assert!(!looks_like_jwt("stw_abc123"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a b.c.d"));
        assert_eq!(claimed_issuer(&sign(&s, &claims())), Ok(ISSUER.to_string()));
    }
}
