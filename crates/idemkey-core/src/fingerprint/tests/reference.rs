//! A verbatim copy of `jcs.rs` as it was before the single-pass rewrite: the oracle the
//! equivalence tests hold the new code to, since fingerprints are persisted and compared
//! across versions.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The JCS form of `body`, or `None` when the body is not JSON or canonicalising it would
/// lose information: a repeated member name, or a number that does not round-trip exactly
/// through the IEEE double that JCS serialises.
pub(super) fn canonicalize_lossless(body: &[u8]) -> Option<Vec<u8>> {
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
