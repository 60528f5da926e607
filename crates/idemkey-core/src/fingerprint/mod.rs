//! The request fingerprint (behaviour [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)): `fp-v1`, a versioned, length-prefixed encoding of
//! every request input that affects the operation, hashed with SHA-256.
//!
//! The encoding is, field by field, each byte string prefixed with its length as a big-endian
//! `u64`: the tag `fp-v1`; the method; the raw path; the number of query parameters, then each
//! name and value (raw, as sent), stable-sorted by name; the media type (empty when absent):
//! its lower-cased essence, then for each parameter `;name="value"`, names lower-cased, sorted
//! by name then value, values unquoted and written back quoted with `\` and `"` escaped, a
//! `charset` value lower-cased, and `charset=utf-8` of a JSON media type left out; the body digest (`jcs` or `raw`, then the SHA-256 of the canonical or raw bytes);
//! the number of declared headers present, then each lower-cased name and value, stable-sorted
//! by name. It can be reproduced outside Rust.

mod jcs;
mod media;

use std::fmt;

use sha2::{Digest, Sha256};

/// The SHA-256 fingerprint of a request.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Starts a fingerprint for a request with this method and raw path.
    pub fn builder<'a>(method: &'a str, path: &'a str) -> FingerprintBuilder<'a> {
        FingerprintBuilder {
            method,
            path,
            query: None,
            content_type: None,
            headers: Vec::new(),
        }
    }

    /// The fingerprint's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a fingerprint from stored bytes; `None` unless there are exactly 32.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

impl From<[u8; 32]> for Fingerprint {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// Collects the inputs of a request's fingerprint. Finish it with [`FingerprintBuilder::body`].
///
/// ```
/// use idemkey_core::Fingerprint;
///
/// let a = Fingerprint::builder("POST", "/v1/notes")
///     .content_type("application/json")
///     .body(br#"{"title": "x", "tags": [1, 2]}"#);
/// let b = Fingerprint::builder("POST", "/v1/notes")
///     .content_type("application/json; charset=utf-8")
///     .body(br#"{"tags":[1,2],"title":"x"}"#);
/// assert_eq!(a, b);
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct FingerprintBuilder<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    content_type: Option<&'a str>,
    headers: Vec<(String, &'a [u8])>,
}

impl<'a> FingerprintBuilder<'a> {
    /// The raw query string, without the `?`.
    pub fn query(mut self, query: Option<&'a str>) -> Self {
        self.query = query;
        self
    }

    /// The request's `Content-Type` value: its media type and parameters count (a JSON
    /// body's `charset=utf-8` does not: JSON is UTF-8).
    pub fn content_type(mut self, value: &'a str) -> Self {
        self.content_type = Some(value);
        self
    }

    /// A header the route declares relevant. Call once per value, in the order received.
    pub fn header(mut self, name: &str, value: &'a [u8]) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value));
        self
    }

    /// Hashes everything with the body, whose bytes are never kept.
    pub fn body(mut self, body: &[u8]) -> Fingerprint {
        let (media_type, with_parameters) = media::canonical(self.content_type.unwrap_or(""));
        let mut enc = Encoder(Sha256::new());
        enc.field(b"fp-v1");
        enc.field(self.method.as_bytes());
        enc.field(self.path.as_bytes());
        let mut query = query_pairs(self.query.unwrap_or(""));
        query.sort_by(|a, b| a.0.cmp(b.0));
        enc.count(query.len());
        for (name, value) in query {
            enc.field(name.as_bytes());
            enc.field(value.as_bytes());
        }
        enc.field(with_parameters.as_bytes());
        let (tag, digest) = body_digest(&media_type, body);
        enc.field(tag);
        enc.field(&digest);
        self.headers.sort_by(|a, b| a.0.cmp(&b.0));
        enc.count(self.headers.len());
        for (name, value) in &self.headers {
            enc.field(name.as_bytes());
            enc.field(value);
        }
        Fingerprint(enc.0.finalize().into())
    }
}

struct Encoder(Sha256);

impl Encoder {
    fn field(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.update(bytes);
    }

    fn count(&mut self, n: usize) {
        self.0.update((n as u64).to_be_bytes());
    }
}

fn query_pairs(query: &str) -> Vec<(&str, &str)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect()
}

/// The RFC 8785 form of a JSON body, or `None` when canonicalising it would lose information
/// (a repeated member name, a number that does not round-trip through an IEEE double) or it is
/// not JSON: exactly when the fingerprint hashes a JSON body canonically rather than raw.
pub fn canonical_json(body: &[u8]) -> Option<Vec<u8>> {
    jcs::canonicalize_lossless(body)
}

/// Whether a media type is JSON: `application/json` or any `+json` suffix.
pub fn is_json_media_type(media_type: &str) -> bool {
    media_type == "application/json" || media_type.ends_with("+json")
}

fn body_digest(media_type: &str, body: &[u8]) -> (&'static [u8], [u8; 32]) {
    if is_json_media_type(media_type)
        && let Some(canonical) = jcs::canonicalize_lossless(body)
    {
        return (b"jcs", Sha256::digest(&canonical).into());
    }
    (b"raw", Sha256::digest(body).into())
}

#[cfg(test)]
mod tests;
