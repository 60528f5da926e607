//! The key a logical request carries on every attempt.

use http::HeaderValue;
use idemkey_core::{Key, KeyError};

/// The header that carries the key, as the IETF draft names it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A key the caller chooses for one request instead of a fresh one: put it in the request's
/// extensions (`RequestBuilder::with_extension`), for example to resume a logical request that
/// an earlier process began.
///
/// ```
/// use idemkey_reqwest::IdempotencyKey;
///
/// let key = IdempotencyKey::new("order-42").unwrap();
/// assert_eq!(key.as_str(), "order-42");
/// assert_eq!(key.header_value(), r#""order-42""#);
/// assert!(IdempotencyKey::new("has space").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Key);

impl IdempotencyKey {
    /// A key of the caller's: 1 to 255 visible ASCII characters, bare (`abc`) or in the
    /// draft's quoted form (`"abc"`), which name the same key.
    pub fn new(key: &str) -> Result<Self, KeyError> {
        Key::parse(key.as_bytes()).map(Self)
    }

    /// A fresh random key: a version 4 UUID, 122 random bits.
    pub fn random() -> Self {
        let text = uuid::Uuid::new_v4().to_string();
        // A UUID's text is visible ASCII of 36 characters: always a valid key.
        Self(Key::parse(text.as_bytes()).unwrap_or_else(|_| unreachable!("a UUID is a valid key")))
    }

    /// The key itself, unquoted.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The header's value: the key as a Structured Field String (`"abc"`), the draft's form.
    pub fn header_value(&self) -> HeaderValue {
        let mut quoted = String::with_capacity(self.as_str().len() + 2);
        quoted.push('"');
        for c in self.as_str().chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        // Visible ASCII, escaped: always a valid header value.
        HeaderValue::try_from(quoted).unwrap_or_else(|_| unreachable!("visible ASCII"))
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_backslashes_are_escaped_in_the_header() {
        let key = IdempotencyKey::new(r#"a"b\c"#).unwrap();
        assert_eq!(key.header_value(), r#""a\"b\\c""#);
        let back = Key::parse(key.header_value().as_bytes()).unwrap();
        assert_eq!(back.as_str(), r#"a"b\c"#);
    }

    #[test]
    fn random_keys_differ_and_are_uuids() {
        let (a, b) = (IdempotencyKey::random(), IdempotencyKey::random());
        assert_ne!(a, b);
        assert!(uuid::Uuid::parse_str(a.as_str()).is_ok());
    }

    #[test]
    fn the_quoted_form_names_the_same_key() {
        let quoted = IdempotencyKey::new(r#""order-42""#).unwrap();
        assert_eq!(quoted, IdempotencyKey::new("order-42").unwrap());
    }
}
