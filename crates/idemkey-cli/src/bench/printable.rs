//! Text made safe to print on a terminal.
//!
//! The bench prints no server text on purpose: its tables hold its own names and numbers, a
//! status is printed as its code and the `http` crate's canonical reason (never the server's
//! reason phrase), and its errors name limits and positions rather than quote bodies. Its
//! errors are still escaped where they leave the bench ([`super::run`]), so that a message
//! from below (a library's, the OS's) that ever quotes what a hostile server sent cannot carry
//! an escape sequence to the terminal: one could clear the screen, move the cursor over the
//! table or print a fake result.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether a terminal might act on `c` rather than show it: C0 controls (ESC, BEL, CR, LF,
/// TAB…), DEL, C1 controls (such as U+009B, a one-character CSI) and the Unicode
/// bidirectional formatting characters (which can make text read backwards).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every unsafe character written as a visible Rust-style escape, `\u{1b}` for
/// ESC. Line breaks are escaped too: an error is one line, and a break could forge another.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
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

/// `error`, with its chain of causes, as one printable line (what `{error:#}` prints, escaped).
pub(crate) fn printable_error(error: &anyhow::Error) -> anyhow::Error {
    anyhow::Error::msg(printable(&format!("{error:#}")).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c0_del_c1_and_bidi_controls_are_escaped() {
        let hostile = "a\u{1b}[2J\u{7}\u{9b}1m\u{7f}\r\n\t\u{85}\u{202e}z";
        assert_eq!(
            printable(hostile),
            r"a\u{1b}[2J\u{7}\u{9b}1m\u{7f}\u{d}\u{a}\u{9}\u{85}\u{202e}z"
        );
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "GET /v1/notes: 500 Internal Server Error — café ✓";
        assert!(matches!(printable(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn an_error_chain_becomes_one_escaped_line() {
        let error = anyhow::anyhow!("bad \u{1b}]0;title\u{7}").context("the storm's GET");
        let line = printable_error(&error).to_string();
        assert_eq!(line, r"the storm's GET: bad \u{1b}]0;title\u{7}");
    }
}
