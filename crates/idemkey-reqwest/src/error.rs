//! The middleware's own errors, inside `reqwest_middleware::Error::Middleware`.

use http::StatusCode;

use crate::Reason;

/// Why the middleware returned no answer. It reaches the caller as
/// `reqwest_middleware::Error::Middleware`; `downcast_ref::<idemkey_reqwest::Error>()` reads
/// it, and its `source()` is the last attempt's own error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every attempt the policy allowed ended without an answer. The key, if any, is still
    /// good: sending the same request again with it is safe.
    #[error("no answer after {attempts} attempt(s){}, the last: {reason}", with_key(.key))]
    GaveUp {
        /// The `Idempotency-Key` every attempt carried.
        key: Option<String>,
        /// Attempts made.
        attempts: u32,
        /// How the last attempt ended.
        reason: Reason,
        /// The last attempt's error.
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
        /// The `Idempotency-Key` the attempt carried.
        key: Option<String>,
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
    /// The `Idempotency-Key` the request carried, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::GaveUp { key, .. } | Self::StreamNotRetryable { key, .. } => key.as_deref(),
        }
    }
}

fn with_key(key: &Option<String>) -> String {
    match key {
        Some(key) => format!(" with Idempotency-Key {key}"),
        None => String::new(),
    }
}
