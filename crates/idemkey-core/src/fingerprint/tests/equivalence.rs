//! Equivalence with the reference: fingerprints are persisted, so the canonical bytes and the
//! decision to fall back to raw must not change for any body.

use proptest::prelude::*;

use super::super::jcs;

use super::reference;

fn assert_same_as_reference(body: &[u8]) {
    assert_eq!(
        jcs::canonicalize_lossless(body),
        reference::canonicalize_lossless(body),
        "body: {:?}",
        String::from_utf8_lossy(body)
    );
}

/// Hand-picked bodies: each boundary of the fallback-to-raw decision.
const EDGE_CASES: &[&str] = &[
    // Repeated member names, also spelled differently or nested.
    r#"{"a":1,"a":2}"#,
    r#"{"a":1,"\u0061":2}"#,
    r#"{"\u0061":1,"a":1}"#,
    r#"{"":1,"":1}"#,
    r#"{"x":{"a":1,"b":2,"a":3}}"#,
    r#"[{"a":1},{"a":1,"a":1}]"#,
    r#"{"a":{"a":1},"b":{"a":1}}"#,
    r#"{"😀":1,"\ud83d\ude00":2}"#,
    r#"{"b":1,"a":2,"c":3,"a":4}"#,
    // Member order: UTF-16 code units, which differ from UTF-8 above U+FFFF.
    r#"{"\ue000":1,"\ud800\udc00":2,"z":3,"Z":4,"é":5,"":6}"#,
    r#"{"b":{"d":1,"c":2},"a":[{"f":1,"e":2}]}"#,
    r#"{"ab":1,"a":2,"abc":3,"a\u0000":4}"#,
    // Numbers.
    "1e400",
    "-1e400",
    "1e-400",
    "[1e400]",
    "-0",
    "-0.0",
    "-0e0",
    "0",
    "0.0",
    "0e0",
    "0E+7",
    "-0.000",
    "1.0",
    "0.1",
    "1E2",
    "1e+2",
    "1E-2",
    "4.50",
    "2e-3",
    "-5",
    "100",
    "9007199254740993",
    "9007199254740992",
    "-9007199254740993",
    "-9007199254740992",
    "9007199254740994",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1e21",
    "1e20",
    "100000000000000000000",
    "1000000000000000000000",
    "1e-6",
    "1e-7",
    "0.000001",
    "0.0000001",
    "5e-324",
    "4.9e-324",
    "2e-324",
    "2.2250738585072014e-308",
    "2.2250738585072011e-308",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "0e99999999999999999999",
    "1e-99999999999999999999",
    "0e-99999999999999999999",
    "1e00000000000000000000000001",
    "1.5e300",
    "1.5e-300",
    "123456789012345",
    "1234567890123456",
    "12345678901234567",
    "0.30000000000000004",
    "0.3",
    "333333333.33333329",
    "333333333.3333333",
    "1.0000000000000002",
    "1.00000000000000000001",
    "99999999999999999999e-20",
    "1e15",
    "1e16",
    "1e17",
    "[1.5, 2.25, -3.125, 0.5e1]",
    r#"{"n":1e2,"m":[0.1,1.0]}"#,
    "01",
    "1.",
    ".5",
    "+1",
    "1e",
    "1e+",
    "-",
    "--1",
    "1.5.5",
    "0x10",
    "NaN",
    "Infinity",
    // Strings and escapes.
    r#""\u0000\u001f\u007f\b\f\n\r\t\"\\\/""#,
    r#""\ud800""#,
    r#""\udc00""#,
    r#""\ud83d\ude00""#,
    r#""\ud83dx""#,
    r#""\u00e9é""#,
    r#""\uZZZZ""#,
    r#""\x""#,
    "\"tab\there\"",
    "\"\u{7f}\u{80}\u{ffff}\u{10ffff}\"",
    r#"{"\/":"\/"}"#,
    // Structure, whitespace and trailing input.
    "",
    " ",
    "\n\t\r ",
    "{}",
    "[]",
    " {\n\t\"a\" : [ 1 , 2 ] \r} ",
    "{} x",
    "{}}",
    "1 2",
    "[] ,",
    "[1,]",
    "{\"a\":1,}",
    "[",
    "{",
    "{\"a\"}",
    "{\"a\":}",
    "\u{feff}{}",
    "\u{a0}{}",
    "\u{c}{}",
    "null",
    "true",
    "false",
    "nul",
    "truee",
    "\"s\"",
    "[null,true,false]",
    r#"{"$serde_json::private::Number":"2"}"#,
];

/// Bodies with objects whose member is named serde_json's raw-value token, which the reference
/// (through `serde_json::Value` and its `raw_value` feature) read as the JSON text in that
/// member's string: here they are ordinary objects, each canonicalised as written.
const RAW_VALUE_TOKEN_BODIES: &[(&str, Option<&str>)] = &[
    (
        r#"{"$serde_json::private::RawValue":"{\"b\":1,\"a\":2}"}"#,
        Some(r#"{"$serde_json::private::RawValue":"{\"b\":1,\"a\":2}"}"#),
    ),
    (
        r#"{"\u0024serde_json::private::RawValue":"[1, 9007199254740993]"}"#,
        Some(r#"{"$serde_json::private::RawValue":"[1, 9007199254740993]"}"#),
    ),
    (
        r#"[{"$serde_json::private::RawValue":"-0"}, 1]"#,
        Some(r#"[{"$serde_json::private::RawValue":"-0"},1]"#),
    ),
    (
        r#"{"$serde_json::private::RawValue":5}"#,
        Some(r#"{"$serde_json::private::RawValue":5}"#),
    ),
    (
        r#"{"a":1,"$serde_json::private::RawValue":"2"}"#,
        Some(r#"{"$serde_json::private::RawValue":"2","a":1}"#),
    ),
    (
        r#"{"$serde_json::private::RawValue":"1","$serde_json::private::RawValue":"1"}"#,
        None,
    ),
    (r#"{"$serde_json::private::RawValue":"1","x":1e400}"#, None),
];

#[test]
fn raw_value_tokens_are_ordinary_member_names() {
    for (body, expected) in RAW_VALUE_TOKEN_BODIES {
        let canonical = jcs::canonicalize_lossless(body.as_bytes());
        let canonical = canonical.map(|bytes| String::from_utf8(bytes).unwrap());
        assert_eq!(canonical.as_deref(), *expected, "body: {body}");
    }
}

#[test]
fn edge_cases_match_the_reference() {
    for body in EDGE_CASES {
        assert_same_as_reference(body.as_bytes());
    }
    for bytes in [
        &b"\"\xff\""[..],
        b"{\"a\xc3\":1}",
        b"\"\xc0\xaf\"",
        b"\"\xed\xa0\x80\"",
    ] {
        assert_same_as_reference(bytes);
    }
}

#[test]
fn deep_nesting_matches_the_reference() {
    for depth in [1, 64, 126, 127, 128, 129, 200] {
        let arrays = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        let mixed = format!("{}{}", r#"[{"b":2,"a":"#.repeat(depth), "}]".repeat(depth));
        for body in [arrays, objects, mixed] {
            assert_same_as_reference(body.as_bytes());
        }
    }
}

/// A number token: mostly valid JSON, spanning integers, fractions, exponents and extremes.
fn number_token() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        "-0",
        "0",
        "9007199254740993",
        "1e400",
        "5e-324",
        "1.7976931348623157e308",
        "1e21",
        "0.1",
        "-0.0",
        "1.0",
        "18446744073709551616",
        "-9223372036854775809",
        "01",
        "1.",
    ]);
    let built = (
        any::<bool>(),
        "0|[1-9][0-9]{0,20}",
        prop::option::of("[0-9]{1,20}"),
        prop::option::of("[eE][+-]?[0-9]{1,3}"),
    )
        .prop_map(|(negative, int, frac, exp)| {
            let sign = if negative { "-" } else { "" };
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{sign}{int}{frac}{}", exp.unwrap_or_default())
        });
    prop_oneof![1 => special.prop_map(str::to_owned), 4 => built]
}

/// A member name or string, each character spelled raw or escaped: names come from a small
/// alphabet so that repeats (and repeats spelled differently) are common.
fn json_string() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a',
        'b',
        'A',
        'é',
        '\u{0}',
        '\n',
        '"',
        '\\',
        '/',
        '\u{7f}',
        '\u{e000}',
        '\u{ffff}',
        '😀',
        '\u{10000}',
    ]);
    prop::collection::vec((chars, 0..3u8), 0..3).prop_map(|chars| {
        let mut out = String::from("\"");
        for (c, spelling) in chars {
            out.push_str(&spell(c, spelling));
        }
        out.push('"');
        out
    })
}

fn spell(c: char, spelling: u8) -> String {
    match (c, spelling) {
        ('"', 0) => "\\\"".into(),
        ('\\', _) => "\\\\".into(),
        ('\u{0}', _) | ('"', _) => format!("\\u{:04x}", u32::from(c)),
        ('\n', 0) => "\\n".into(),
        ('\n', _) => "\\u000A".into(),
        ('/', 1) => "\\/".into(),
        (_, 2) => c
            .encode_utf16(&mut [0; 2])
            .iter()
            .map(|unit| format!("\\u{unit:04X}"))
            .collect(),
        _ => c.to_string(),
    }
}

/// Whitespace JSON allows between tokens.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r\n  "])
}

/// A JSON text (never a raw-value token: see `RAW_VALUE_TOKEN_BODIES` for those).
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number_token(),
        json_string(),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec((ws(), inner.clone()), 0..6).prop_map(|items| {
                let items: Vec<String> =
                    items.into_iter().map(|(w, v)| format!("{w}{v}")).collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec((json_string(), ws(), inner), 0..6).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(name, w, value)| format!("{name}{w}:{w}{value}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// A byte-level edit: overwrite, insert or delete at a position (taken modulo the length).
fn mutate(mut body: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, kind, byte) in edits {
        let at = if body.is_empty() { 0 } else { at % body.len() };
        match kind % 3 {
            0 if at < body.len() => body[at] = byte,
            1 => body.insert(at, byte),
            _ if at < body.len() => {
                body.remove(at);
            }
            _ => {}
        }
    }
    body
}

/// Bytes that JSON edits are made of: mostly structural and numeric, sometimes anything.
fn json_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(b"{}[]:,\" \\-+.eE0123456789auntrfl".to_vec()),
        1 => any::<u8>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn valid_json_matches_the_reference((lead, body, tail) in (ws(), json_text(), ws())) {
        let body = format!("{lead}{body}{tail}");
        prop_assert_eq!(
            jcs::canonicalize_lossless(body.as_bytes()),
            reference::canonicalize_lossless(body.as_bytes()),
            "body: {}", body
        );
    }

    #[test]
    fn mutated_json_matches_the_reference(
        body in json_text(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), json_byte()), 1..4),
    ) {
        let body = mutate(body.into_bytes(), &edits);
        prop_assert_eq!(
            jcs::canonicalize_lossless(&body),
            reference::canonicalize_lossless(&body),
            "body: {:?}", String::from_utf8_lossy(&body)
        );
    }

    #[test]
    fn arbitrary_bytes_match_the_reference(body in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(jcs::canonicalize_lossless(&body), reference::canonicalize_lossless(&body));
    }

    #[test]
    fn numbers_match_the_reference(numbers in prop::collection::vec(number_token(), 1..4)) {
        let body = format!("[{}]", numbers.join(","));
        prop_assert_eq!(
            jcs::canonicalize_lossless(body.as_bytes()),
            reference::canonicalize_lossless(body.as_bytes()),
            "body: {}", body
        );
    }
}
