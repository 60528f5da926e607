//! RFC 8785 canonicalisation, used only when it loses nothing (behaviour [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)).
//!
//! One parse writes the canonical form and rejects repeated member names; a lexical pass then
//! checks the numbers, since serde_json hands a visitor their value but not their text. The
//! bytes are those of the earlier three-pass version (`serde_json::Value` serialised by
//! `serde_json_canonicalizer`), which persisted fingerprints depend on, except for one
//! kind of body that version got wrong: see [`canonicalize_lossless`].

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use numbers::{EXACT_INTEGERS, numbers_round_trip};

mod numbers;

/// The JCS form of `body`, or `None` when the body is not JSON or canonicalising it would
/// lose information: a repeated member name, or a number that does not round-trip exactly
/// through the IEEE double that JCS serialises.
///
/// An object with a member named `$serde_json::private::RawValue` is an ordinary object here.
/// The earlier version, through `serde_json::Value` (whose `raw_value` feature the workspace
/// enables), read such an object as the JSON text in that member's string, unchecked, so
/// `{"$serde_json::private::RawValue":"[1]"}` and `[1]` shared a fingerprint.
pub(crate) fn canonicalize_lossless(body: &[u8]) -> Option<Vec<u8>> {
    let mut canonical = Canonical::with_capacity(body.len());
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    (&mut canonical).deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let exact = !canonical.numbers_to_check || numbers_round_trip(body);
    exact.then_some(canonical.out)
}

/// The canonical form being written while the body is parsed.
struct Canonical<'de> {
    out: Vec<u8>,
    /// The members of the objects still open, innermost last, so that one allocation serves
    /// every object.
    members: Vec<Member<'de>>,
    /// Where an object's members are put in order before going back into `out`.
    scratch: Vec<u8>,
    /// Whether a number may not be exactly what JCS writes for it: one with a fraction or an
    /// exponent, or an integer beyond ±2^53. Smaller integers are their own double, and
    /// their own shortest decimal.
    numbers_to_check: bool,
}

/// An object member already written: its name, and where its `"name":value` is in `out`.
struct Member<'de> {
    name: Cow<'de, str>,
    span: Range<usize>,
}

impl<'de> Canonical<'de> {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            out: Vec::with_capacity(capacity),
            members: Vec::new(),
            scratch: Vec::new(),
            numbers_to_check: false,
        }
    }

    /// Writes a number as the IEEE double JCS (and serde_json_canonicalizer) turns it into.
    fn number(&mut self, value: f64) {
        if value.is_finite() {
            let mut buffer = ryu_js::Buffer::new();
            self.out
                .extend_from_slice(buffer.format_finite(value).as_bytes());
        } else {
            // serde_json never yields one; `Value` would have held it as null.
            self.out.extend_from_slice(b"null");
        }
    }

    /// Writes a string with serde_json's escapes, which are the ones JCS prescribes.
    fn string<E: de::Error>(&mut self, value: &str) -> Result<(), E> {
        serde_json::to_writer(&mut self.out, value).map_err(E::custom)
    }

    /// Puts the members of the object whose text starts at `start` (after its `{`) and whose
    /// members start at `first` in JCS order, failing on a repeated name.
    fn order_members<E: de::Error>(&mut self, start: usize, first: usize) -> Result<(), E> {
        let Self {
            out,
            members,
            scratch,
            ..
        } = self;
        let object = &mut members[first..];
        // Written in arrival order, which is often already the canonical one.
        if !object.is_sorted_by(|a, b| utf16_cmp(&a.name, &b.name) == Ordering::Less) {
            object.sort_unstable_by(|a, b| utf16_cmp(&a.name, &b.name));
            if object.windows(2).any(|pair| pair[0].name == pair[1].name) {
                return Err(E::custom("repeated member name"));
            }
            scratch.clear();
            for (i, member) in object.iter().enumerate() {
                if i > 0 {
                    scratch.push(b',');
                }
                scratch.extend_from_slice(&out[member.span.clone()]);
            }
            // Same length, so the spans the enclosing objects hold stay right.
            out.truncate(start);
            out.extend_from_slice(scratch);
        }
        members.truncate(first);
        Ok(())
    }
}

/// The order JCS sorts member names in: by UTF-16 code units, without encoding them.
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.iter().zip(b).find(|(x, y)| x != y) {
        Some((&x, &y)) => utf16_rank(x).cmp(&utf16_rank(y)),
        None => a.len().cmp(&b.len()),
    }
}

/// Ranks the first differing UTF-8 bytes of two names (both start a character, or both
/// continue one) as their UTF-16 code units compare. That is their own order, except that a
/// character beyond U+FFFF (lead byte 0xF0 to 0xF4) is a surrogate pair, which sorts below
/// U+E000 to U+FFFF (lead byte 0xEE or 0xEF).
fn utf16_rank(byte: u8) -> u8 {
    match byte {
        0xEE | 0xEF => byte + 0x10,
        0xF0.. => byte - 2,
        _ => byte,
    }
}

impl<'de> DeserializeSeed<'de> for &mut Canonical<'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Canonical<'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON without repeated member names")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_bool<E>(self, value: bool) -> Result<(), E> {
        let text: &[u8] = if value { b"true" } else { b"false" };
        self.out.extend_from_slice(text);
        Ok(())
    }
    // JCS writes every number as JavaScript's double, integers included.
    fn visit_i64<E>(self, value: i64) -> Result<(), E> {
        self.numbers_to_check |= value.unsigned_abs() > EXACT_INTEGERS;
        self.number(value as f64);
        Ok(())
    }
    fn visit_u64<E>(self, value: u64) -> Result<(), E> {
        self.numbers_to_check |= value > EXACT_INTEGERS;
        self.number(value as f64);
        Ok(())
    }
    // serde_json reads a number as `f64` when it has a fraction or an exponent (or is -0, or
    // too long for 64 bits); only the text tells whether the double is exactly it.
    fn visit_f64<E>(self, value: f64) -> Result<(), E> {
        self.numbers_to_check = true;
        self.number(value);
        Ok(())
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        self.string(value)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        while seq
            .next_element_seed(Element {
                canonical: &mut *self,
                first,
            })?
            .is_some()
        {
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let first = self.members.len();
        self.out.push(b'{');
        let start = self.out.len();
        while let Some(name) = map.next_key_seed(Name)? {
            if self.members.len() > first {
                self.out.push(b',');
            }
            let begin = self.out.len();
            self.string(&name)?;
            self.out.push(b':');
            map.next_value_seed(&mut *self)?;
            let span = begin..self.out.len();
            self.members.push(Member { name, span });
        }
        self.order_members(start, first)?;
        self.out.push(b'}');
        Ok(())
    }
}

/// An array element, preceded by a comma unless it is the first: the seed only runs when
/// there is an element.
struct Element<'a, 'de> {
    canonical: &'a mut Canonical<'de>,
    first: bool,
}

impl<'de> DeserializeSeed<'de> for Element<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if !self.first {
            self.canonical.out.push(b',');
        }
        deserializer.deserialize_any(self.canonical)
    }
}

/// A member name, borrowed from the body unless it holds escapes.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(value))
    }
    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value.to_owned()))
    }
    fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
    fn serde_json_reads_numbers_correctly_rounded() {
        // Without serde_json's `float_roundtrip` feature (which this crate turns on), 1e-23 would be read as 1 / 1e23, a double away from the nearest one, and this
        // body's canonical form, hence its fingerprint, would change.
        assert_eq!(
            jcs("[1e-23, 7e-23, 12345e-25]").unwrap(),
            "[1e-23,7e-23,1.2345e-21]"
        );
    }

    #[test]
    fn member_names_sort_by_utf16() {
        let mut names = [
            "\u{10000}",
            "\u{e000}",
            "\u{ffff}",
            "z",
            "",
            "é",
            "\u{d7ff}",
            "😀",
        ];
        names.sort_by(|a, b| utf16_cmp(a, b));
        let expected = [
            "",
            "z",
            "é",
            "\u{d7ff}",
            "\u{10000}",
            "😀",
            "\u{e000}",
            "\u{ffff}",
        ];
        assert_eq!(names, expected);
    }

    /// Names from characters at each UTF-8 length and either side of the surrogates.
    fn name() -> impl Strategy<Value = String> {
        let chars = [
            'a',
            'z',
            '\u{7f}',
            '\u{80}',
            'é',
            '\u{7ff}',
            '\u{800}',
            '\u{d7ff}',
            '\u{e000}',
            '\u{ffff}',
            '\u{10000}',
            '😀',
            '\u{10ffff}',
        ];
        prop::collection::vec(prop::sample::select(chars.to_vec()), 0..4)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        #[test]
        fn utf16_order_is_that_of_the_encoded_names(a in name(), b in name()) {
            prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

    }
}
