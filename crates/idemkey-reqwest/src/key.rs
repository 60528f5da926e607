//! The key a logical request carries on every attempt.

use http::{HeaderMap, HeaderValue, Method};
use idemkey_core::{Key, KeyError};

use crate::Policy;

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

/// Why a request's `Idempotency-Key` header and the key given for it do not name one key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyChoiceError {
    /// The key given and the header's are two keys.
    #[error(
        "the key given, {given}, and the Idempotency-Key header's, {header}, differ: give one key"
    )]
    Differ {
        /// The key given.
        given: String,
        /// The header's key.
        header: String,
    },
    /// The request carries the header more than once.
    #[error("more than one Idempotency-Key header")]
    SeveralHeaders,
    /// The header's value is not a key.
    #[error("invalid Idempotency-Key header: {0}")]
    InvalidHeader(KeyError),
}

impl Policy {
    /// The key a request of `method` with `headers` is sent with, chosen before it is sent so
    /// that the caller can tell it (`idemkey send` prints it, to resume with): `given`, or the
    /// key of its one `Idempotency-Key` header (both: the same key), or else a fresh one for
    /// the [`methods`](Self::methods) that get one. Put it in the request's extensions and
    /// the middleware sends every attempt under it.
    pub fn request_key(
        &self,
        method: &Method,
        headers: &HeaderMap,
        given: Option<&IdempotencyKey>,
    ) -> Result<Option<IdempotencyKey>, KeyChoiceError> {
        match (given, header_key(headers)?) {
            (Some(given), Some(header)) if *given != header => Err(KeyChoiceError::Differ {
                given: given.to_string(),
                header: header.to_string(),
            }),
            (Some(given), _) => Ok(Some(given.clone())),
            (None, Some(header)) => Ok(Some(header)),
            (None, None) if self.keys(method) => Ok(Some(IdempotencyKey::random())),
            (None, None) => Ok(None),
        }
    }
}

/// The key of the request's one `Idempotency-Key` header, if it has one.
fn header_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, KeyChoiceError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyChoiceError::SeveralHeaders);
    }
    IdempotencyKey::new(&String::from_utf8_lossy(value.as_bytes()))
        .map(Some)
        .map_err(KeyChoiceError::InvalidHeader)
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

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(IDEMPOTENCY_KEY, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_key_given_or_the_headers_else_a_fresh_one_for_the_keyed_methods() {
        let policy = Policy::default();
        let given = IdempotencyKey::new("k1").unwrap();
        let key = |method: Method, header: &[&str], given: Option<&IdempotencyKey>| {
            policy
                .request_key(&method, &headers(header), given)
                .unwrap()
        };
        assert_eq!(key(Method::GET, &[], Some(&given)), Some(given.clone()));
        assert_eq!(key(Method::DELETE, &["\"k1\""], None), Some(given.clone()));
        assert_eq!(
            key(Method::POST, &["k1"], Some(&given)),
            Some(given.clone())
        );
        let fresh = key(Method::POST, &[], None).unwrap();
        assert_ne!(Some(fresh), key(Method::POST, &[], None));
        assert!(key(Method::PATCH, &[], None).is_some());
        assert_eq!(key(Method::PUT, &[], None), None);
        assert_eq!(key(Method::GET, &[], None), None);
    }

    #[test]
    fn two_keys_several_headers_or_a_bad_header_are_refused() {
        let policy = Policy::default();
        let given = IdempotencyKey::new("a").unwrap();
        let choice =
            |header: &[&str], given| policy.request_key(&Method::POST, &headers(header), given);
        assert!(matches!(
            choice(&["b"], Some(&given)),
            Err(KeyChoiceError::Differ { .. })
        ));
        assert!(matches!(
            choice(&["a", "a"], None),
            Err(KeyChoiceError::SeveralHeaders)
        ));
        assert!(matches!(
            choice(&["a b"], None),
            Err(KeyChoiceError::InvalidHeader(_))
        ));
    }
}
