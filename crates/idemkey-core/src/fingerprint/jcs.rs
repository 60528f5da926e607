//! RFC 8785 canonicalisation, used only when it loses nothing (contract §4).

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The JCS form of `body`, or `None` when the body is not JSON or canonicalising it would
/// lose information: a repeated member name, or a number that does not round-trip exactly
/// through the IEEE double that JCS serialises.
pub(crate) fn canonicalize_lossless(body: &[u8]) -> Option<Vec<u8>> {
    serde_json::from_slice::<NoRepeatedNames>(body).ok()?;
    if !numbers_round_trip(body) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json_canonicalizer::to_vec(&value).ok()
}

/// Deserialises any JSON, failing on an object that repeats a member name.
struct NoRepeatedNames;

impl<'de> Deserialize<'de> for NoRepeatedNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoRepeatedNames)
    }
}

impl<'de> Visitor<'de> for NoRepeatedNames {
    type Value = Self;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON without repeated member names")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoRepeatedNames>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !names.insert(name) {
                return Err(de::Error::custom("repeated member name"));
            }
            map.next_value::<NoRepeatedNames>()?;
        }
        Ok(self)
    }
}

/// Checks every number token of a body already known to be valid JSON.
fn numbers_round_trip(body: &[u8]) -> bool {
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => i = skip_string(body, i + 1),
            b'-' | b'0'..=b'9' => {
                let end = body[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(body.len(), |n| i + n);
                if !number_round_trips(&body[i..end]) {
                    return false;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    true
}

fn skip_string(body: &[u8], mut i: usize) -> usize {
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Whether the number JCS writes for `token` denotes exactly the value `token` denotes.
fn number_round_trips(token: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(token) else {
        return false;
    };
    let Ok(value) = text.parse::<f64>() else {
        return false;
    };
    if !value.is_finite() {
        return false;
    }
    let mut buffer = ryu_js::Buffer::new();
    let written = buffer.format_finite(value);
    match (Decimal::parse(text), Decimal::parse(written)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A decimal number in a normal form: sign, significant digits (no leading or trailing
/// zeros), and the exponent of the last digit. Zero keeps its sign.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all: String = [int, frac].concat();
        let exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
        let trimmed = all.trim_start_matches('0');
        let digits = trimmed.trim_end_matches('0');
        let zeros = i64::try_from(trimmed.len() - digits.len()).ok()?;
        let exponent = if digits.is_empty() {
            0
        } else {
            exponent.checked_add(zeros)?
        };
        Some(Self {
            negative,
            digits: digits.to_owned(),
            exponent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jcs(body: &str) -> Option<String> {
        canonicalize_lossless(body.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn rfc8785_vectors() {
        // RFC 8785 §3.2.2 (structure), §3.2.3 (sorting by UTF-16 code units) and Appendix B.
        let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]}"#;
        // 333333333.33333329 is not exactly representable: canonicalising it would change its
        // value, so this body is hashed raw; the rest of the vector must canonicalise.
        assert_eq!(jcs(input), None);
        let exact = input.replace("333333333.33333329", "333333333.3333333");
        assert_eq!(
            jcs(&exact).unwrap(),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        let sorting = r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(jcs(sorting).unwrap(), expected);
    }

    #[test]
    fn lossy_bodies_are_refused() {
        assert_eq!(jcs(r#"{"n": 9007199254740993}"#), None);
        assert!(jcs(r#"{"n": 9007199254740992}"#).is_some());
        assert_eq!(jcs(r#"{"a": 1, "a": 2}"#), None);
        assert_eq!(jcs(r#"{"a": 1, "\u0061": 2}"#), None);
        assert_eq!(jcs(r#"{"n": 1e400}"#), None);
        assert_eq!(jcs(r#"{"n": -0}"#), None);
        assert_eq!(jcs(r#"{"n": 0.10000000000000001}"#), None);
        assert_eq!(jcs("{\"a\":1} x"), None);
    }

    #[test]
    fn exact_numbers_are_kept() {
        assert_eq!(jcs("[1.0, 1e2, 0.1, -5, 0]").unwrap(), "[1,100,0.1,-5,0]");
        assert_eq!(jcs(r#"{"s": "1e400 -0"}"#).unwrap(), r#"{"s":"1e400 -0"}"#);
    }

    #[test]
    fn decimal_normal_form() {
        assert_eq!(Decimal::parse("1.50e1"), Decimal::parse("15"));
        assert_eq!(Decimal::parse("0.000"), Decimal::parse("0"));
        assert_ne!(Decimal::parse("-0"), Decimal::parse("0"));
        assert_eq!(Decimal::parse("1e99999999999999999999"), None);
    }
}
