//! Hostile input, as properties: key parsing, fingerprints (RFC 8785 JCS) and stored-response
//! decoding never panic on any input, and keep their promises on inputs built to probe them.
//! The cargo-fuzz targets under `fuzz/` drive the same entry points with coverage guidance.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use idemkey_core::{Fingerprint, Key, KeyError, MAX_KEY_LEN, StoredResponse};
use proptest::prelude::*;
use serde_json::Value;

/// Bytes that exercise every branch of the quoted form: quotes, escapes, lists, spaces,
/// control and non-ASCII bytes.
fn tricky_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop::sample::select(vec![b'"', b'\\', b',', b' ', b'\t', b'a', 0x7f, 0x80, 0]);
    prop::collection::vec(byte, 0..max)
}

/// JSON values without floats, so that distinct values are distinct JSON texts. Integers
/// stay within ±2^53: beyond, canonicalising would lose digits, so such a body is hashed raw
/// (behaviour §4) and its whitespace counts.
fn json() -> impl Strategy<Value = Value> {
    const EXACT: i64 = 1 << 53;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-EXACT..=EXACT).prop_map(Value::from),
        "[a-z\u{e9}\u{1F600}\"\\\\ ]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// `value` as JSON text with object members in a shuffled order and arbitrary whitespace.
fn shuffled(value: &Value, seed: &mut u64) -> String {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let space = [" ", "", "\n\t", "  "][(*seed >> 60) as usize % 4];
    match value {
        Value::Array(items) => {
            let items: Vec<_> = items.iter().map(|v| shuffled(v, seed)).collect();
            format!("[{space}{}{space}]", items.join(&format!(",{space}")))
        }
        Value::Object(map) => {
            let mut members: Vec<_> = map
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}{space}:{space}{}",
                        Value::from(k.as_str()),
                        shuffled(v, seed)
                    )
                })
                .collect();
            let turn = (*seed >> 33) as usize % members.len().max(1);
            members.rotate_left(turn);
            members.reverse();
            format!("{{{space}{}{space}}}", members.join(","))
        }
        other => other.to_string(),
    }
}

fn json_fp(body: &[u8]) -> Fingerprint {
    Fingerprint::builder("POST", "/v1/notes")
        .content_type("application/json")
        .body(body)
}

proptest! {
    #[test]
    fn keys_never_panic_on_tricky_or_long_input(bytes in tricky_bytes(600)) {
        let _ = Key::parse(&bytes);
        let two: [&[u8]; 2] = [&bytes, b"k"];
        prop_assert_eq!(Key::from_header_values(two), Err(KeyError::Multiple));
    }

    #[test]
    fn bare_keys_ignore_surrounding_whitespace(key in "[!-~]{1,255}", pad in "[ \t]{0,3}") {
        prop_assume!(!key.starts_with('"'));
        let padded = format!("{pad}{key}{pad}");
        let parsed = Key::parse(padded.as_bytes()).unwrap();
        prop_assert_eq!(parsed.as_str(), key.as_str());
    }

    #[test]
    fn a_byte_outside_visible_ascii_is_rejected(
        key in "[!#-~][!-~]{1,199}",
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![0u8..=0x20, 0x7fu8..=0xff],
    ) {
        let mut bytes = key.into_bytes();
        let at = 1 + at.index(bytes.len() - 1);
        bytes.insert(at, bad);
        prop_assert!(matches!(Key::parse(&bytes), Err(KeyError::InvalidCharacter(_))));
    }

    #[test]
    fn keys_over_the_limit_are_rejected(len in MAX_KEY_LEN + 1..2000) {
        prop_assert_eq!(Key::parse(&vec![b'k'; len]), Err(KeyError::TooLong));
    }

    #[test]
    fn member_order_and_whitespace_never_change_the_fingerprint(value in json(), seed in any::<u64>()) {
        let compact = serde_json::to_vec(&value).unwrap();
        let mut seed = seed;
        let reordered = shuffled(&value, &mut seed);
        prop_assert_eq!(json_fp(&compact), json_fp(reordered.as_bytes()), "{}", reordered);
    }

    #[test]
    fn different_documents_never_share_a_fingerprint(a in json(), b in json()) {
        prop_assume!(a != b);
        let (a, b) = (serde_json::to_vec(&a).unwrap(), serde_json::to_vec(&b).unwrap());
        prop_assert_ne!(json_fp(&a), json_fp(&b));
    }

    #[test]
    fn fields_never_run_into_each_other(path in "/[a-z/]{0,8}", query in "[a-z=&]{0,8}", cut in 0usize..8) {
        let cut = cut.min(query.len());
        let moved = format!("{path}{}", &query[..cut]);
        let a = Fingerprint::builder("POST", &path).query(Some(&query)).body(b"");
        let b = Fingerprint::builder("POST", &moved).query(Some(&query[cut..])).body(b"");
        // The path is its own length-prefixed field: moving bytes into it always shows.
        prop_assert_eq!(a == b, cut == 0);
    }

    #[test]
    fn decoding_never_panics_and_what_decodes_re_encodes(
        status in 100u16..600,
        headers in prop::collection::vec(("[a-z-]{1,12}", prop::collection::vec(any::<u8>(), 0..24)), 0..6),
        body in prop::collection::vec(any::<u8>(), 0..256),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let response = StoredResponse {
            status,
            headers: headers.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
            body: body.into(),
            body_omitted: false,
        };
        let mut bytes = response.encode();
        for (at, byte, kind) in edits {
            let at = at.index(bytes.len().max(1)).min(bytes.len());
            match kind {
                0 if at < bytes.len() => bytes[at] = byte,
                1 => bytes.truncate(at),
                _ => bytes.insert(at, byte),
            }
        }
        if let Ok(decoded) = StoredResponse::decode(Bytes::from(bytes)) {
            let again = StoredResponse::decode(decoded.encode().into()).unwrap();
            prop_assert_eq!(again, decoded);
        }
    }
}
