//! Server-supplied text made safe to print on a terminal.
//!
//! Evidence quotes what the server sent (body excerpts, resource ids, header values). Printed
//! raw, an escape sequence in it could clear the screen, move the cursor over the table or
//! print a fake verdict; a bidirectional override could make text read backwards.

use std::{borrow::Cow, fmt::Write as _};

/// Whether a terminal might act on `c` rather than show it: C0 controls (ESC, BEL, CR, LF,
/// TAB…), DEL, C1 controls (such as U+009B, a one-character CSI) and the Unicode
/// bidirectional formatting characters.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every unsafe character written as a visible Rust-style escape, `\u{1b}` for ESC.
///
/// Newlines and tabs are escaped too: evidence is one line by design, and a line break from the
/// server could forge a row of the table. `idemkey-bench` escapes its errors with it as well.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with unsafe characters that `serde_json` leaves raw (DEL, C1 controls,
/// bidirectional formatting) written as `\uXXXX` escapes.
///
/// `serde_json` escapes only what JSON requires (below U+0020). Outside strings JSON text is
/// ASCII, so every character rewritten here sits inside a string, where the escape denotes the
/// very same character: the document keeps its value and becomes safe to `cat`.
pub(crate) fn json_printable(json: String) -> String {
    // Below DEL, only the pretty printer's own line breaks remain raw.
    let needs_escape = |c: char| c >= '\u{7f}' && is_unsafe(c);
    if !json.chars().any(needs_escape) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if needs_escape(c) {
            // Every such character is in the Basic Multilingual Plane: one `\uXXXX` suffices.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_escaped() {
        let hostile = "a\u{1b}[2J\u{7}\u{9b}1m\u{7f}\r\n\t\u{202e}z";
        assert_eq!(
            printable(hostile),
            r"a\u{1b}[2J\u{7}\u{9b}1m\u{7f}\u{d}\u{a}\u{9}\u{202e}z"
        );
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "201 {\"id\":\"n1\"} — café ✓";
        assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn json_keeps_its_value_without_raw_c1_or_bidi() {
        let value = serde_json::json!({"e": "x\u{1b}\u{9b}\u{7f}\u{202e}y é"});
        let json = json_printable(serde_json::to_string_pretty(&value).unwrap());
        assert!(
            !json.contains(['\u{1b}', '\u{9b}', '\u{7f}', '\u{202e}']),
            "{json:?}"
        );
        assert!(json.contains(r"\u009b") && json.contains('é'), "{json:?}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back, value);
    }
}
