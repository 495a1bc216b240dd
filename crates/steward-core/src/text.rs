//! Free text people save (names, titles, descriptions, notes, reasons): refused when it holds a
//! character that hides or rearranges what a reviewer reads. A NUL truncates text in C-based
//! tools and logs; U+202E (right-to-left override) makes `refund.exe` read as `exe.dnufer`;
//! U+FEFF is invisible. An approver must see what they approve.

use crate::action::FieldError;

/// Whether a field is one line (a name, a title) or may hold paragraphs (a description, a note,
/// a reason): only the latter may contain line feeds and tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Line,
    Prose,
}

/// Characters refused in every kind of text, besides the C0 and C1 controls.
fn is_hidden_format(c: char) -> bool {
    matches!(c,
        '\u{061C}'                     // Arabic letter mark
        | '\u{200B}'..='\u{200F}'      // zero-width space/joiners, LTR and RTL marks
        | '\u{2028}' | '\u{2029}'      // line and paragraph separators
        | '\u{202A}'..='\u{202E}'      // bidirectional embeddings and overrides
        | '\u{2060}'..='\u{2064}'      // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}'      // bidirectional isolates
        | '\u{FEFF}'                   // zero-width no-break space (BOM)
        | '\u{FFF9}'..='\u{FFFB}'      // interlinear annotation
    )
}

/// The first refused character in `text`, if any.
pub fn refused_char(text: &str, kind: TextKind) -> Option<char> {
    text.chars().find(|&c| {
        let allowed_control = kind == TextKind::Prose && (c == '\n' || c == '\t' || c == '\r');
        (c.is_control() && !allowed_control) || is_hidden_format(c)
    })
}

/// Checks `text` for `field`; the error names the field and the character by code point.
pub fn check_text(field: &str, text: &str, kind: TextKind) -> Result<(), FieldError> {
    match refused_char(text, kind) {
        None => Ok(()),
        Some(c) => Err(FieldError::new(
            field,
            format!(
                "must not contain control or invisible formatting characters (found U+{:04X})",
                c as u32
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hiding_characters_are_refused() {
        for bad in [
            "a\0b",
            "refund\u{202E}exe",
            "\u{FEFF}ok",
            "x\u{2066}y",
            "tab\x1b[31m",
        ] {
            assert!(check_text("name", bad, TextKind::Line).is_err(), "{bad:?}");
            assert!(check_text("note", bad, TextKind::Prose).is_err(), "{bad:?}");
        }
        let err = check_text("title", "a\u{202E}b", TextKind::Line).unwrap_err();
        assert_eq!(err.field, "title");
        assert!(err.message.contains("U+202E"), "{}", err.message);
    }

    #[test]
    fn ordinary_text_is_fine() {
        for good in [
            "Refund order 42",
            "Rückerstattung",
            "返金",
            "emoji 🎉",
            "a-b_c.d",
        ] {
            assert!(check_text("name", good, TextKind::Line).is_ok(), "{good:?}");
        }
        assert!(check_text("note", "line one\nline two\tend", TextKind::Prose).is_ok());
        assert!(check_text("name", "line one\nline two", TextKind::Line).is_err());
    }
}
