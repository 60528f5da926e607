//! Text made safe to print on a terminal.
//!
//! The bench prints no server text on purpose: its tables hold its own names and numbers, a
//! status is printed as its code and the `http` crate's canonical reason (never the server's
//! reason phrase), and its errors name limits and positions rather than quote bodies. Its
//! errors are still escaped where they leave the bench ([`crate::run`]), so that a message
//! from below (a library's, the OS's) that ever quotes what a hostile server sent cannot carry
//! an escape sequence to the terminal: one could clear the screen, move the cursor over the
//! table or print a fake result.

use idemkey_check::printable;

/// `error`, with its chain of causes, as one printable line (what `{error:#}` prints, escaped).
pub(crate) fn printable_error(error: &anyhow::Error) -> anyhow::Error {
    anyhow::Error::msg(printable(&format!("{error:#}")).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_becomes_one_escaped_line() {
        let error = anyhow::anyhow!("bad \u{1b}]0;title\u{7}").context("the storm's GET");
        let line = printable_error(&error).to_string();
        assert_eq!(line, r"the storm's GET: bad \u{1b}]0;title\u{7}");
    }
}
