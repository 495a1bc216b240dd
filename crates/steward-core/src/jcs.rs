//! The JSON Canonicalization Scheme (JCS, RFC 8785): the one byte form of a JSON value that
//! signed receipts are signed and chained over (`receipt.rs`).
//!
//! [`canonical_json`](crate::canonical_json), which fingerprints requests, is close but not
//! JCS: it sorts object keys by UTF-8 bytes rather than UTF-16 code units, and prints numbers as
//! serde_json does (`1.0`, `1e21`) rather than as ECMAScript does (`1`, `1e+21`). Fingerprints
//! only need to be stable inside Steward; a receipt must canonicalize to the same bytes in any
//! RFC 8785 implementation, so it has this serializer of its own.
//!
//! The rules (RFC 8785 section 3.2): no whitespace; object members sorted by their names'
//! UTF-16 code units; strings with only `"`, `\` and the control characters escaped (`\b`,
//! `\t`, `\n`, `\f`, `\r`, else `\u00xx` in lower case), everything else as UTF-8; numbers as
//! ECMAScript's `Number.prototype.toString` prints the IEEE 754 double they denote (the
//! `ryu-js` crate implements exactly that algorithm).

use serde_json::{Number, Value};
use std::fmt::Write as _;

/// The RFC 8785 canonical form of `value`.
pub fn jcs(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(name, out);
                out.push(':');
                write_value(member, out);
            }
            out.push('}');
        }
    }
}

/// A number as the double it denotes, printed as ECMAScript prints it. An integer past 2^53 is
/// rounded to its nearest double first, as any JCS implementation must (RFC 8785 section 3.2.2.3).
fn write_number(n: &Number, out: &mut String) {
    let double = match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i as f64,
        (None, Some(u), _) => u as f64,
        (None, None, Some(f)) => f,
        // serde_json holds only finite numbers, each of them one of the three above.
        (None, None, None) => unreachable!("a serde_json number is an i64, a u64 or an f64"),
    };
    if double == 0.0 {
        // Both zeros print as "0" (ECMAScript's ToString(-0) is "0").
        out.push('0');
        return;
    }
    let mut buffer = ryu_js::Buffer::new();
    out.push_str(buffer.format_finite(double));
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    // Runs of characters written as they are go in whole; only `"`, `\` and the control
    // characters (all ASCII, so every cut is a character boundary) are escaped.
    let mut copied = 0;
    for (at, b) in s.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0A => "\\n",
            0x0C => "\\f",
            0x0D => "\\r",
            b if b < 0x20 => "",
            _ => continue,
        };
        out.push_str(&s[copied..at]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escaped);
        }
        copied = at + 1;
    }
    out.push_str(&s[copied..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 8785 section 3.2.2: the example input and its canonical form.
    #[test]
    fn the_rfc_8785_example_canonicalizes_to_its_published_form() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let mut value: Value = serde_json::from_str(input).unwrap();
        // serde_json's default parser may land one unit in the last place off the nearest
        // double (its `float_roundtrip` feature is off in this workspace), so the RFC's first
        // number is put in by its bits. Receipts carry integers only, which parse exactly.
        value["numbers"][0] =
            Value::Number(Number::from_f64(f64::from_bits(0x41b3_de43_5555_5555)).unwrap());
        assert_eq!(
            jcs(&value),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
             \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }

    /// RFC 8785 section 3.2.3: members sorted by UTF-16 code units, where a character outside
    /// the BMP (a surrogate pair, 0xD83D...) sorts before U+FB33 though its UTF-8 bytes sort after.
    #[test]
    fn members_are_sorted_by_utf16_code_units_as_in_the_rfc() {
        let value = json!({
            "\u{20ac}": "Euro Sign",
            "\r": "Carriage Return",
            "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\u{1f600}": "Emoji: Grinning Face",
            "\u{0080}": "Control",
            "\u{00f6}": "Latin Small Letter O With Diaeresis",
        });
        let names: Vec<&str> = [
            "\r",
            "1",
            "\u{0080}",
            "\u{00f6}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{fb33}",
        ]
        .to_vec();
        let canonical = jcs(&value);
        let mut at = 0;
        for name in names {
            let found = canonical[at..]
                .find(&format!("\"{}\":", name.replace('\r', "\\r")))
                .unwrap_or_else(|| panic!("{name:?} out of order in {canonical}"));
            at += found + 1;
        }
    }

    /// RFC 8785 appendix B: IEEE 754 doubles (given by their bits) and their canonical text.
    #[test]
    fn numbers_print_as_the_rfc_appendix_b_table_says() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, text) in table {
            let double = f64::from_bits(*bits);
            let value = Value::Number(Number::from_f64(double).unwrap());
            assert_eq!(jcs(&value), *text, "bits {bits:#018x}");
        }
    }

    #[test]
    fn integers_print_as_the_double_they_denote() {
        assert_eq!(jcs(&json!(0)), "0");
        assert_eq!(jcs(&json!(-17)), "-17");
        assert_eq!(jcs(&json!(1_700_000_000_000_i64)), "1700000000000");
        // 2^53 + 1 has no double of its own: it rounds to 2^53.
        assert_eq!(jcs(&json!(9_007_199_254_740_993_u64)), "9007199254740992");
    }

    #[test]
    fn control_characters_use_the_short_escapes_or_lower_case_hex() {
        let value = json!("a\u{1}b\u{1f}\u{7f}\t/");
        assert_eq!(jcs(&value), "\"a\\u0001b\\u001f\u{7f}\\t/\"");
    }

    /// The escaping of every string, written in runs, is the escaping character by character
    /// that RFC 8785 section 3.2.2.2 describes.
    #[test]
    fn strings_are_escaped_as_character_by_character() {
        fn one_by_one(s: &str) -> String {
            let mut out = String::from('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\u{08}' => out.push_str("\\b"),
                    '\u{09}' => out.push_str("\\t"),
                    '\u{0A}' => out.push_str("\\n"),
                    '\u{0C}' => out.push_str("\\f"),
                    '\u{0D}' => out.push_str("\\r"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        proptest::proptest!(|(s in "(\\PC|[\u{0}-\u{1f}\"\\\\\u{7f}é€😀]){0,40}")| {
            let mut out = String::new();
            write_string(&s, &mut out);
            proptest::prop_assert_eq!(out, one_by_one(&s));
        });
    }
}
