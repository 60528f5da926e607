//! The middleware's own errors, inside `reqwest_middleware::Error::Middleware`.

use http::{Method, StatusCode};

use crate::{IdempotencyKey, Reason};

/// Why the middleware returned no answer. It reaches the caller as
/// `reqwest_middleware::Error::Middleware`; `downcast_ref::<idemkey_reqwest::Error>()` reads
/// it, and its `source()` is the last attempt's own error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every attempt the policy allowed ended without an answer. The key, if any, is still
    /// good: sending the same request again with it is safe.
    #[error(
        "no answer after {attempts} attempt(s){}, the last: {reason}; the outcome is unknown",
        with_key(.key)
    )]
    GaveUp {
        /// The `Idempotency-Key` every attempt carried, in the form it was sent.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// How the last attempt ended.
        reason: Reason,
        /// The last attempt's error.
        #[source]
        source: reqwest_middleware::Error,
    },
    /// An attempt ended without an answer after the request was sent, so the outcome is
    /// unknown, and sending it again is not safe without the server's help: the request's
    /// method is not idempotent, and it carried no key that its server is declared to honour
    /// ([`Policy::with_base`](crate::Policy::with_base)). Nothing was sent again.
    #[error(
        "no answer ({reason}) to {method} {origin}, so the outcome is unknown; not sent again: \
         {method} is not idempotent and the request carried no key its server is declared to \
         honour{}",
        with_key(.key)
    )]
    NotRetried {
        /// The request's `Idempotency-Key`, if it carried one, in the form it was sent.
        key: Option<IdempotencyKey>,
        /// The request's method.
        method: Method,
        /// The scheme, host and port the request went to.
        origin: String,
        /// How the attempt ended.
        reason: Reason,
        /// The attempt's error.
        #[source]
        source: reqwest_middleware::Error,
    },
    /// The request's body is a stream, which cannot be sent twice, and its one attempt needs
    /// a retry. Give the request a body in memory (bytes, text, JSON) to have it retried.
    #[error(
        "the request's body is a stream, which cannot be sent again, and its attempt needs a retry ({reason}{}){}: give it a body in memory to have it retried",
        status.map(|s| format!(", {s}")).unwrap_or_default(),
        with_key(.key)
    )]
    StreamNotRetryable {
        /// The `Idempotency-Key` the attempt carried, in the form it was sent.
        key: Option<IdempotencyKey>,
        /// Why it needs a retry.
        reason: Reason,
        /// The answer's status, when there was an answer.
        status: Option<StatusCode>,
        /// The attempt's error, when there was no answer.
        #[source]
        source: Option<reqwest_middleware::Error>,
    },
}

impl Error {
    /// The `Idempotency-Key` the request carried, if any, in the form it was sent.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::GaveUp { key, .. }
            | Self::NotRetried { key, .. }
            | Self::StreamNotRetryable { key, .. } => key.as_ref(),
        }
    }
}

fn with_key(key: &Option<IdempotencyKey>) -> String {
    match key {
        Some(key) => format!(" with Idempotency-Key {}", wire(key)),
        None => String::new(),
    }
}

/// The key's header value as sent.
fn wire(key: &IdempotencyKey) -> String {
    String::from_utf8_lossy(key.header_value().as_bytes()).into_owned()
}
