//! The client's `Idempotency-Key` (behaviour [§2](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#2-the-key)).

use std::fmt;

use sha2::{Digest, Sha256};

/// The longest key accepted, in characters, after unquoting.
pub const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key: 1..=255 visible ASCII characters, compared byte for byte.
///
/// Both the IETF form (a Structured Field String, `"abc"`) and the bare form (`abc`, as
/// Stripe clients send it) are accepted, and name the same key.
///
/// ```
/// use idemkey_core::Key;
///
/// let quoted = Key::parse(br#""order-42""#).unwrap();
/// let bare = Key::parse(b"order-42").unwrap();
/// assert_eq!(quoted, bare);
/// assert!(Key::parse(b"\"has space\"").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Box<str>);

/// Why a key was rejected. Every variant maps to the `key-invalid` problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty after unquoting.
    #[error("the key is empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] characters.
    #[error("the key is longer than {MAX_KEY_LEN} characters")]
    TooLong,
    /// A character outside visible ASCII (0x21..=0x7E), at this 0-based position of the value.
    #[error("the key has a character outside visible ASCII at position {0}")]
    InvalidCharacter(usize),
    /// A value starting with `"` that is not a well-formed Structured Field String.
    #[error("the key is a malformed quoted string")]
    MalformedQuoted,
    /// Several header lines, or a list value.
    #[error("the request carries more than one key")]
    Multiple,
}

impl Key {
    /// Parses one header value in either the quoted or the bare form.
    pub fn parse(value: &[u8]) -> Result<Self, KeyError> {
        let value = trim_ows(value);
        let unquoted = match value.first() {
            Some(b'"') => unquote(value)?,
            _ => value.to_vec(),
        };
        validate(&unquoted)?;
        // validate() admits only ASCII, so this conversion cannot fail.
        let text = String::from_utf8(unquoted).map_err(|_| KeyError::InvalidCharacter(0))?;
        Ok(Self(text.into_boxed_str()))
    }

    /// Parses the values of every `Idempotency-Key` header line of a request.
    ///
    /// Returns `Ok(None)` when there is none, and [`KeyError::Multiple`] for several lines.
    pub fn from_header_values<'a, I>(values: I) -> Result<Option<Self>, KeyError>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(KeyError::Multiple);
        }
        Self::parse(first).map(Some)
    }

    /// The key as it is compared and stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, non-reversible hash of the key, for logs: raw keys are never logged (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
    pub fn short_hash(&self) -> String {
        let digest = Sha256::digest(self.0.as_bytes());
        hex::encode(&digest[..6])
    }
}

impl fmt::Debug for Key {
    // Debug output ends up in logs; show the hash, never the key itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(#{})", self.short_hash())
    }
}

impl std::str::FromStr for Key {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s.as_bytes())
    }
}

fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// Parses an RFC 8941 sf-string that must make up the whole value.
fn unquote(value: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.iter().enumerate().skip(1);
    while let Some((i, &b)) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some((_, &c @ (b'"' | b'\\'))) => out.push(c),
                _ => return Err(KeyError::MalformedQuoted),
            },
            b'"' if i + 1 == value.len() => return Ok(out),
            // A closing quote followed by more text is a list or garbage.
            b'"' => return Err(list_or_malformed(&value[i + 1..])),
            0x20..=0x7E => out.push(b),
            _ => return Err(KeyError::InvalidCharacter(i)),
        }
    }
    Err(KeyError::MalformedQuoted)
}

fn list_or_malformed(rest: &[u8]) -> KeyError {
    if trim_ows(rest).first() == Some(&b',') {
        KeyError::Multiple
    } else {
        KeyError::MalformedQuoted
    }
}

fn validate(key: &[u8]) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(pos) = key.iter().position(|b| !(0x21..=0x7E).contains(b)) {
        return Err(KeyError::InvalidCharacter(pos));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quoted_and_bare_are_one_key() {
        assert_eq!(Key::parse(b"\"k\"").unwrap(), Key::parse(b"k").unwrap());
        assert_eq!(Key::parse(br#""a\"b\\c""#).unwrap().as_str(), r#"a"b\c"#);
    }

    #[test]
    fn limits_and_characters() {
        assert_eq!(Key::parse(b""), Err(KeyError::Empty));
        assert_eq!(Key::parse(b"\"\""), Err(KeyError::Empty));
        assert!(Key::parse(&[b'a'; 255]).is_ok());
        assert_eq!(Key::parse(&[b'a'; 256]), Err(KeyError::TooLong));
        assert_eq!(Key::parse(b"\"a b\""), Err(KeyError::InvalidCharacter(1)));
        assert_eq!(Key::parse(b"a\tb"), Err(KeyError::InvalidCharacter(1)));
        assert!(matches!(
            Key::parse("ké".as_bytes()),
            Err(KeyError::InvalidCharacter(_))
        ));
        assert!(Key::parse(b"!#$%&'()*+,-./:;<=>?@[]^_`{|}~").is_ok());
    }

    #[test]
    fn malformed_quoted_forms() {
        assert_eq!(Key::parse(b"\"abc"), Err(KeyError::MalformedQuoted));
        assert_eq!(Key::parse(b"\"a\\nb\""), Err(KeyError::MalformedQuoted));
        assert_eq!(Key::parse(b"\"a\"x"), Err(KeyError::MalformedQuoted));
        assert_eq!(Key::parse(b"\"a\", \"b\""), Err(KeyError::Multiple));
    }

    #[test]
    fn one_key_per_request() {
        let two: [&[u8]; 2] = [b"a", b"b"];
        assert_eq!(Key::from_header_values(two), Err(KeyError::Multiple));
        assert_eq!(Key::from_header_values(std::iter::empty()), Ok(None));
    }

    #[test]
    fn debug_hides_the_key() {
        let key = Key::parse(b"secret-key").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Key::parse(&bytes);
        }

        #[test]
        fn accepted_keys_round_trip(key in "[!-~]{1,255}") {
            // Every key has a quoted form; a bare value may not start with a quote.
            let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
            let from_quoted = Key::parse(quoted.as_bytes()).unwrap();
            prop_assert_eq!(from_quoted.as_str(), key.as_str());
            if !key.starts_with('"') {
                prop_assert_eq!(Key::parse(key.as_bytes()).unwrap(), from_quoted);
            }
        }
    }
}
