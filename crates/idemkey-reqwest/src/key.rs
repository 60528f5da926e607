//! The key a logical request carries on every attempt.

use http::{HeaderMap, HeaderValue, Method};
use idemkey_core::{Key, KeyError};

use crate::Policy;

/// The header that carries the key, as the IETF draft names it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A logical request's key, in the exact form its header is sent in: the key the caller
/// chooses for one request (put it in the request's extensions with
/// `RequestBuilder::with_extension`, for example to resume a logical request that an earlier
/// process began), and the key the middleware reports in [`Delivery`](crate::Delivery) and
/// [`Error`](crate::Error).
///
/// Two forms name one key: bare (`abc`) and the draft's quoted string (`"abc"`). A server that
/// stores the header verbatim sees them as two keys, so the form is part of the value:
/// [`new`](Self::new) and [`random`](Self::random) give the quoted form, and
/// [`from_header`](Self::from_header) keeps a header's form as written. Before its first
/// attempt the middleware puts the key it sends into the request's extensions, so that a retry
/// layer outside it, or a later resume, sends the same bytes.
///
/// ```
/// use idemkey_reqwest::IdempotencyKey;
///
/// let key = IdempotencyKey::new("order-42").unwrap();
/// assert_eq!(key.as_str(), "order-42");
/// assert_eq!(key.header_value(), r#""order-42""#);
/// assert!(IdempotencyKey::new("has space").is_err());
///
/// let bare = IdempotencyKey::from_header(&"order-42".parse().unwrap()).unwrap();
/// assert_eq!(bare.as_str(), "order-42");
/// assert_eq!(bare.header_value(), "order-42");
/// assert!(bare.names_same_key(&key) && bare != key);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    key: Key,
    /// The header's value exactly as sent.
    wire: HeaderValue,
}

impl IdempotencyKey {
    /// A key of the caller's, sent in the draft's quoted form: 1 to 255 visible ASCII
    /// characters, bare (`abc`) or already quoted (`"abc"`), which name the same key.
    pub fn new(key: &str) -> Result<Self, KeyError> {
        Key::parse(key.as_bytes()).map(Self::quoted)
    }

    /// The key of an `Idempotency-Key` header's value, kept in the form it is written in.
    pub fn from_header(value: &HeaderValue) -> Result<Self, KeyError> {
        let key = Key::parse(value.as_bytes())?;
        Ok(Self {
            key,
            wire: value.clone(),
        })
    }

    /// A fresh random key: a version 4 UUID, 122 random bits, in the quoted form.
    pub fn random() -> Self {
        let text = uuid::Uuid::new_v4().to_string();
        // A UUID's text is visible ASCII of 36 characters: always a valid key.
        let key =
            Key::parse(text.as_bytes()).unwrap_or_else(|_| unreachable!("a UUID is a valid key"));
        Self::quoted(key)
    }

    /// The key itself, unquoted.
    pub fn as_str(&self) -> &str {
        self.key.as_str()
    }

    /// The header's value, exactly as it is sent: the draft's Structured Field String
    /// (`"abc"`) for a key made by [`new`](Self::new) or [`random`](Self::random), the
    /// header's own bytes for one read [`from_header`](Self::from_header).
    pub fn header_value(&self) -> HeaderValue {
        self.wire.clone()
    }

    /// Whether `other` names the same key, in whichever form (`abc` and `"abc"` do).
    pub fn names_same_key(&self, other: &Self) -> bool {
        self.key == other.key
    }

    /// Whether the header's value is the quoted form that [`new`](Self::new) gives: a resume
    /// by `IdempotencyKey::new(key.as_str())` (or `idemkey send --key`) sends the same bytes.
    pub fn is_quoted_form(&self) -> bool {
        self.wire == quote(&self.key)
    }

    fn quoted(key: Key) -> Self {
        let wire = quote(&key);
        Self { key, wire }
    }
}

/// The key as a Structured Field String: quotes and backslashes escaped, in quotes.
fn quote(key: &Key) -> HeaderValue {
    let mut quoted = String::with_capacity(key.as_str().len() + 2);
    quoted.push('"');
    for c in key.as_str().chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    // Visible ASCII, escaped: always a valid header value.
    HeaderValue::try_from(quoted).unwrap_or_else(|_| unreachable!("visible ASCII"))
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
    /// that the caller can tell it (`idemkey send` prints it, to resume with): the key of its
    /// one `Idempotency-Key` header, in the header's form, or `given` (both: they must name
    /// the same key, and the header's form is kept), or else a fresh one for the
    /// [`methods`](Self::methods) that get one. Put it in the request's extensions and the
    /// middleware sends every attempt under it, in that form.
    pub fn request_key(
        &self,
        method: &Method,
        headers: &HeaderMap,
        given: Option<&IdempotencyKey>,
    ) -> Result<Option<IdempotencyKey>, KeyChoiceError> {
        match (given, header_key(headers)?) {
            (Some(given), Some(header)) if !given.names_same_key(&header) => {
                Err(KeyChoiceError::Differ {
                    given: given.to_string(),
                    header: header.to_string(),
                })
            }
            // The header is what is sent: its form is the key's.
            (Some(_), Some(header)) => Ok(Some(header)),
            (Some(given), None) => Ok(Some(given.clone())),
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
    IdempotencyKey::from_header(value)
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
    fn a_headers_key_keeps_its_form() {
        let bare = IdempotencyKey::from_header(&HeaderValue::from_static("k")).unwrap();
        let quoted = IdempotencyKey::from_header(&HeaderValue::from_static("\"k\"")).unwrap();
        assert_eq!(bare.header_value(), "k");
        assert_eq!(quoted.header_value(), "\"k\"");
        assert!(bare.names_same_key(&quoted) && bare != quoted);
        assert!(quoted.is_quoted_form() && !bare.is_quoted_form());
        assert_eq!(quoted, IdempotencyKey::new("k").unwrap());
        assert!(IdempotencyKey::from_header(&HeaderValue::from_static("a b")).is_err());
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
        // Both: the header is what is sent, so its form is the key's.
        let bare = key(Method::POST, &["k1"], Some(&given)).unwrap();
        assert_eq!(bare.header_value(), "k1");
        assert!(bare.names_same_key(&given) && !bare.is_quoted_form());
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
