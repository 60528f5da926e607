//! `Idempotency-Key` header values: any bytes parse or fail, never panic; an accepted key is
//! 1-255 visible ASCII characters, and its quoted form names the same key.
#![no_main]

use idemkey_core::{Key, MAX_KEY_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = Key::parse(data) {
        let text = key.as_str();
        assert!((1..=MAX_KEY_LEN).contains(&text.len()));
        assert!(text.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        let quoted = format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
        assert_eq!(Key::parse(quoted.as_bytes()).as_ref(), Ok(&key));
    }
    // Several header lines are always rejected, whatever they hold.
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let parsed = Key::from_header_values(lines.iter().copied());
    if lines.len() > 1 {
        assert!(parsed.is_err());
    }
});
