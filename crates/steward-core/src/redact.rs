//! Redaction: every secret value a request used is scrubbed out of whatever comes back (the
//! provider's answer, a transport error, a read-back) before it is stored, logged or shown.
//!
//! A provider rarely echoes a secret byte for byte. It echoes what it received or what it
//! parsed, in its own encoding, so each secret is also looked for as:
//! - JSON-escaped, any mix per character of the plain character, its short escape (`\"`, `\\`,
//!   `\/`, `\n`, `\r`, `\t`, `\b`, `\f`) and `\uXXXX` in either case (with surrogate pairs):
//!   a provider's JSON answer, or JSON quoted in an error message;
//! - percent-encoded, any mix per byte of the plain byte and `%XX` in either case, a space also
//!   as `+`: a URL, a query or a form body echoed back (every encoder differs in which bytes it
//!   leaves alone, so all of them are covered at once);
//! - base64, standard and URL-safe alphabets, with and without padding, and the run of base64
//!   characters that the secret fixes whatever bytes stand before it (three alignments), so that
//!   `base64("user:" + secret)` and `base64(secret + ":")`, as HTTP Basic sends them, are
//!   caught too; each base64 form is itself matched JSON-escaped and percent-encoded.
//!
//! JSON answers are redacted on parsed values ([`redact_json`]): every string and every key,
//! after the provider's own escaping is undone, then serialized again.

use serde_json::Value;

/// The text that replaces a secret value wherever it would otherwise be stored or shown.
pub const REDACTED: &str = "[REDACTED]";

/// The shortest base64 form looked for, in characters. A shorter run (from a secret of fewer
/// than six bytes) is too likely to occur by chance in ordinary text or ids, where replacing it
/// would corrupt the answer; eight characters carry 48 bits of the secret.
pub const BASE64_FORM_CHARS_MIN: usize = 8;

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of `bytes` without padding.
fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Every base64 form of `secret` worth looking for (see the module's comment).
fn base64_forms(secret: &str) -> Vec<String> {
    let bytes = secret.as_bytes();
    let mut forms = Vec::new();
    for alphabet in [STANDARD, URL_SAFE] {
        let plain = base64(bytes, alphabet);
        let padding = "=".repeat((4 - plain.len() % 4) % 4);
        forms.push(format!("{plain}{padding}"));
        forms.push(plain);
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = base64(&shifted, alphabet);
            // The characters whose six bits all come from the secret.
            let first = (8 * offset).div_ceil(6);
            let end = 8 * (offset + bytes.len()) / 6;
            if end > first {
                forms.push(encoded[first..end].to_string());
            }
        }
    }
    forms.retain(|f| f.len() >= BASE64_FORM_CHARS_MIN);
    forms.sort();
    forms.dedup();
    forms
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Reads `\uXXXX` at `at`: the code unit and where it ends.
fn json_unit(text: &[u8], at: usize) -> Option<(u16, usize)> {
    let digits = text.get(at..at + 6)?;
    if digits[0] != b'\\' || digits[1] != b'u' {
        return None;
    }
    let mut unit = 0u16;
    for &d in &digits[2..] {
        unit = unit * 16 + u16::from(hex_value(d)?);
    }
    Some((unit, at + 6))
}

/// Where `c` ends when it starts at `at`, in each way it may be written: plain, percent-encoded
/// (per byte), or JSON-escaped.
fn char_ends(text: &[u8], at: usize, c: char, out: &mut Vec<usize>) {
    // Plain or percent-encoded, byte by byte (a space also as `+`).
    let mut utf8 = [0u8; 4];
    let mut reached = vec![at];
    for &b in c.encode_utf8(&mut utf8).as_bytes() {
        let mut next = Vec::new();
        for &p in &reached {
            if text.get(p) == Some(&b) || (b == b' ' && text.get(p) == Some(&b'+')) {
                next.push(p + 1);
            }
            if text.get(p) == Some(&b'%') {
                if let (Some(hi), Some(lo)) = (
                    text.get(p + 1).copied().and_then(hex_value),
                    text.get(p + 2).copied().and_then(hex_value),
                ) {
                    if hi * 16 + lo == b {
                        next.push(p + 3);
                    }
                }
            }
        }
        reached = next;
        if reached.is_empty() {
            break;
        }
    }
    out.extend(reached);
    // JSON escapes.
    if text.get(at) != Some(&b'\\') {
        return;
    }
    let short = match c {
        '"' => Some(b'"'),
        '\\' => Some(b'\\'),
        '/' => Some(b'/'),
        '\n' => Some(b'n'),
        '\r' => Some(b'r'),
        '\t' => Some(b't'),
        '\u{8}' => Some(b'b'),
        '\u{c}' => Some(b'f'),
        _ => None,
    };
    if short.is_some() && text.get(at + 1).copied() == short {
        out.push(at + 2);
    }
    let mut units = [0u16; 2];
    let units = c.encode_utf16(&mut units);
    let mut p = at;
    for &unit in units.iter() {
        match json_unit(text, p) {
            Some((found, end)) if found == unit => p = end,
            _ => return,
        }
    }
    out.push(p);
}

/// Where a match of `needle` that starts at `at` ends (the longest), if one does.
fn match_end(text: &[u8], at: usize, needle: &[char]) -> Option<usize> {
    let mut reached = vec![at];
    for &c in needle {
        let mut next = Vec::new();
        for &p in &reached {
            char_ends(text, p, c, &mut next);
        }
        next.sort_unstable();
        next.dedup();
        if next.is_empty() {
            return None;
        }
        reached = next;
    }
    reached.last().copied()
}

/// Every byte range of `text` that spells `needle` in any of the covered encodings.
fn matches(text: &str, needle: &str, ranges: &mut Vec<(usize, usize)>) {
    let chars: Vec<char> = needle.chars().collect();
    let Some(&first) = chars.first() else {
        return;
    };
    let mut utf8 = [0u8; 4];
    let lead = first.encode_utf8(&mut utf8).as_bytes()[0];
    let bytes = text.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        // Every encoding of the first character starts with one of these bytes.
        let may_start = b == lead || b == b'%' || b == b'\\' || (first == ' ' && b == b'+');
        if !may_start || !text.is_char_boundary(at) {
            continue;
        }
        if let Some(end) = match_end(bytes, at, &chars) {
            if text.is_char_boundary(end) {
                ranges.push((at, end));
            }
        }
    }
}

/// What is looked for: each secret and each of its base64 forms (each matched in every
/// encoding `char_ends` knows), worked out once for a whole answer.
struct Needles(Vec<String>);

impl Needles {
    fn of(secret_values: &[String]) -> Needles {
        let mut all = Vec::new();
        for secret in secret_values.iter().filter(|v| !v.is_empty()) {
            all.push(secret.clone());
            all.extend(base64_forms(secret));
        }
        Needles(all)
    }

    /// Whether `text` may hold a match. Every encoding but the plain one needs a `%` (percent),
    /// a `\` (a JSON escape) or a `+` (a form-encoded space); in a text with none of them a
    /// match is a needle byte for byte, so a text that contains no needle has none, and is
    /// kept without the walk over every position [`matches`] makes.
    fn may_match(&self, text: &str) -> bool {
        text.bytes().any(|b| matches!(b, b'%' | b'\\' | b'+'))
            || self.0.iter().any(|needle| text.contains(needle.as_str()))
    }

    fn redact(&self, text: &str) -> String {
        if !self.may_match(text) {
            return text.to_string();
        }
        self.walk(text)
    }

    /// Every match at every position of `text`, replaced.
    fn walk(&self, text: &str) -> String {
        let mut ranges = Vec::new();
        for needle in &self.0 {
            matches(text, needle, &mut ranges);
        }
        if ranges.is_empty() {
            return text.to_string();
        }
        ranges.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        let mut i = 0;
        while i < ranges.len() {
            let (start, mut end) = ranges[i];
            while i + 1 < ranges.len() && ranges[i + 1].0 <= end {
                i += 1;
                end = end.max(ranges[i].1);
            }
            out.push_str(&text[copied..start]);
            out.push_str(REDACTED);
            copied = end;
            i += 1;
        }
        out.push_str(&text[copied..]);
        out
    }

    fn redact_json(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Number(n) => {
                let text = n.to_string();
                let scrubbed = self.redact(&text);
                if scrubbed == text {
                    value.clone()
                } else {
                    Value::String(scrubbed)
                }
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.redact_json(i)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.redact(k), self.redact_json(v)))
                    .collect(),
            ),
            Value::Null | Value::Bool(_) => value.clone(),
        }
    }
}

/// Replaces every occurrence of every secret value in `text`, in every encoding the module's
/// comment lists.
pub fn redact(text: &str, secret_values: &[String]) -> String {
    Redactor::new(secret_values).text(text)
}

/// Redacts a parsed JSON value: every string and every key (after the provider's own escaping
/// was undone by parsing), and a number that spells a secret becomes the redacted string.
pub fn redact_json(value: &Value, secret_values: &[String]) -> Value {
    Redactor::new(secret_values).json(value)
}

/// [`redact`] and [`redact_json`] for several texts and values scrubbed of the same secrets:
/// the forms looked for (each secret's base64 forms) are worked out once.
pub struct Redactor(Needles);

impl Redactor {
    pub fn new(secret_values: &[String]) -> Redactor {
        Redactor(Needles::of(secret_values))
    }

    /// [`redact`] of `text`.
    pub fn text(&self, text: &str) -> String {
        self.0.redact(text)
    }

    /// [`redact_json`] of `value`.
    pub fn json(&self, value: &Value) -> Value {
        if self.0 .0.is_empty() {
            return value.clone();
        }
        self.0.redact_json(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secrets(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| s.to_string()).collect()
    }

    fn assert_redacted(text: &str, secret: &str) {
        let out = redact(text, &secrets(&[secret]));
        assert!(out.contains(REDACTED), "not redacted: {text} -> {out}");
        for leftover in [secret, "sEcr", "s3cr"] {
            assert!(!out.contains(leftover), "{leftover} left in {out}");
        }
    }

    /// The standard library of a test: RFC 4648's base64, to check the hand-written one.
    fn reference_base64(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(STANDARD[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn redaction_removes_every_occurrence() {
        let out = redact("a sk_test_123 b sk_test_123", &secrets(&["sk_test_123"]));
        assert_eq!(out, "a [REDACTED] b [REDACTED]");
        assert_eq!(
            redact("nothing here", &secrets(&["sk_test_123", ""])),
            "nothing here"
        );
    }

    #[test]
    fn a_json_escaped_secret_is_redacted() {
        let secret = r#"s3cr"et\with/slash"#;
        let escaped = serde_json::to_string(secret).unwrap();
        assert_redacted(&format!("{{\"echo\":{escaped}}}"), secret);
        // Escaping `/` as `\/` (PHP) and everything as \uXXXX, either case.
        assert_redacted(r#"{"echo":"s3cr\"et\\with\/slash"}"#, secret);
        let unicode: String = secret
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        assert_redacted(&unicode, secret);
        assert_redacted(&unicode.to_uppercase().replace("\\U", "\\u"), secret);
        // Control characters, and a character outside the BMP as a surrogate pair.
        assert_redacted(r"s3cr\nline\ttab", "s3cr\nline\ttab");
        assert_redacted(r"s3cr\ud83d\ude00x", "s3cr\u{1f600}x");
        assert_redacted(r"s3cr\uD83D\uDE00x", "s3cr\u{1f600}x");
        // Python's json.dumps (ensure_ascii) writes non-ASCII as \u escapes.
        assert_redacted(r"s3cr\u00e9t", "s3cré");
    }

    #[test]
    fn a_percent_encoded_secret_is_redacted() {
        let secret = "s3cr+et/with=and space~ü";
        for encoded in [
            // Everything but unreserved, upper case (Steward's own URL encoding).
            "s3cr%2Bet%2Fwith%3Dand%20space~%C3%BC",
            // Lower-case hex.
            "s3cr%2bet%2fwith%3dand%20space~%c3%bc",
            // Form encoding: space as `+`, `~` encoded.
            "s3cr%2Bet%2Fwith%3Dand+space%7E%C3%BC",
            // A path encoder that leaves `+`, `/` and `=` alone.
            "s3cr+et/with=and%20space~%C3%BC",
        ] {
            assert_redacted(&format!("GET /x?token={encoded}&y=1"), secret);
        }
        assert_eq!(
            redact(
                "a?t=s3cr%2Bet%2Fwith%3Dand%20space~%C3%BC&b",
                &secrets(&[secret])
            ),
            "a?t=[REDACTED]&b"
        );
    }

    #[test]
    fn base64_forms_match_rfc_4648() {
        for secret in ["", "a", "ab", "abc", "abcd", "sk_test_\u{ff}?>~"] {
            let bytes = secret.as_bytes();
            let padded = reference_base64(bytes);
            assert_eq!(base64(bytes, STANDARD), padded.trim_end_matches('='));
        }
    }

    #[test]
    fn a_base64_encoded_secret_is_redacted() {
        // Bytes that give `+` and `/` in standard base64 and `-` and `_` in URL-safe.
        let secret = "s3cr?>et~~~key";
        let std_padded = reference_base64(secret.as_bytes());
        assert!(std_padded.ends_with('='), "{std_padded}");
        assert!(std_padded.contains(['+', '/']), "{std_padded}");
        let url_safe = std_padded.replace('+', "-").replace('/', "_");
        for form in [
            std_padded.clone(),
            std_padded.trim_end_matches('=').to_string(),
            url_safe.clone(),
            url_safe.trim_end_matches('=').to_string(),
        ] {
            assert_eq!(
                redact(&format!("x {form} y"), &secrets(&[secret])),
                "x [REDACTED] y",
                "{form}"
            );
        }
        // HTTP Basic credentials: user:secret and secret: (the secret as user name).
        for basic in [
            format!("user:{secret}"),
            format!("{secret}:"),
            format!("ab:{secret}:x"),
        ] {
            let encoded = reference_base64(basic.as_bytes());
            let out = redact(
                &format!("Authorization: Basic {encoded}"),
                &secrets(&[secret]),
            );
            assert!(out.contains(REDACTED), "{basic}: {out}");
            // What is left of the encoding carries less than two of the secret's bytes.
            let left = out
                .trim_start_matches("Authorization: Basic ")
                .replace(REDACTED, "");
            assert!(
                left.len() <= encoded.len() - (secret.len() * 4 / 3 - 2),
                "{basic}: {out}"
            );
        }
        // Percent-encoded and JSON-escaped base64.
        let in_url = std_padded
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        assert_eq!(redact(&in_url, &secrets(&[secret])), REDACTED);
        let in_json = std_padded.replace('/', "\\/");
        assert_eq!(redact(&in_json, &secrets(&[secret])), REDACTED);
        // A short secret's base64 is too short to look for without corrupting other text.
        assert_eq!(redact("YWJj", &secrets(&["abc"])), "YWJj");
    }

    #[test]
    fn json_is_redacted_on_parsed_values_and_keys() {
        let secret = r#"pa"ss\wo/rd"#;
        let answer = json!({
            "echo": secret,
            secret: "as a key",
            "nested": [{"note": format!("token={secret};")}],
            "encoded": "pa%22ss%5Cwo%2Frd",
            "n": 1,
        });
        let out = redact_json(&answer, &secrets(&[secret]));
        let text = out.to_string();
        assert!(!text.contains("ss\\\\wo"), "{text}");
        assert!(!text.contains("pa%22ss"), "{text}");
        assert_eq!(out["echo"], REDACTED);
        assert_eq!(out[REDACTED], "as a key");
        assert_eq!(out["nested"][0]["note"], "token=[REDACTED];");
        assert_eq!(out["n"], 1);
        // A numeric secret echoed as a JSON number.
        let out = redact_json(&json!({"pin": 98765432}), &secrets(&["98765432"]));
        assert_eq!(out["pin"], REDACTED);
    }

    #[test]
    fn text_around_matches_is_kept_whole() {
        let out = redact("é sk_x é %sk_x% \\sk_x", &secrets(&["sk_x"]));
        assert_eq!(out, "é [REDACTED] é %[REDACTED]% \\[REDACTED]");
    }

    proptest::proptest! {
        #[test]
        fn redaction_never_panics_and_always_removes_the_plain_secret(
            text in "\\PC{0,60}",
            secret in "[a-z%+\\\\\" /=é]{1,12}",
        ) {
            let wrapped = format!("{text}{secret}{text}");
            let out = redact(&wrapped, &secrets(&[&secret]));
            proptest::prop_assert!(out.contains(REDACTED));
            proptest::prop_assert_eq!(redact(&secret, &secrets(&[&secret])), REDACTED);
        }

        /// The shortcut (a text with no `%`, `\`, `+` and no needle is kept as it is) answers
        /// what the walk over every position answers, for texts made of the secret's pieces,
        /// its encodings' characters and its base64 forms.
        #[test]
        fn the_shortcut_answers_what_the_walk_answers(
            pieces in proptest::collection::vec(0usize..8, 0..12),
            secret in "[a-zA-Z0-9 é\"/]{1,10}",
        ) {
            let needles = Needles::of(&secrets(&[&secret]));
            let forms: Vec<&str> = needles.0.iter().map(String::as_str).collect();
            let cut = secret.char_indices().nth(secret.chars().count() / 2).map_or(0, |(i, _)| i);
            let percent: String = secret.bytes().map(|b| format!("%{b:02x}")).collect();
            let form = secret.replace(' ', "+");
            let parts = [
                &secret[..cut], &secret[cut..], "x", "%", "\\", &percent, forms[forms.len() / 2], &form,
            ];
            let text: String = pieces.iter().map(|&i| parts[i]).collect();
            proptest::prop_assert_eq!(needles.redact(&text), needles.walk(&text), "{:?}", text);
        }
    }
}
