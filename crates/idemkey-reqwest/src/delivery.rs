//! What the caller learns of how an answer came: the response's [`Delivery`] extension.

use crate::IdempotencyKey;

/// How an answer was obtained: in the response's extensions
/// (`response.extensions().get::<Delivery>()`) of every request the middleware handled.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The logical request's `Idempotency-Key`, in the form it was sent (`key.as_str()` is
    /// the key itself, `key.header_value()` the header's bytes); `None` for a request without
    /// one. A redirect to another origin drops the key from that hop on.
    pub key: Option<IdempotencyKey>,
    /// Attempts made, this answer's included.
    pub attempts: u32,
    /// The answer carries `Idempotent-Replayed: true`: the server replayed the answer it
    /// stored for this key (an earlier attempt executed the request).
    pub replayed: bool,
    /// Redirects followed on the way to this answer.
    pub redirects: u32,
}
